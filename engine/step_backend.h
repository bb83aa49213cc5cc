// What cpu::Batcher drives (issues 21 and 22): a backend that evaluates
// tokens of several sequences in one step over one pool of KV pages, each
// sequence reaching its positions through a page table (engine/kv_pool.h).
// CpuBackend and CudaBackend (with KV pages) implement it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "engine/backend.h"

namespace ptxlm {

// The K/V storage in pages of `page_size` positions (a power of two) of
// every layer: n_pages × page_size cache rows per layer. 0 pages: one
// sequence's worth, ceil(n_ctx / page_size), which eval_batch maps in order.
struct KvPages {
    uint32_t n_pages = 0;
    uint32_t page_size = 16;
};

// One sequence's part of a step: its tokens at positions pos, pos + 1, ...,
// its K/V through `pages` (engine/kv_pool.h's page table: position j in
// page pages[j / page_size]), the logits of its last n_logits tokens
// (n_vocab floats each) written to `logits` when it is not null, and the id
// of its last token's largest logit (ties: the lowest id) written to
// `argmax` when that is not null: greedy decoding, which on the GPU copies
// back the id alone.
struct SeqStep {
    std::span<const uint32_t> pages;
    uint32_t pos = 0;
    std::span<const TokenId> tokens;
    float* logits = nullptr;
    uint32_t n_logits = 0;
    TokenId* argmax = nullptr;
};

// The tokens of a part whose logits the step computes: the last n_logits,
// or the last one for an argmax alone.
inline uint32_t head_rows(const SeqStep& s) { return s.n_logits ? s.n_logits : s.argmax ? 1 : 0; }

// Checks one part of a step whose earlier parts hold `before` tokens, as
// StepBackend::step documents: at most `max_tokens` in all, n_logits (an
// argmax needs a token), the token ids (n_vocab), the positions (n_ctx), and a page table that reaches
// the last position with pages below `n_pages` (pages of `page_size`).
// Returns the part's tokens.
uint32_t check_seq_step(const SeqStep& s, uint32_t before, uint32_t max_tokens, uint32_t n_vocab, uint32_t n_ctx,
                        KvPages pages);

class StepBackend : public Backend {
public:
    // Tokens of several sequences in one pass (max_step_tokens() in all):
    // each weight matrix is read once for all of them, attention runs per
    // sequence over its pages. A sequence's logits are what eval_batch gives
    // it alone, however it is batched or chunked (bit for bit on the CPU;
    // on the GPU bit for bit across batch sizes, see CudaBackend). Throws
    // std::invalid_argument for too many tokens, bad n_logits, or a page
    // table that does not cover the positions or names a page past the
    // storage; ModelError for a token outside the vocabulary or a position
    // past n_ctx.
    virtual void step(std::span<const SeqStep> batch) = 0;
    // Copies the first `positions` positions of page `from` to page `to` in
    // every layer (KvPool::Copy: before a shared page is written).
    virtual void copy_page(uint32_t from, uint32_t to, uint32_t positions) = 0;
    virtual KvPages kv_pages() const = 0;
    // Tokens one step takes, all sequences together.
    virtual uint32_t max_step_tokens() const = 0;
};

// Makes step backends over a pool of KV pages for a batcher of several
// sequences (cpu::Batcher::MakeBackend).
using MakeStepBackend = std::function<std::unique_ptr<StepBackend>(KvPages)>;
// A factory of step backends like `like`: on the CPU its context, KV type,
// arithmetic and ISA, on opt.cpu_pool (else a pool of opt.threads); on the
// GPU its context, schedule, arithmetic and tuning, KV in pages (a new copy
// of the weights: release `like` first to keep one). The factory
// keeps no reference to `like`. Throws std::invalid_argument when `like`
// is the GPU's persistent schedule, which serves one sequence per launch,
// or keeps its KV contiguous (check_step_options).
MakeStepBackend make_step_backend(const Model& m, const Backend& like, const BackendOptions& opt);
// Throws std::invalid_argument, as make_step_backend does, when schedule `s`
// cannot step several sequences (the persistent one) or the GPU's KV is
// asked to be contiguous (--gpu-contiguous-kv; steps need pages): for callers
// that can refuse before they load anything.
void check_step_options(Schedule s, bool contiguous_kv);

}  // namespace ptxlm
