// What a fuzz entry does when it finds a bug: say what and abort (libFuzzer
// keeps the input; the replay tools fail with it).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ptxlm::fuzz {

[[noreturn]] inline void finding(const std::string& what) {
    std::fprintf(stderr, "FINDING: %s\n", what.c_str());
    std::abort();
}

}  // namespace ptxlm::fuzz
