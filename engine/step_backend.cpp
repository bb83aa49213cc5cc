#include "engine/step_backend.h"

#include <stdexcept>
#include <string>

#include "engine/model.h"

namespace ptxlm {

uint32_t check_seq_step(const SeqStep& s, uint32_t before, uint32_t max_tokens, uint32_t n_vocab, uint32_t n_ctx,
                        KvPages pages) {
    const uint32_t n = static_cast<uint32_t>(s.tokens.size());
    if (uint64_t(before) + n > max_tokens)
        throw std::invalid_argument("step: more than " + std::to_string(max_tokens) + " tokens");
    if (s.logits ? s.n_logits == 0 || s.n_logits > n : s.n_logits != 0) throw std::invalid_argument("step: bad n_logits");
    if (n == 0) return 0;
    for (TokenId token : s.tokens)
        if (token < 0 || uint32_t(token) >= n_vocab)
            throw ModelError("token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                             std::to_string(n_vocab - 1) + ")");
    if (uint64_t(s.pos) + n > n_ctx)
        throw ModelError("position " + std::to_string(uint64_t(s.pos) + n - 1) + " is past the context of " +
                         std::to_string(n_ctx) + " tokens");
    // Attention reads every position up to the last token's.
    const uint32_t last_page = (s.pos + n - 1) / pages.page_size;
    if (last_page >= s.pages.size())
        throw std::invalid_argument("step: a page table of " + std::to_string(s.pages.size()) +
                                    " pages does not reach position " + std::to_string(s.pos + n - 1));
    for (uint32_t i = 0; i <= last_page; ++i)
        if (s.pages[i] >= pages.n_pages)
            throw std::invalid_argument("step: page " + std::to_string(s.pages[i]) + " of the table is past the " +
                                        std::to_string(pages.n_pages) + " pages of the KV storage");
    return n;
}

}  // namespace ptxlm
