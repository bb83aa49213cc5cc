#include "engine/cuda/driver.h"

#include <dlfcn.h>

#include <cstdlib>

namespace ptxlm::cuda {
namespace {

// Names for the codes a driver that cannot describe itself returns (the stub
// library answers cuGetErrorName with CUDA_ERROR_STUB_LIBRARY too).
const char* fallback_name(CUresult res) {
    switch (res) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    default: return nullptr;
    }
}

// What the user should do about an error that says the machine has no usable GPU.
const char* advice(CUresult res) {
    switch (res) {
    case CUDA_ERROR_STUB_LIBRARY:
        return "the CUDA stub library was loaded: no GPU driver on this machine "
               "(do not put the toolkit's lib64/stubs on the library path; use --device cpu)";
    case CUDA_ERROR_NO_DEVICE: return "the driver sees no CUDA device; use --device cpu";
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
        return "the driver is older than the PTX .version requires; update the driver";
    default: return nullptr;
    }
}

}  // namespace

std::shared_ptr<const Driver> Driver::load() {
    const char* env = std::getenv("PTXLM_LIBCUDA");
    return load(env && *env ? std::string(env) : std::string("libcuda.so.1"));
}

std::shared_ptr<const Driver> Driver::load(const std::string& path) {
    // RTLD_LOCAL: the driver's symbols stay out of the global namespace, so a
    // second driver (emu in one test, the stub in another) never interposes.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* err = dlerror();
        std::string why = err ? err : "unknown dlopen error";
        if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);   // dlerror repeats the path
        throw Error(CUDA_ERROR_NOT_FOUND, "dlopen",
                    "no CUDA driver found (" + path + ": " + why + "); set PTXLM_LIBCUDA or use --device cpu");
    }
    std::shared_ptr<Driver> d(new Driver());
    d->handle_ = handle;
    d->path_ = path;
#define PTXLM_CUDA_RESOLVE(name)                                                             \
    d->api_.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));                \
    if (!d->api_.name)                                                                       \
        throw Error(CUDA_ERROR_NOT_FOUND, #name,                                             \
                    path + " does not export " #name " (a driver older than CUDA 12?); "     \
                    "update the driver or use --device cpu");
    PTXLM_CUDA_ENTRY_POINTS(PTXLM_CUDA_RESOLVE)
#undef PTXLM_CUDA_RESOLVE
    for (const char* name : {"cuEventElapsedTime_v2", "cuEventElapsedTime"})
        if (!d->api_.cuEventElapsedTime_v2)
            d->api_.cuEventElapsedTime_v2 = reinterpret_cast<decltype(&::cuEventElapsedTime_v2)>(dlsym(handle, name));
    if (!d->api_.cuEventElapsedTime_v2)
        throw Error(CUDA_ERROR_NOT_FOUND, "cuEventElapsedTime",
                    path + " exports neither cuEventElapsedTime_v2 nor cuEventElapsedTime; update the driver or use "
                    "--device cpu");
    PTXLM_CU(*d, cuInit, 0);
    PTXLM_CU(*d, cuDriverGetVersion, &d->version_);
    return d;
}

Driver::~Driver() {
    if (handle_) dlclose(handle_);
}

std::string Driver::error_name(CUresult res) const {
    const char* s = nullptr;
    if (api_.cuGetErrorName && api_.cuGetErrorName(res, &s) == CUDA_SUCCESS && s) return s;
    if (const char* f = fallback_name(res)) return f;
    return "CUDA error " + std::to_string(int(res));
}

std::string Driver::error_string(CUresult res) const {
    // cuGetErrorString may succeed and still leave the string NULL (the stub does).
    const char* s = nullptr;
    if (api_.cuGetErrorString && api_.cuGetErrorString(res, &s) == CUDA_SUCCESS && s) return s;
    if (const char* a = advice(res)) return a;
    return "no description from the driver";
}

void Driver::fail(CUresult res, const char* call, std::string_view detail) const {
    std::string msg = std::string(call) + " failed: " + error_name(res) + " (" + error_string(res) + ")";
    if (const char* a = advice(res); a && error_string(res) != a) msg += ": " + std::string(a);
    msg += " [driver " + path_ + "]";
    if (!detail.empty()) {
        msg += "\n";
        msg += detail;
    }
    throw Error(res, call, msg);
}

}  // namespace ptxlm::cuda
