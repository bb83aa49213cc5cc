// libFuzzer entry for emu's PTX loader and interpreter: the input is PTX
// text. It must load or be rejected with a diagnostic; what loads is run
// (every kernel, 2 blocks of 64 threads, pointer parameters aimed at small
// allocations) under a low watchdog. A Fault is a fine outcome; a crash, a
// sanitizer report, a hang or a huge allocation is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu/interp.h"

std::string ptxlm_fuzz_one(const uint8_t* data, size_t size) {
    if (size > 64 * 1024) return "skipped: larger than 64 KiB";
    static const bool init = [] {
        setenv("PTXLM_EMU_WATCHDOG", "100000", 0);   // spinning inputs end quickly
        return true;
    }();
    (void)init;
    std::string log;
    const auto prog = ptxlm::emu::load_program({reinterpret_cast<const char*>(data), size}, &log);
    if (!prog) return "rejected: " + log.substr(0, log.find('\n'));
    ptxlm::emu::Memory mem;
    std::vector<uint64_t> buffers;
    for (int i = 0; i < 4; ++i) buffers.push_back(mem.alloc(64 * 1024));
    std::string out = "loaded:";
    for (const auto& k : ptxlm::emu::program_kernels(*prog)) {
        // 8-byte params get the buffers in turn; everything else stays 0.
        std::vector<uint8_t> params(k.param_bytes, 0);
        size_t next = 0;
        for (const auto& p : k.params)
            if (p.size == 8 && p.offset + 8 <= params.size()) {
                const uint64_t a = buffers[next++ % buffers.size()];
                std::memcpy(params.data() + p.offset, &a, 8);
            }
        ptxlm::emu::LaunchConfig cfg;
        cfg.grid = {2, 1, 1};
        cfg.block = {64, 1, 1};
        cfg.params = params.data();
        cfg.params_size = uint32_t(params.size());
        const auto fault = ptxlm::emu::run_kernel(*prog, k.name, cfg, mem, nullptr);
        out += " " + k.name + (fault ? " (fault " + std::to_string(fault->cuda_error) + ")" : " (ran)");
    }
    return out;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    (void)ptxlm_fuzz_one(data, size);
    return 0;
}
