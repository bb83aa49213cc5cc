// Several sequences on one StepBackend (engine/step_backend.h: the CPU's,
// or the GPU's with KV pages) and one KV pool (issues 21, 22), each
// behind a Backend of its own, so that Session and Generator drive them
// unchanged: a sequence's eval_batch only queues its tokens (its positions
// are reserved in the pool at once, a shared page copied on write at once);
// step() then evaluates the first queued request of every sequence that has
// one in a single StepBackend::step, so each weight matrix is read once for
// all of them. Logits land where eval_batch was told, and an argmax where
// eval_argmax_into was (greedy decoding: on the GPU only the id is copied
// back), when the step that evaluates them returns: a caller reads them only
// once queued(seq) is 0 (the server's scheduler does).
//
// A sequence's prompt reuses every full page any sequence evaluated with the
// same start (Backend::reuse_prefix: the pool's hash chain; only while
// nothing is queued, so every findable page holds its K/V).
//
// A request longer than what a step has room for is split: a step takes the
// decode tokens first, then prompt chunks up to `step_tokens` in all. A
// sequence's results are what it gets alone (StepBackend::step), however
// requests are batched and split.
//
// The pool may hold fewer positions than n_seqs x n_ctx (at least n_ctx).
// When a request finds no page left, the sequence whose prompt arrived last
// is preempted: its pages are released (the full ones it evaluated stay
// cached and findable), its tokens kept; the requester itself when it is
// the newest. A step first resumes preempted sequences, oldest first, while
// the pool has room for all of a sequence's tokens: it reattaches what is
// still cached and recomputes the rest before its queued requests. The
// requests a preempted sequence has queued wait; their results are what
// they would have been without the preemption.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/kv_pool.h"
#include "engine/step_backend.h"

namespace ptxlm::cpu {

class Batcher {
public:
    // The backend, made for the pool's pages (its n_ctx must be the batcher's).
    using MakeBackend = std::function<std::unique_ptr<StepBackend>(KvPages)>;
    // Up to `n_seqs` sequences of up to n_ctx positions each, over a pool of
    // `kv_positions` positions in pages of `page_size` (0: n_seqs x n_ctx;
    // else at least n_ctx, rounded up to whole pages; the cached pages of
    // ended sequences are reused). step_tokens: at most this many tokens per
    // step (1..the backend's max_step_tokens(); 0: that). Throws
    // std::invalid_argument for a value out of range.
    Batcher(const MakeBackend& make, uint32_t n_ctx, uint32_t n_seqs, uint32_t step_tokens = 0,
            uint32_t page_size = 16, uint64_t kv_positions = 0);
    // On the CPU: a CpuBackend on `pool` (its default path and Isa).
    Batcher(const Model& m, uint32_t n_ctx, KvType kv, std::shared_ptr<ThreadPool> pool, uint32_t n_seqs,
            uint32_t step_tokens = CpuBackend::kMaxBatch, uint32_t page_size = 16, uint64_t kv_positions = 0);
    ~Batcher();
    Batcher(const Batcher&) = delete;
    Batcher& operator=(const Batcher&) = delete;

    // A new sequence (at most n_seqs open at once; throws std::logic_error
    // past that). Its Backend must not outlive the batcher.
    std::unique_ptr<Backend> open();
    // Requests queued, by every sequence.
    size_t queued() const;
    // Requests a sequence's Backend (one open() returned) has queued.
    size_t queued(const Backend& seq) const;
    // One step: returns the tokens it evaluated (0: nothing was queued).
    // An exception from the backend leaves every request of the step's
    // sequences dropped (their caches are then suspect: reset their sessions).
    uint32_t step();
    // Drops a sequence's queued requests (a cancelled request): its pool
    // positions end at what was evaluated.
    void drop(const Backend& seq);

    // Tokens of a step that holds no decode token (prompt chunks only),
    // 1..the backend's max_step_tokens(); step_tokens until set. A server sets it
    // above step_tokens: a prompt that runs alone then goes at full speed,
    // while a step with running streams stays short.
    void set_prefill_tokens(uint32_t n);

    StepBackend& backend() { return *be_; }
    // Tokens one sequence's eval_batch queues at most (a request; steps split it).
    static constexpr uint32_t kMaxRequest = 64;
    KvPool::Stats pool_stats() const { return pool_.stats(); }
    // Sequences with work queued that hold their pages (running) or wait
    // preempted (waiting); preemptions so far.
    struct Counts {
        uint32_t running = 0, waiting = 0;
        uint64_t preemptions = 0;
    };
    Counts counts() const;
    // Whether a sequence waits preempted (its queued requests wait for pages).
    bool preempted(const Backend& seq) const;
    // Positions a sequence holds in the pool (0 while preempted).
    uint32_t positions(const Backend& seq) const;
    // Sequences the last step evaluated tokens of.
    uint32_t last_step_sequences() const { return last_seqs_; }

private:
    class Seq;
    struct Request {
        uint32_t pos = 0;
        std::vector<TokenId> tokens;
        float* logits = nullptr;
        uint32_t n_logits = 0;
        TokenId* argmax = nullptr;   // the last token's, when the request's last chunk runs
    };
    void enqueue(Seq& s, std::span<const TokenId> tokens, uint32_t pos, float* logits, uint32_t n_logits,
                 TokenId* argmax = nullptr);
    uint32_t reuse(Seq& s, std::span<const TokenId> prompt, uint32_t keep);
    void close(Seq& s);
    Seq& find(const Backend& b) const;
    // Reserves pages for s's tokens from position `from` on, preempting
    // newer sequences (or s itself, when it is the newest) for room.
    void reserve(Seq& s, uint32_t from);
    void preempt(Seq& s);
    // The idle sequence (nothing queued, pages held) with the least recent
    // prompt, other than `except`; nullptr when there is none.
    Seq* idle_victim(const Seq& except) const;
    bool resume(Seq& s);
    bool append(Seq& s, uint32_t from);

    KvPool pool_;
    std::unique_ptr<StepBackend> be_;
    uint32_t n_ctx_, n_seqs_, step_tokens_, prefill_tokens_;
    std::vector<Seq*> seqs_;   // open, in the order they were opened
    size_t next_ = 0;          // where the next step starts taking prompt chunks (round robin)
    uint64_t arrivals_ = 0;    // prompts enqueued so far (each sequence's latest is its age)
    uint64_t preemptions_ = 0;
    uint32_t last_seqs_ = 0;
};

}  // namespace ptxlm::cpu
