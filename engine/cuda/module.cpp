#include "engine/cuda/module.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace ptxlm::cuda {
namespace {

constexpr size_t kJitLogBytes = 64 * 1024;
constexpr unsigned kSharedWithoutOptIn = 48 * 1024;

// The JIT writes back how many bytes of a log buffer it filled; trust neither
// that count nor a terminator beyond the buffer.
std::string log_text(const std::vector<char>& buf, void* filled) {
    size_t n = std::min(reinterpret_cast<uintptr_t>(filled), uintptr_t(buf.size()));
    std::string s(buf.data(), strnlen(buf.data(), n ? n : buf.size()));
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

}  // namespace

Module::Module(const Context& ctx, std::string_view ptx) : drv_(&ctx.driver()) {
    std::string text(ptx);   // cuModuleLoadDataEx reads PTX up to its NUL
    std::vector<char> error_log(kJitLogBytes, '\0'), info_log(kJitLogBytes, '\0');
    // Option values live in the void* slot itself; the two size slots are in/out.
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE};
    void* vals[] = {error_log.data(), reinterpret_cast<void*>(uintptr_t(error_log.size())),
                    info_log.data(), reinterpret_cast<void*>(uintptr_t(info_log.size())),
                    reinterpret_cast<void*>(uintptr_t(1))};
    CUresult res = drv_->api().cuModuleLoadDataEx(&m_, text.c_str(), unsigned(std::size(opts)), opts, vals);
    info_log_ = log_text(info_log, vals[3]);
    if (res != CUDA_SUCCESS) {
        std::string log = log_text(error_log, vals[1]);
        drv_->check(res, "cuModuleLoadDataEx", log.empty() ? "(the JIT left no error log)" : "JIT error log:\n" + log);
    }
}

Module::~Module() {
    if (m_) drv_->api().cuModuleUnload(m_);
}

Function Module::function(const std::string& name) const {
    CUfunction f = nullptr;
    CUresult res = drv_->api().cuModuleGetFunction(&f, m_, name.c_str());
    drv_->check(res, "cuModuleGetFunction", res == CUDA_ERROR_NOT_FOUND ? "no kernel named '" + name + "'" : "");
    return Function(*drv_, f, name);
}

int Function::attribute(CUfunction_attribute a) const {
    int v = 0;
    PTXLM_CU(*drv_, cuFuncGetAttribute, &v, a, f_);
    return v;
}

void Function::reserve_dynamic_shared(unsigned bytes) const {
    if (bytes > kSharedWithoutOptIn)
        PTXLM_CU(*drv_, cuFuncSetAttribute, f_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(bytes));
}

int Function::max_active_blocks_per_sm(unsigned block_threads, size_t dynamic_shared_bytes) const {
    int n = 0;
    PTXLM_CU(*drv_, cuOccupancyMaxActiveBlocksPerMultiprocessor, &n, f_, int(block_threads), dynamic_shared_bytes);
    return n;
}

namespace {

std::string describe(const Function& f, const LaunchDims& d) {
    // Appended piecewise: GCC 12 warns falsely (-Wrestrict) on "(" + std::to_string(...).
    std::string s = "kernel " + f.name();
    auto dim = [&s](const char* what, const Dim3& v) {
        s += what;
        s += std::to_string(v.x);
        s += ',';
        s += std::to_string(v.y);
        s += ',';
        s += std::to_string(v.z);
        s += ')';
    };
    dim(" grid (", d.grid);
    dim(" block (", d.block);
    s += " dynamic shared ";
    s += std::to_string(d.dynamic_shared_bytes);
    return s;
}

}  // namespace

void launch(const Function& f, const LaunchDims& d, const Stream& s, void** args) {
    const Driver& drv = s.driver();
    CUresult res = drv.api().cuLaunchKernel(f.handle(), d.grid.x, d.grid.y, d.grid.z, d.block.x, d.block.y,
                                            d.block.z, d.dynamic_shared_bytes, s.handle(), args, nullptr);
    if (res != CUDA_SUCCESS) drv.check(res, "cuLaunchKernel", describe(f, d));
}

void launch_programmatic(const Function& f, const LaunchDims& d, const Stream& s, void** args) {
    const Driver& drv = s.driver();
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = d.grid.x, cfg.gridDimY = d.grid.y, cfg.gridDimZ = d.grid.z;
    cfg.blockDimX = d.block.x, cfg.blockDimY = d.block.y, cfg.blockDimZ = d.block.z;
    cfg.sharedMemBytes = d.dynamic_shared_bytes;
    cfg.hStream = s.handle();
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CUresult res = drv.api().cuLaunchKernelEx(&cfg, f.handle(), args, nullptr);
    if (res != CUDA_SUCCESS) drv.check(res, "cuLaunchKernelEx (programmatic)", describe(f, d));
}

void launch_cooperative(const Function& f, const LaunchDims& d, const Stream& s, void** args) {
    const Driver& drv = s.driver();
    CUresult res = drv.api().cuLaunchCooperativeKernel(f.handle(), d.grid.x, d.grid.y, d.grid.z, d.block.x,
                                                       d.block.y, d.block.z, d.dynamic_shared_bytes, s.handle(),
                                                       args);
    if (res != CUDA_SUCCESS) drv.check(res, "cuLaunchCooperativeKernel", describe(f, d));
}

}  // namespace ptxlm::cuda
