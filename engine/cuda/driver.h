// The CUDA Driver API, loaded at run time with dlopen (ptxlm never links
// libcuda). Driver owns the library and a table of entry points resolved by
// their versioned symbol names; every call goes through Driver::check, which
// turns a failing CUresult into ptxlm::cuda::Error naming the call, the error's
// name and description, and (for module loads) the JIT log.
//
// Which library: $PTXLM_LIBCUDA when set (emu's libcuda.so.1 in tests), else
// the system's libcuda.so.1.
#pragma once

#include <cuda.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace ptxlm::cuda {

// A failed driver call or a driver that could not be loaded.
class Error : public std::runtime_error {
public:
    Error(CUresult code, std::string call, const std::string& message)
        : std::runtime_error(message), code_(code), call_(std::move(call)) {}
    CUresult code() const { return code_; }      // CUDA_ERROR_NOT_FOUND when no library could be loaded
    const std::string& call() const { return call_; }
private:
    CUresult code_;
    std::string call_;
};

// Every entry point ptxlm uses, by the exact symbol the driver exports. The
// unversioned exports (cuMemAlloc, cuStreamBeginCapture, ...) are legacy ABIs:
// cuda.h #defines the plain names to these, and so does this table.
#define PTXLM_CUDA_ENTRY_POINTS(X)                                                     \
    X(cuGetErrorName) X(cuGetErrorString) X(cuInit) X(cuDriverGetVersion)               \
    X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceTotalMem_v2)        \
    X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2) \
    X(cuCtxSetCurrent) X(cuCtxSynchronize)                                               \
    X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemAllocHost_v2) X(cuMemFreeHost)              \
    X(cuMemHostAlloc) X(cuMemHostGetDevicePointer_v2)                                    \
    X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemcpyHtoDAsync_v2)                       \
    X(cuMemcpyDtoHAsync_v2) X(cuMemsetD8_v2) X(cuMemsetD8Async) X(cuMemGetInfo_v2)      \
    X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction)                      \
    X(cuFuncGetAttribute) X(cuFuncSetAttribute)                                         \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuLaunchKernel)                    \
    X(cuLaunchCooperativeKernel) X(cuLaunchKernelEx)                                     \
    X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamSynchronize) X(cuStreamQuery)      \
    X(cuStreamBeginCapture_v2) X(cuStreamEndCapture)                                    \
    X(cuGraphGetNodes) X(cuGraphKernelNodeGetParams_v2)                                 \
    X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecKernelNodeSetParams_v2)\
    X(cuGraphDestroy) X(cuGraphExecDestroy)                                             \
    X(cuEventCreate) X(cuEventDestroy_v2) X(cuEventRecord) X(cuEventSynchronize)

struct Api {
#define PTXLM_CUDA_API_FIELD(name) decltype(&::name) name = nullptr;
    PTXLM_CUDA_ENTRY_POINTS(PTXLM_CUDA_API_FIELD)
#undef PTXLM_CUDA_API_FIELD
    // Drivers before CUDA 12.8 export only the unversioned ABI (the same
    // signature): resolved to whichever the driver has.
    decltype(&::cuEventElapsedTime_v2) cuEventElapsedTime_v2 = nullptr;
};

class Driver {
public:
    // Loads $PTXLM_LIBCUDA or libcuda.so.1 and calls cuInit(0). Throws Error with
    // a message saying what to do when there is no driver, the toolkit's stub
    // library was found instead of one, or there is no device.
    static std::shared_ptr<const Driver> load();
    static std::shared_ptr<const Driver> load(const std::string& path);

    ~Driver();
    Driver(const Driver&) = delete;
    Driver& operator=(const Driver&) = delete;

    const Api& api() const { return api_; }
    const std::string& path() const { return path_; }
    int version() const { return version_; }   // cuDriverGetVersion: 1000 * major + 10 * minor

    // Throws Error unless res == CUDA_SUCCESS. `call` is the entry point's name;
    // `detail` (a module's JIT error log, a launch's geometry) is appended on a
    // line of its own when not empty.
    void check(CUresult res, const char* call, std::string_view detail = {}) const {
        if (res != CUDA_SUCCESS) fail(res, call, detail);
    }
    std::string error_name(CUresult res) const;     // "CUDA_ERROR_INVALID_PTX", never empty
    std::string error_string(CUresult res) const;   // the driver's description, never empty

private:
    Driver() = default;
    [[noreturn]] void fail(CUresult res, const char* call, std::string_view detail) const;

    void* handle_ = nullptr;
    std::string path_;
    int version_ = 0;
    Api api_;
};

// The checking helper: PTXLM_CU(driver, cuMemAlloc_v2, &ptr, bytes) calls the
// entry point and throws Error naming it when it fails.
#define PTXLM_CU(drv, fn, ...) (drv).check((drv).api().fn(__VA_ARGS__), #fn)

}  // namespace ptxlm::cuda
