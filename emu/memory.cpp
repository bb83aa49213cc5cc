// Device limits, the global-memory registry and the Stats helpers.
//
// Device addresses start at 0x7e00'0000'0000 (a range no host allocation uses
// on x86-64 Linux in practice) and every allocation is followed by an unmapped
// gap of at least 4 KiB, so an access just past the end of one buffer faults
// instead of landing in the next.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "interp.h"
#include "stats.h"

namespace ptxlm::emu {

namespace {

uint64_t env_u64(const char* name, uint64_t fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    char* e = nullptr;
    unsigned long long x = std::strtoull(v, &e, 10);
    return (e && *e == 0 && x > 0) ? x : fallback;
}

constexpr uint64_t kBase = 0x7e0000000000ull;
constexpr uint64_t kGap = 4096;

}  // namespace

const DeviceLimits& device_limits() {
    static const DeviceLimits lim = [] {
        DeviceLimits l;
        l.sm_count = uint32_t(env_u64("PTXLM_EMU_SMS", l.sm_count));
        l.regs_per_sm = uint32_t(env_u64("PTXLM_EMU_REGS_PER_SM", l.regs_per_sm));
        l.total_mem = env_u64("PTXLM_EMU_MEM_MB", l.total_mem >> 20) << 20;
        return l;
    }();
    return lim;
}

struct Memory::Impl {
    struct Block {
        uint64_t size;
        std::unique_ptr<uint8_t[]> owned;   // empty for mapped host memory
        uint8_t* data;
    };
    std::map<uint64_t, Block> blocks;   // start -> allocation
    uint64_t next = kBase;
    uint64_t used = 0;
    mutable std::mutex mu;
};

Memory::Memory() : impl_(std::make_unique<Impl>()) {}
Memory::~Memory() = default;

uint64_t Memory::alloc(uint64_t bytes) {
    std::lock_guard<std::mutex> g(impl_->mu);
    if (bytes == 0) bytes = 1;
    if (bytes > device_limits().total_mem || impl_->used + bytes > device_limits().total_mem) return 0;
    std::unique_ptr<uint8_t[]> data(new (std::nothrow) uint8_t[bytes]);
    if (!data) return 0;
    // Fresh device memory holds garbage on a GPU; fill with a recognisable
    // pattern so code that reads before writing does not get lucky zeros.
    std::memset(data.get(), 0xcd, bytes);
    uint64_t addr = impl_->next;
    impl_->next = (addr + bytes + kGap + 255) / 256 * 256;
    impl_->used += bytes;
    uint8_t* host = data.get();
    impl_->blocks.emplace(addr, Impl::Block{bytes, std::move(data), host});
    return addr;
}

uint64_t Memory::map_host(uint8_t* host, uint64_t bytes) {
    std::lock_guard<std::mutex> g(impl_->mu);
    if (!host || bytes == 0) return 0;
    uint64_t addr = impl_->next;
    impl_->next = (addr + bytes + kGap + 255) / 256 * 256;
    impl_->blocks.emplace(addr, Impl::Block{bytes, nullptr, host});
    return addr;
}

bool Memory::free(uint64_t addr) {
    std::lock_guard<std::mutex> g(impl_->mu);
    auto it = impl_->blocks.find(addr);
    if (it == impl_->blocks.end()) return false;
    if (it->second.owned) impl_->used -= it->second.size;
    impl_->blocks.erase(it);
    return true;
}

uint8_t* Memory::translate(uint64_t addr, uint64_t n) {
    std::lock_guard<std::mutex> g(impl_->mu);
    auto it = impl_->blocks.upper_bound(addr);
    if (it == impl_->blocks.begin()) return nullptr;
    --it;
    uint64_t off = addr - it->first;
    if (off >= it->second.size || n > it->second.size - off) return nullptr;
    return it->second.data + off;
}

bool Memory::range(uint64_t addr, uint64_t* base, uint64_t* size, uint8_t** host, bool* mapped) {
    std::lock_guard<std::mutex> g(impl_->mu);
    auto it = impl_->blocks.upper_bound(addr);
    if (it == impl_->blocks.begin()) return false;
    --it;
    if (addr - it->first >= it->second.size) return false;
    *base = it->first;
    *size = it->second.size;
    *host = it->second.data;
    if (mapped) *mapped = !it->second.owned;
    return true;
}

uint64_t Memory::used() const {
    std::lock_guard<std::mutex> g(impl_->mu);
    return impl_->used;
}

void Stats::finish() {
    uint64_t n = 0;
    for (auto& [base, bits] : touched)
        for (uint64_t w : bits) n += uint64_t(__builtin_popcountll(w));
    unique_global_bytes = n;
}

Stats& Stats::operator+=(const Stats& o) {
    launches += o.launches;
    warp_instructions += o.warp_instructions;
    thread_instructions += o.thread_instructions;
    for (size_t i = 0; i < kInstClasses; ++i) by_class[i] += o.by_class[i];
    global_load_bytes += o.global_load_bytes;
    global_store_bytes += o.global_store_bytes;
    global_atomic_bytes += o.global_atomic_bytes;
    global_load_requests += o.global_load_requests;
    global_store_requests += o.global_store_requests;
    global_load_sectors += o.global_load_sectors;
    global_store_sectors += o.global_store_sectors;
    shared_load_bytes += o.shared_load_bytes;
    shared_store_bytes += o.shared_store_bytes;
    shared_load_wavefronts += o.shared_load_wavefronts;
    shared_store_wavefronts += o.shared_store_wavefronts;
    shared_load_ideal_wavefronts += o.shared_load_ideal_wavefronts;
    shared_store_ideal_wavefronts += o.shared_store_ideal_wavefronts;
    barriers += o.barriers;
    spin_yields += o.spin_yields;
    spin_waits += o.spin_waits;
    spin_instructions += o.spin_instructions;
    grid_syncs += o.grid_syncs;
    inflight_batches += o.inflight_batches;
    inflight_bytes_sum += o.inflight_bytes_sum;
    inflight_bytes_max = std::max(inflight_bytes_max, o.inflight_bytes_max);
    dependent_load_chain_max = std::max(dependent_load_chain_max, o.dependent_load_chain_max);
    prologue_waits += o.prologue_waits;
    prefetch_requests += o.prefetch_requests;
    prefetch_bytes += o.prefetch_bytes;
    for (auto& [base, n] : o.load_sectors_by_alloc) load_sectors_by_alloc[base] += n;
    for (auto& [base, bits] : o.touched) {
        auto& mine = touched[base];
        if (mine.size() < bits.size()) mine.resize(bits.size());
        for (size_t i = 0; i < bits.size(); ++i) mine[i] |= bits[i];
    }
    finish();
    return *this;
}

std::string Stats::to_json() const {
    std::ostringstream s;
    s << "{\"launches\":" << launches << ",\"warp_instructions\":" << warp_instructions
      << ",\"thread_instructions\":" << thread_instructions << ",\"instructions_by_class\":{";
    for (size_t i = 0; i < kInstClasses; ++i) s << (i ? "," : "") << '"' << kInstClassNames[i] << "\":" << by_class[i];
    s << "},\"global_load_bytes\":" << global_load_bytes
      << ",\"global_store_bytes\":" << global_store_bytes << ",\"global_atomic_bytes\":" << global_atomic_bytes
      << ",\"global_load_requests\":" << global_load_requests << ",\"global_store_requests\":" << global_store_requests
      << ",\"global_load_sectors\":" << global_load_sectors << ",\"global_store_sectors\":" << global_store_sectors
      << ",\"shared_load_bytes\":" << shared_load_bytes << ",\"shared_store_bytes\":" << shared_store_bytes
      << ",\"shared_load_wavefronts\":" << shared_load_wavefronts << ",\"shared_store_wavefronts\":" << shared_store_wavefronts
      << ",\"shared_load_ideal_wavefronts\":" << shared_load_ideal_wavefronts
      << ",\"shared_store_ideal_wavefronts\":" << shared_store_ideal_wavefronts
      << ",\"barriers\":" << barriers << ",\"spin_yields\":" << spin_yields << ",\"spin_waits\":" << spin_waits
      << ",\"spin_instructions\":" << spin_instructions << ",\"grid_syncs\":" << grid_syncs << ",\"unique_global_bytes\":" << unique_global_bytes
      << ",\"inflight_batches\":" << inflight_batches << ",\"inflight_bytes_sum\":" << inflight_bytes_sum
      << ",\"inflight_bytes_max\":" << inflight_bytes_max
      << ",\"dependent_load_chain_max\":" << dependent_load_chain_max << ",\"prologue_waits\":" << prologue_waits
      << ",\"prefetch_requests\":" << prefetch_requests << ",\"prefetch_bytes\":" << prefetch_bytes
      << ",\"allocations\":[";
    bool first = true;
    for (auto& [base, bits] : touched) {
        uint64_t unique = 0;
        for (uint64_t w : bits) unique += uint64_t(__builtin_popcountll(w));
        auto it = load_sectors_by_alloc.find(base);
        s << (first ? "" : ",") << "{\"base\":" << base << ",\"unique\":" << unique
          << ",\"load_sectors\":" << (it == load_sectors_by_alloc.end() ? 0 : it->second) << "}";
        first = false;
    }
    s << "]}";
    return s.str();
}

}  // namespace ptxlm::emu
