#include "server/scheduler.h"

#include <cstdio>
#include <filesystem>

#include "engine/cpu/thread_pool.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/decode_plan.h"

namespace ptxlm::server {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Event error_event(ApiError e) {
    Event ev;
    ev.kind = Event::Kind::Error;
    ev.error = std::move(e);
    return ev;
}

}  // namespace

void Channel::push(Event e) {
    {
        std::lock_guard lk(mu_);
        events_.push_back(std::move(e));
    }
    cv_.notify_one();
}

std::vector<Event> Channel::wait(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return !events_.empty(); });
    std::vector<Event> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
    events_.clear();
    return out;
}

struct Scheduler::Slot {
    int index = 0;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Session> session;
    std::shared_ptr<Job> job;               // null: idle
    std::optional<Generator> gen;
    std::vector<TokenLogprob> pending;      // logprobs of tokens whose text is still held back
    uint64_t last_used = 0;
    std::chrono::steady_clock::time_point prefill_t0;   // a batched prompt's start
};

Scheduler::Scheduler(EngineOptions opt) : opt_(std::move(opt)) {}

Scheduler::~Scheduler() { shutdown(); }

void Scheduler::start() { thread_ = std::thread([this] { run(); }); }

Scheduler::State Scheduler::state() const {
    std::lock_guard lk(mu_);
    return state_;
}

Scheduler::State Scheduler::wait_loaded() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return state_ != State::Loading; });
    return state_;
}

std::string Scheduler::load_error() const {
    std::lock_guard lk(mu_);
    return load_error_;
}

void Scheduler::rethrow_load_error() const {
    std::exception_ptr e;
    {
        std::lock_guard lk(mu_);
        e = load_exception_;
    }
    if (e) std::rethrow_exception(e);
}

const LoadedModel* Scheduler::model() const {
    std::lock_guard lk(mu_);
    return state_ == State::Ready || (state_ == State::Stopped && model_) ? model_.get() : nullptr;
}

Scheduler::Admit Scheduler::submit(std::shared_ptr<Job> job) {
    std::vector<std::shared_ptr<Job>> one;
    one.push_back(std::move(job));
    return submit(std::move(one));
}

Scheduler::Admit Scheduler::submit(std::vector<std::shared_ptr<Job>> jobs) {
    {
        std::lock_guard lk(mu_);
        if (stopping_ || state_ == State::Stopped || state_ == State::Failed) return Admit::ShuttingDown;
        if (state_ == State::Loading) return Admit::Loading;
        if (admitted_ + jobs.size() > size_t(opt_.parallel + opt_.queue)) return Admit::Full;
        admitted_ += jobs.size();
        for (auto& j : jobs) queue_.push_back(std::move(j));
        stats_.queued = queue_.size();
    }
    cv_.notify_all();
    return Admit::Ok;
}

void Scheduler::shutdown() {
    {
        std::lock_guard lk(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
    std::lock_guard lk(mu_);
    return stats_;
}

void Scheduler::load() {
    if (opt_.parallel > 1) {   // before the weights load (make_step_backend checks the backend it copies too)
        try {
            check_step_options(opt_.backend.schedule, opt_.backend.gpu_contiguous_kv);
        } catch (const std::invalid_argument& e) {
            throw ModelError("--parallel " + std::to_string(opt_.parallel) + ": " + e.what());
        }
    }
    auto lm = std::make_unique<LoadedModel>();
    lm->id = std::filesystem::path(opt_.model_path).filename().string();
    if (lm->id.size() > 5 && lm->id.ends_with(".gguf")) lm->id.resize(lm->id.size() - 5);
    lm->model = std::make_unique<Model>(Model::load(opt_.model_path));
    lm->tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(lm->model->file));
    if (uint32_t(lm->tokenizer->n_vocab()) > lm->model->n_vocab)
        throw ModelError(opt_.model_path + ": the tokenizer has more tokens than the model has embeddings");
    try {
        lm->chat_template = model_chat_template(*lm->model, opt_.chat_template);
    } catch (const std::invalid_argument& e) {
        // Completions still work; chat requests are answered with this.
        lm->template_error = e.what();
        std::fprintf(stderr, "ptxlm serve: %s: /v1/chat/completions is unavailable\n", e.what());
    }
    std::fprintf(stderr, "ptxlm serve: %s (%s, %s)\n", opt_.model_path.c_str(), lm->model->hp.arch.c_str(),
                 format_bytes(lm->model->weight_bytes()).c_str());
    // Slots take turns on the engine thread: on the CPU they share one pool
    // of worker threads (separate pools would spin against each other).
    BackendOptions bopt = opt_.backend;
    if (opt_.parallel > 1 && !bopt.cpu_pool)
        bopt.cpu_pool = std::make_shared<cpu::ThreadPool>(bopt.threads > 0 ? bopt.threads
                                                                           : cpu::ThreadPool::default_threads());
    for (int i = 0; i < opt_.parallel; ++i) {
        auto slot = std::make_unique<Slot>();
        slot->index = i;
        std::string note;
        slot->backend = batcher_ ? batcher_->open() : make_backend(*lm->model, opt_.device, bopt, &note);
        if (i == 0 && opt_.parallel > 1 && slot->backend->device_info().kind == "cpu") {
            // Several CPU slots: the sequences of one batcher, stepped together,
            // with the first backend's context, arithmetic and kernels.
            const Backend& first = *slot->backend;
            batcher_ = std::make_unique<cpu::Batcher>(make_step_backend(*lm->model, first, bopt), first.n_ctx(),
                                                      uint32_t(opt_.parallel), uint32_t(opt_.batch_tokens), 16,
                                                      opt_.kv_size);
            batcher_->set_prefill_tokens(batcher_->backend().max_step_tokens());
            const KvPages kp = batcher_->backend().kv_pages();
            note += "; " + std::to_string(opt_.parallel) + " sequences stepped together, up to " +
                    std::to_string(opt_.batch_tokens) + " tokens per step, a KV pool of " +
                    std::to_string(uint64_t(kp.n_pages) * kp.page_size) + " positions (" +
                    format_bytes(plan_memory(*lm->model, kp.n_pages * kp.page_size, first.device_info().kv_bytes_per_el).kv_cache) +
                    ")";
            slot->backend = batcher_->open();
        } else if (i == 0 && opt_.parallel > 1) {
            // Several GPU slots: the sequences of one batcher over one CudaBackend
            // with a pool of KV pages (one copy of the weights: the first
            // backend, which chose the context, goes before it is made).
            const uint32_t n_ctx = slot->backend->n_ctx();
            if (opt_.batch_tokens > int(cuda::CudaBackend::kMaxStep))
                throw ModelError("--batch-tokens " + std::to_string(opt_.batch_tokens) + ": the GPU's batch step takes at most " +
                                 std::to_string(cuda::CudaBackend::kMaxStep) + " tokens");
            cpu::Batcher::MakeBackend make;
            try {
                make = make_step_backend(*lm->model, *slot->backend, bopt);
            } catch (const std::invalid_argument& e) {
                throw ModelError("--parallel " + std::to_string(opt_.parallel) + ": " + e.what());
            }
            slot->backend.reset();
            batcher_ = std::make_unique<cpu::Batcher>(make, n_ctx, uint32_t(opt_.parallel), uint32_t(opt_.batch_tokens),
                                                      cuda::kKvPageSize, opt_.kv_size);
            batcher_->set_prefill_tokens(batcher_->backend().max_step_tokens());
            const KvPages kp = batcher_->backend().kv_pages();
            note = batcher_->backend().description() + "; context " + std::to_string(n_ctx) + " tokens; " +
                   std::to_string(opt_.parallel) + " sequences stepped together, up to " +
                   std::to_string(opt_.batch_tokens) + " tokens per step, a KV pool of " +
                   std::to_string(uint64_t(kp.n_pages) * kp.page_size) + " positions (" +
                   format_bytes(plan_memory(*lm->model, kp.n_pages * kp.page_size, 2).kv_cache) + ")";
            slot->backend = batcher_->open();
        }
        if (i == 0) {
            std::fprintf(stderr, "ptxlm serve: %d slot%s: %s\n", opt_.parallel, opt_.parallel == 1 ? "" : "s",
                         note.c_str());
            lm->n_ctx = slot->backend->n_ctx();
            lm->backend = slot->backend->description();
        }
        slot->session = std::make_unique<Session>(*slot->backend, *lm->tokenizer);
        slots_.push_back(std::move(slot));
    }
    std::lock_guard lk(mu_);
    model_ = std::move(lm);
    stats_.slots.resize(slots_.size());
    if (batcher_) {
        stats_.batched = true;
        stats_.kv_page_size = batcher_->backend().kv_pages().page_size;
        stats_.kv_pages = batcher_->backend().kv_pages().n_pages;
        stats_.kv_pages_free = stats_.kv_pages;
    }
    for (size_t i = 0; i < slots_.size(); ++i) stats_.slots[i].n_ctx = slots_[i]->backend->n_ctx();
}

Scheduler::Slot* Scheduler::pick_slot(const std::vector<TokenId>& prompt) {
    // The idle slot whose cache shares the longest prefix with the prompt;
    // among equals the least recently used (it keeps the others' conversations).
    Slot* best = nullptr;
    size_t best_len = 0;
    for (auto& s : slots_) {
        if (s->job) continue;
        const std::vector<TokenId>& c = s->session->cached();
        size_t n = 0;
        while (n < c.size() && n < prompt.size() && c[n] == prompt[n]) ++n;
        if (!best || n > best_len || (n == best_len && s->last_used < best->last_used)) {
            best = s.get();
            best_len = n;
        }
    }
    return best;
}

void Scheduler::start_job(Slot& s) {
    Job& job = *s.job;
    s.last_used = ++use_clock_;
    if (job.cancel.load()) {
        Event done;
        done.kind = Event::Kind::Done;
        done.finish = FinishReason::Cancelled;
        end_job(s, std::move(done));
        return;
    }
    try {
        s.prefill_t0 = std::chrono::steady_clock::now();
        s.session->prefill(job.prompt);
    } catch (const ContextFullError& e) {
        end_job(s, error_event(ApiError(400, e.what(), "messages", "invalid_request_error", "context_length_exceeded")));
        return;
    } catch (const std::exception& e) {
        if (batcher_) batcher_->drop(*s.backend);
        s.session->reset();   // whatever the cache holds is suspect
        end_job(s, error_event(ApiError(500, std::string("the engine failed: ") + e.what(), "", "server_error")));
        return;
    }
    // Batched: the prompt runs in the steps to come; generation starts after.
    if (!batcher_ || batcher_->queued(*s.backend) == 0) begin_generation(s);
}

void Scheduler::begin_generation(Slot& s) {
    Job& job = *s.job;
    if (batcher_) s.session->set_prompt_ms(seconds_since(s.prefill_t0) * 1000.0);
    try {
        s.gen.emplace(*s.session, job.gen, &job.cancel, job.logprobs);
    } catch (const std::exception& e) {
        end_job(s, error_event(ApiError(500, std::string("the engine failed: ") + e.what(), "", "server_error")));
        return;
    }
    const Timings& t = s.gen->result().timings;
    Event ev;
    ev.kind = Event::Kind::Started;
    ev.prompt_tokens = uint32_t(job.prompt.size());
    ev.cached_tokens = t.prompt_reused;
    ev.timings = t;
    ev.slot = s.index;
    ev.choice = job.choice;
    job.events().push(std::move(ev));
    job.prompt_done.store(true);   // the group's other choices may start now
    std::lock_guard lk(mu_);
    stats_.prompt_tokens += t.prompt_tokens;
    stats_.prompt_tokens_cached += t.prompt_reused;
    stats_.prompt_seconds += t.prompt_ms / 1000.0;
}

bool Scheduler::step_job(Slot& s) {
    Job& job = *s.job;
    GenStep st;
    try {
        st = s.gen->step();
    } catch (const std::exception& e) {
        s.session->reset();
        end_job(s, error_event(ApiError(500, std::string("the engine failed: ") + e.what(), "", "server_error")));
        return false;
    }
    const bool sampled = st.token.has_value();
    if (st.token && job.logprobs >= 0) s.pending.push_back({*st.token, st.logprob, std::move(st.top)});
    if (!st.text.empty()) {
        Event ev;
        ev.kind = Event::Kind::Text;
        ev.text = std::move(st.text);
        ev.logprobs = std::move(s.pending);
        s.pending.clear();
        ev.choice = job.choice;
    job.events().push(std::move(ev));
    }
    if (!st.done) return sampled;
    // Log-probabilities of tokens whose text was never returned (a stop
    // string's) are dropped with it.
    Generation g = s.gen->take_result();
    Event done;
    done.kind = Event::Kind::Done;
    done.finish = g.finish;
    done.stop = std::move(g.stop);
    done.prompt_tokens = uint32_t(job.prompt.size());
    done.cached_tokens = g.timings.prompt_reused;
    done.completion_tokens = uint32_t(g.tokens.size());
    done.timings = g.timings;
    end_job(s, std::move(done));
    return sampled;
}

void Scheduler::end_job(Slot& s, Event last) {
    last.choice = s.job->choice;
    s.job->prompt_done.store(true);
    s.job->events().push(std::move(last));
    s.job.reset();
    s.gen.reset();
    s.pending.clear();
    std::lock_guard lk(mu_);
    --admitted_;
    --stats_.active;
}

void Scheduler::run() {
    try {
        load();
    } catch (const std::exception& e) {
        std::lock_guard lk(mu_);
        state_ = State::Failed;
        load_error_ = e.what();
        load_exception_ = std::current_exception();
        cv_.notify_all();
        return;
    }
    {
        std::lock_guard lk(mu_);
        state_ = State::Ready;
    }
    cv_.notify_all();

    std::vector<Slot*> starting;
    for (;;) {
        starting.clear();
        {
            std::unique_lock lk(mu_);
            cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || stats_.active > 0; });
            if (stopping_) break;
            // In order, except that a group's later choices wait until its
            // first has evaluated the prompt (jobs behind them go ahead).
            for (auto it = queue_.begin(); it != queue_.end();) {
                if ((*it)->first && !(*it)->first->prompt_done.load()) {
                    ++it;
                    continue;
                }
                Slot* s = pick_slot((*it)->prompt);
                if (!s) break;
                s->job = std::move(*it);
                it = queue_.erase(it);
                starting.push_back(s);
                ++stats_.active;
            }
            stats_.queued = queue_.size();
        }
        for (Slot* s : starting) start_job(*s);
        // One token for every active slot: every stream advances. Batched,
        // a slot samples only once its queued work has run, then one step
        // evaluates every slot's next request.
        const auto t0 = std::chrono::steady_clock::now();
        uint64_t tokens = 0;
        for (auto& s : slots_) {
            if (!s->job) continue;
            if (batcher_ && batcher_->queued(*s->backend)) {
                if (s->job->cancel.load()) {   // a prompt still queued: its work dropped now
                    batcher_->drop(*s->backend);
                    s->session->reset();
                    Event done;
                    done.kind = Event::Kind::Done;
                    done.finish = FinishReason::Cancelled;
                    end_job(*s, std::move(done));
                }
                continue;
            }
            if (!s->gen) {
                begin_generation(*s);
                continue;
            }
            if (step_job(*s)) ++tokens;
        }
        uint32_t stepped = 0;
        if (batcher_) {
            try {
                stepped = batcher_->step();
            } catch (const std::exception& e) {
                // The step's sequences lost their work: every running job ends.
                for (auto& s : slots_) {
                    if (!s->job) continue;
                    batcher_->drop(*s->backend);
                    s->session->reset();
                    end_job(*s, error_event(ApiError(500, std::string("the engine failed: ") + e.what(), "", "server_error")));
                }
            }
        }
        std::lock_guard lk(mu_);
        stats_.decode_seconds += seconds_since(t0);
        stats_.generated_tokens += tokens;
        if (batcher_) {
            const KvPool::Stats ps = batcher_->pool_stats();
            stats_.kv_pages = ps.pages;
            stats_.kv_pages_used = ps.used;
            stats_.kv_pages_cached = ps.cached;
            stats_.kv_pages_free = ps.free;
            stats_.prefix_hit_tokens = ps.prefix_hit_tokens;
            stats_.steps += stepped ? 1 : 0;
            stats_.step_tokens += stepped;
            if (stepped) {
                size_t b = 0;
                while (b + 1 < stats_.step_sequences.size() &&
                       batcher_->last_step_sequences() > SchedulerStats::kStepBuckets[b])
                    ++b;
                ++stats_.step_sequences[b];
            }
            const cpu::Batcher::Counts c = batcher_->counts();
            stats_.running = c.running;
            stats_.waiting = c.waiting;
            stats_.preemptions = c.preemptions;
        }
        for (size_t i = 0; i < slots_.size(); ++i) {
            stats_.slots[i].busy = slots_[i]->job != nullptr;
            // Batched: what the slot's sequence holds in the pool (its
            // cached conversation's pages may have gone to other streams).
            stats_.slots[i].kv_tokens = batcher_ ? batcher_->positions(*slots_[i]->backend)
                                                 : uint32_t(slots_[i]->session->cached().size());
        }
    }

    // Shutting down: every job still admitted ends with an error event.
    const ApiError bye(503, "the server is shutting down", "", "server_error", "shutting_down");
    for (auto& s : slots_)
        if (s->job) end_job(*s, error_event(bye));
    std::lock_guard lk(mu_);
    for (auto& j : queue_) {
        Event e = error_event(bye);
        e.choice = j->choice;
        j->events().push(std::move(e));
        --admitted_;
    }
    queue_.clear();
    stats_.queued = 0;
    state_ = State::Stopped;
}

}  // namespace ptxlm::server
