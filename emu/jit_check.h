// The real JIT's verdict on a module, taken from the toolkit's ptxas, so that
// emu rejects what a GPU driver would reject with the same diagnostics and
// reports the register counts the hardware would use.
//
// ptxas is found through $PTXLM_PTXAS, else the toolkit path baked in at build
// time. PTXLM_EMU_PTXAS=0 turns the check off (stated on stderr once). Results
// are cached by content hash in $PTXLM_EMU_JIT_CACHE (default
// $XDG_CACHE_HOME/ptxlm/emu-jit or ~/.cache/ptxlm/emu-jit), so a test suite
// pays ptxas once per distinct module.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace ptxlm::emu {

struct JitVerdict {
    bool checked = false;      // false: no ptxas (or disabled); `log` says why
    bool ok = true;            // ptxas accepted the module
    std::string log;           // ptxas's output (errors, or the -v report)
    std::map<std::string, unsigned> regs;   // registers per thread, by entry name
};

// Runs (or recalls) `ptxas -arch=<arch> -v` on the module. Never throws.
JitVerdict jit_check(std::string_view ptx, const std::string& arch);

}  // namespace ptxlm::emu
