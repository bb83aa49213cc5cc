// Shared-memory wavefronts of one warp-level access: how many passes the
// shared-memory pipe needs to serve it (bank conflicts multiply them).
//
// This is our model of NVIDIA's documented bank rules, not a measurement:
// shared memory has 32 banks of 4-byte words (word w lives in bank w % 32);
// the warp's lanes are served in phases of 128 / (bytes per lane) consecutive
// lanes (32 for accesses of 4 bytes or less, 16 for 8-byte, 8 for 16-byte);
// a lane's access covers the words [a / 4, (a + bytes - 1) / 4]; a phase
// needs as many wavefronts as the most distinct words any one bank holds
// among the words its active lanes touch (lanes touching the same word are a
// broadcast and count once; stores are counted the same way, by distinct
// words). Inactive lanes cost nothing, nor does a phase without active lanes.
// The ideal is ceil(distinct words of the whole access / 32): what a
// conflict-free layout of the same data would need.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ptxlm::emu {

struct SharedWavefronts {
    uint32_t actual = 0;
    uint32_t ideal = 0;
};

namespace detail {

// Wavefronts of one phase's words (k <= 32, in lane order; sorted in place).
inline uint32_t shared_phase_wavefronts(uint32_t* words, uint32_t k) {
    bool increasing = true;
    for (uint32_t i = 1; i < k; ++i) increasing &= words[i] > words[i - 1];
    if (increasing && words[k - 1] - words[0] < 32) return 1;   // distinct words in one 32-word window: distinct banks
    std::sort(words, words + k);
    uint8_t per_bank[32] = {};
    uint32_t most = 0;
    for (uint32_t i = 0; i < k; ++i) {
        if (i && words[i] == words[i - 1]) continue;   // broadcast
        most = std::max<uint32_t>(most, ++per_bank[words[i] % 32]);
    }
    return most;
}

}  // namespace detail

// addrs[lane]: the shared-window byte offset each lane accesses (read only for
// lanes set in `mask`); bytes: the access size per lane (1, 2, 4, 8, 16 or 32),
// addresses aligned to it. Pure, no allocation: it runs on every shared access
// when a launch collects stats.
inline SharedWavefronts shared_wavefronts(const uint32_t* addrs, uint32_t mask, uint32_t bytes) {
    SharedWavefronts r;
    if (!mask) return r;
    const uint32_t words_per_lane = bytes <= 4 ? 1 : bytes / 4;
    const uint32_t lanes_per_phase = bytes <= 4 ? 32 : std::max<uint32_t>(1, 128 / bytes);
    const uint32_t phase_mask = lanes_per_phase >= 32 ? ~0u : (1u << lanes_per_phase) - 1;
    uint32_t all[32 * 8];   // every word of the access, phase by phase (<= 32 lanes x 8 words)
    uint32_t total = 0;
    bool increasing = true;   // the whole access's words strictly increase: all distinct
    for (uint32_t p = 0; p < 32; p += lanes_per_phase) {
        uint32_t pm = (mask >> p) & phase_mask;
        if (!pm) continue;
        uint32_t words[32];   // one phase touches at most 32 words (128 bytes)
        uint32_t k = 0;
        for (; pm; pm &= pm - 1) {
            const uint32_t w0 = addrs[p + uint32_t(__builtin_ctz(pm))] / 4;
            for (uint32_t j = 0; j < words_per_lane; ++j) {
                if (total && w0 + j <= all[total - 1]) increasing = false;
                words[k++] = all[total++] = w0 + j;
            }
        }
        r.actual += detail::shared_phase_wavefronts(words, k);
    }
    uint32_t distinct = total;
    if (!increasing) {
        std::sort(all, all + total);
        distinct = uint32_t(std::unique(all, all + total) - all);
    }
    r.ideal = (distinct + 31) / 32;
    return r;
}

}  // namespace ptxlm::emu
