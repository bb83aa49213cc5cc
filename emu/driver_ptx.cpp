// The checks the real driver's JIT makes on a PTX module's header before
// compiling it, which the interpreter (that ignores .version and .target)
// does not: the PTX ISA version this driver accepts, the target against the
// device, and the minimum ISA version each target needs.
#include "emu/driver_state.h"

#include <cctype>
#include <cstdio>

namespace ptxlm::emu::driver {
namespace {

constexpr int kMaxPtxVersion = 90;   // CUDA 13.0 accepts PTX ISA up to 9.0 (as major*10 + minor)

// Minimum PTX ISA version for a target (FACTS.md; PTX ISA release notes).
int min_version_for(int sm, bool arch_specific) {
    if (arch_specific) return sm >= 100 ? 86 : 80;
    if (sm >= 120) return 87;
    if (sm >= 100) return 86;
    if (sm >= 89) return 78;
    if (sm >= 87) return 74;
    if (sm >= 86) return 71;
    if (sm >= 80) return 70;
    if (sm >= 75) return 63;
    return 60;
}

// The next whitespace-separated word at or after `i`, skipping comments;
// updates `line`.
std::string next_word(std::string_view s, size_t& i, uint32_t& line) {
    for (;;) {
        while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) line += s[i++] == '\n';
        if (s.compare(i, 2, "//") == 0) {
            while (i < s.size() && s[i] != '\n') ++i;
        } else if (s.compare(i, 2, "/*") == 0) {
            size_t j = s.find("*/", i + 2);
            for (size_t k = i; k < std::min(j, s.size()); ++k) line += s[k] == '\n';
            i = j == std::string_view::npos ? s.size() : j + 2;
        } else {
            break;
        }
    }
    size_t b = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i])) && s[i] != ',') ++i;
    return std::string(s.substr(b, i - b));
}

std::string at(uint32_t line, const std::string& msg) { return "line " + std::to_string(line) + ": " + msg; }

}  // namespace

CUresult check_ptx_header(std::string_view ptx, std::string* log) {
    const DeviceLimits& L = device_limits();
    const int device_sm = L.cc_major * 10 + L.cc_minor;
    size_t i = 0;
    uint32_t line = 1;
    std::string w = next_word(ptx, i, line);
    if (w != ".version") {
        *log = at(line, "a PTX module must begin with .version (found '" + w + "')");
        return CUDA_ERROR_INVALID_PTX;
    }
    uint32_t version_line = line;
    std::string v = next_word(ptx, i, line);
    unsigned major = 0, minor = 0;
    if (std::sscanf(v.c_str(), "%u.%u", &major, &minor) != 2 || minor > 9) {
        *log = at(line, "malformed .version '" + v + "'");
        return CUDA_ERROR_INVALID_PTX;
    }
    const int version = int(major * 10 + minor);
    if (version > kMaxPtxVersion) {
        *log = at(version_line, "PTX .version " + v + " is newer than this driver accepts (9.0); emit the lowest "
                                "version the target needs");
        return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
    }
    w = next_word(ptx, i, line);
    if (w != ".target") {
        *log = at(line, "expected .target after .version (found '" + w + "')");
        return CUDA_ERROR_INVALID_PTX;
    }
    std::string t = next_word(ptx, i, line);
    unsigned sm = 0;
    char suffix = 0;
    int n = std::sscanf(t.c_str(), "sm_%u%c", &sm, &suffix);
    if (n < 1) {
        *log = at(line, "unsupported .target '" + t + "' (emu runs sm_XX targets)");
        return CUDA_ERROR_INVALID_PTX;
    }
    const bool arch_specific = n == 2 && (suffix == 'a' || suffix == 'f');
    if (int(sm) > device_sm || (arch_specific && int(sm) != device_sm)) {
        *log = at(line, ".target " + t + " cannot run on this device (sm_" + std::to_string(device_sm) + ")");
        return CUDA_ERROR_INVALID_PTX;
    }
    if (version < min_version_for(int(sm), arch_specific)) {
        int need = min_version_for(int(sm), arch_specific);
        *log = at(version_line, ".target " + t + " needs PTX .version " + std::to_string(need / 10) + "." +
                                    std::to_string(need % 10) + " or later (the module says " + v + ")");
        return CUDA_ERROR_INVALID_PTX;
    }
    return CUDA_SUCCESS;
}

}  // namespace ptxlm::emu::driver
