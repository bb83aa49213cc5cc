// The logits of every position of a token sequence from any Backend, as the
// GPU end-to-end tests on emu compare them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/backend.h"

namespace ptxlm {

// Every position's logits (ids.size() × n_vocab), the tokens evaluated in
// batches of `batch` (1: one eval per token; more: eval_batch's prompt
// chunks).
inline std::vector<float> logits_of(Backend& b, const std::vector<TokenId>& ids, uint32_t batch) {
  const size_t nv = b.n_vocab();
  std::vector<float> out(ids.size() * nv);
  for (uint32_t i = 0; i < ids.size(); i += batch) {
    const uint32_t k = std::min<uint32_t>(batch, uint32_t(ids.size()) - i);
    b.eval_batch({ids.data() + i, k}, i, out.data() + i * nv, k);
  }
  return out;
}

}  // namespace ptxlm
