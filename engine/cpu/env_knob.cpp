#include "engine/cpu/env_knob.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace ptxlm::cpu {

namespace {

// Knobs are read once, some during static initialisation, where an
// exception would end in std::terminate without a word: say it and exit.
[[noreturn]] void refuse(const char* name, const char* value, const char* expected) {
    std::fprintf(stderr, "ptxlm: %s=%s: expected %s\n", name, value, expected);
    std::fflush(stderr);
    std::_Exit(2);
}

}  // namespace

uint64_t env_count(const char* name, uint64_t fallback, uint64_t max) {
    const char* e = std::getenv(name);
    if (!e || !*e) return fallback;
    uint64_t v = 0;
    for (const char* p = e; *p; ++p) {
        if (*p < '0' || *p > '9' || uint64_t(*p - '0') > max || v > (max - uint64_t(*p - '0')) / 10) {
            char what[64];
            std::snprintf(what, sizeof what, "a whole number from 0 to %llu", static_cast<unsigned long long>(max));
            refuse(name, e, what);
        }
        v = v * 10 + uint64_t(*p - '0');
    }
    return v;
}

bool env_switch(const char* name, bool fallback) {
    const char* e = std::getenv(name);
    if (!e || !*e) return fallback;
    const std::string_view v(e);
    if (v == "0") return false;
    if (v == "1") return true;
    refuse(name, e, "0 or 1");
}

}  // namespace ptxlm::cpu
