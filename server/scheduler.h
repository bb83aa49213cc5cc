// The engine side of the server: one thread that loads the model, owns every
// backend (slot) and steps the active requests; HTTP threads hand it jobs
// through a bounded queue and read each job's results from its own channel.
//
//   HTTP thread                        engine thread
//   parse, tokenize, submit(job) ───▶  queue ─▶ idle slot with the longest
//   wait on job->channel                        shared cached prefix; prefill
//        ◀── Started / Text / Done / Error ──   each iteration: one token for
//                                               every active slot in turn
//
// Slots are Sessions on backends of their own. With several slots they are
// the sequences of one cpu::Batcher (one KV pool, one copy of the weights;
// continuous batching; on the CPU or the GPU's batch step): each iteration every slot with nothing queued samples its next
// token (or starts generating once its prompt has run), then one batched
// step evaluates every slot's next request, decode tokens first, then
// prompt chunks up to EngineOptions::batch_tokens; a long prompt delays the
// running streams by at most a chunk per step. A job leaves when its generation ends, when its cancel flag is set
// (the client went away; its queued work is dropped at once) or at
// shutdown, when every job still admitted gets an Error event.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/batcher.h"
#include "engine/chat_prompt.h"
#include "engine/model.h"
#include "engine/session.h"
#include "engine/tokenizer.h"
#include "server/request.h"

namespace ptxlm::server {

struct EngineOptions {
    std::string model_path;
    DeviceKind device = DeviceKind::Auto;
    BackendOptions backend;
    int parallel = 1;            // slots
    int batch_tokens = 16;       // parallel > 1: tokens per batched step with running streams (decode tokens first,
                                 // then prompt chunks); a step of prompt chunks alone takes up to the backend's
                                 // most (CPU 64, GPU 16)
    uint64_t kv_size = 0;        // parallel > 1: positions of the shared KV pool (0: parallel x n_ctx)
    int queue = 16;              // jobs that may wait for a slot
    TemplateChoice chat_template;   // neither: the model's
};

// The model as the HTTP side sees it: immutable once the scheduler is ready.
struct LoadedModel {
    std::string id;              // the file name without .gguf
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
    std::optional<ChatTemplate> chat_template;   // none: template_error says why
    std::string template_error;
    uint32_t n_ctx = 0;          // every slot's
    std::string backend;         // the first slot's description
};

// One token's log-probabilities (raw logits; see GenStep).
struct TokenLogprob {
    TokenId id = 0;
    float logprob = 0;
    std::vector<std::pair<TokenId, float>> top;
};

struct Event {
    enum class Kind { Started, Text, Done, Error };
    Kind kind = Kind::Text;
    std::string text;                    // Text: whole UTF-8 characters
    std::vector<TokenLogprob> logprobs;  // Text: the tokens this text completes (when asked)
    uint32_t prompt_tokens = 0;          // Started, Done: the prompt's length
    uint32_t cached_tokens = 0;          // Started, Done: of which reused from the slot's cache
    uint32_t completion_tokens = 0;      // Done
    FinishReason finish = FinishReason::Stop;   // Done
    std::string stop;                    // Done: the stop string that ended the text (empty: none did)
    Timings timings;                     // Started (prompt part), Done
    int slot = -1;                       // Started
    int choice = 0;                      // every kind: the job's Job::choice
    std::optional<ApiError> error;       // Error
};

// A job's events, from the engine thread to the HTTP thread that waits for them.
class Channel {
public:
    void push(Event e);
    // Every event pending, waiting up to `timeout` for the first one.
    std::vector<Event> wait(std::chrono::milliseconds timeout);

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Event> events_;
};

// One answer to one prompt. A request for n > 1 answers is n jobs of one
// group: choice i > 0 has `first` set to choice 0's job and its events go
// to that job's channel (each tagged with its choice); it starts only once
// choice 0 has evaluated the prompt (or ended), so its prefill finds the
// prompt's KV in the pool or the slot's cache rather than computing it again.
struct Job {
    uint64_t id = 0;
    std::vector<TokenId> prompt;
    GenerateOptions gen;
    int logprobs = -1;                   // see CompletionRequest::logprobs
    int choice = 0;
    std::shared_ptr<Job> first;          // choice > 0: the group's choice 0
    std::atomic<bool> cancel{false};     // set by the HTTP side when the client is gone
    std::atomic<bool> prompt_done{false};   // set by the engine once the prompt has run (or the job ended)
    Channel channel;                     // choice 0's: every choice's events

    Channel& events() { return first ? first->channel : channel; }
};

struct SlotStats {
    bool busy = false;
    uint32_t kv_tokens = 0;              // positions the slot's cache holds
    uint32_t n_ctx = 0;
};

struct SchedulerStats {
    uint64_t prompt_tokens = 0;          // evaluated (reused prefixes excluded)
    uint64_t prompt_tokens_cached = 0;   // reused from a slot's cache
    uint64_t generated_tokens = 0;
    double prompt_seconds = 0;
    double decode_seconds = 0;           // engine time spent in token steps
    size_t queued = 0, active = 0;
    std::vector<SlotStats> slots;
    // Several CPU slots stepped together (cpu::Batcher); all 0 otherwise.
    bool batched = false;
    uint32_t kv_pages = 0, kv_pages_used = 0, kv_pages_cached = 0, kv_pages_free = 0, kv_page_size = 0;
    uint64_t steps = 0, step_tokens = 0;   // batched steps and the tokens they evaluated
    // Steps by the sequences they evaluated: step_sequences[i] counts steps of
    // at most kStepBuckets[i] sequences (the last bucket: any number).
    static constexpr uint32_t kStepBuckets[] = {1, 2, 4, 8, 16, 32, 64};
    std::array<uint64_t, std::size(kStepBuckets)> step_sequences{};
    uint32_t running = 0, waiting = 0;     // sequences with work: holding their pages, or preempted
    uint64_t preemptions = 0;
    uint64_t prefix_hit_tokens = 0;        // prompt tokens found in the pool's pages (any slot's)
};

class Scheduler {
public:
    enum class State { Loading, Ready, Failed, Stopped };
    enum class Admit { Ok, Loading, Full, ShuttingDown };

    explicit Scheduler(EngineOptions opt);
    ~Scheduler();   // shutdown()
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Starts the engine thread, which loads the model and then serves.
    void start();
    State state() const;
    // Blocks while loading; the final state.
    State wait_loaded();
    std::string load_error() const;
    // Failed: rethrows the load's exception (ModelError, gguf::Error, ...).
    void rethrow_load_error() const;
    // Not null once Ready (and valid until the scheduler is destroyed).
    const LoadedModel* model() const;

    // Admits a job, queued until a slot is free. Full when parallel + queue
    // jobs are already admitted (nothing waits unbounded).
    Admit submit(std::shared_ptr<Job> job);
    // Admits a group's jobs (choice 0 first) all together, or none.
    Admit submit(std::vector<std::shared_ptr<Job>> jobs);
    // Stops admitting; every admitted job gets an Error (503) event; joins the
    // engine thread (after the model has finished loading, if it was).
    void shutdown();

    SchedulerStats stats() const;
    const EngineOptions& options() const { return opt_; }

private:
    struct Slot;
    void run();
    void load();
    Slot* pick_slot(const std::vector<TokenId>& prompt);
    void start_job(Slot& s);
    void begin_generation(Slot& s);   // the prompt has run: Started, then the Generator
    bool step_job(Slot& s);   // true when it sampled a token
    void end_job(Slot& s, Event last);

    EngineOptions opt_;
    std::unique_ptr<LoadedModel> model_;
    std::unique_ptr<cpu::Batcher> batcher_;   // CPU, parallel > 1: the slots' backends are its sequences
    std::vector<std::unique_ptr<Slot>> slots_;   // after batcher_: destroyed first
    std::thread thread_;

    mutable std::mutex mu_;
    std::condition_variable cv_;        // the engine waits for work; wait_loaded for the load
    State state_ = State::Loading;
    std::string load_error_;
    std::exception_ptr load_exception_;
    bool stopping_ = false;
    std::deque<std::shared_ptr<Job>> queue_;
    size_t admitted_ = 0;               // queued + running
    SchedulerStats stats_;              // under mu_
    uint64_t use_clock_ = 0;            // slot LRU
};

}  // namespace ptxlm::server
