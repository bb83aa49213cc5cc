// The CPU backend's diagnostic environment knobs (PTXLM_CPU_PREFETCH,
// PTXLM_CPU_PACK, PTXLM_CPU_COPY, PTXLM_CPU_PACK_ZMM: A/B runs of one
// binary). Unset or empty gives the default. A malformed value ends the
// process with one message naming the variable and what it takes: a run
// that silently fell back to the default would be mislabelled.
#pragma once

#include <cstdint>

namespace ptxlm::cpu {

// A decimal count in [0, max].
uint64_t env_count(const char* name, uint64_t fallback, uint64_t max);

// "0" or "1".
bool env_switch(const char* name, bool fallback);

}  // namespace ptxlm::cpu
