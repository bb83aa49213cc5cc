#include "engine/cpu/batcher.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace ptxlm::cpu {

class Batcher::Seq final : public Backend {
public:
    Seq(Batcher& b, KvPool::Seq id) : b_(b), id_(id) {}
    ~Seq() override { b_.close(*this); }

    std::string description() const override {
        return b_.be_->description() + ", one of " + std::to_string(b_.n_seqs_) + " sequences stepped together";
    }
    DeviceInfo device_info() const override { return b_.be_->device_info(); }
    uint32_t n_ctx() const override { return b_.n_ctx_; }
    uint32_t n_vocab() const override { return b_.be_->n_vocab(); }
    uint32_t max_batch() const override { return kMaxRequest; }
    bool queues_evals() const override { return true; }
    void eval_batch(std::span<const TokenId> tokens, uint32_t pos, float* logits, uint32_t n_logits) override {
        b_.enqueue(*this, tokens, pos, logits, n_logits);
    }
    uint32_t reuse_prefix(std::span<const TokenId> prompt, uint32_t keep) override { return b_.reuse(*this, prompt, keep); }
    TokenId eval_argmax(TokenId, uint32_t) override {
        throw std::logic_error("a batched sequence has no argmax of its own: use eval_argmax_into");
    }
    void eval_argmax_into(TokenId token, uint32_t pos, TokenId* out) override {
        if (!out) throw std::invalid_argument("eval_argmax_into: nowhere to write the id");
        b_.enqueue(*this, {&token, 1}, pos, nullptr, 0, out);
    }

    Batcher& b_;
    KvPool::Seq id_;
    uint32_t done_ = 0;             // positions evaluated
    std::deque<Request> q_;         // evaluations queued: positions done_ .. tokens_.size()
    std::vector<TokenId> tokens_;   // every position's token, evaluated or queued
    bool preempted_ = false;        // holds no pages: its tokens are recomputed when it resumes
    uint64_t arrival_ = 0;          // when its latest prompt was queued
};

namespace {

// Pages for the pool: kv_positions (0: n_seqs x n_ctx) in whole pages.
uint32_t pool_pages(uint32_t n_ctx, uint32_t n_seqs, uint32_t page_size, uint64_t kv_positions) {
    if (page_size == 0) throw std::invalid_argument("batcher: pages of no positions");
    if (n_seqs == 0) throw std::invalid_argument("batcher: no sequences");
    const uint64_t per_seq = (uint64_t(n_ctx) + page_size - 1) / page_size;
    if (kv_positions == 0) return uint32_t(std::min<uint64_t>(per_seq * n_seqs, UINT32_MAX));
    if (kv_positions < n_ctx)
        throw std::invalid_argument("batcher: a pool of " + std::to_string(kv_positions) +
                                    " positions is smaller than one sequence's context of " + std::to_string(n_ctx));
    const uint64_t pages = (kv_positions + page_size - 1) / page_size;
    if (pages > UINT32_MAX) throw std::invalid_argument("batcher: a pool of " + std::to_string(kv_positions) +
                                                        " positions is too large");
    return uint32_t(pages);
}

}  // namespace

Batcher::Batcher(const MakeBackend& make, uint32_t n_ctx, uint32_t n_seqs, uint32_t step_tokens, uint32_t page_size,
                 uint64_t kv_positions)
    : pool_(pool_pages(n_ctx, n_seqs, page_size, kv_positions), page_size),
      be_(make(KvPages{pool_.n_pages(), page_size})),
      n_ctx_(n_ctx),
      n_seqs_(n_seqs) {
    if (be_->n_ctx() != n_ctx)
        throw std::invalid_argument("batcher: a backend of " + std::to_string(be_->n_ctx()) +
                                    " positions for sequences of " + std::to_string(n_ctx));
    const uint32_t most = be_->max_step_tokens();
    if (step_tokens == 0) step_tokens = most;
    if (step_tokens > most)
        throw std::invalid_argument("batcher: " + std::to_string(step_tokens) + " tokens per step (1 to " +
                                    std::to_string(most) + ")");
    step_tokens_ = prefill_tokens_ = step_tokens;
}

Batcher::Batcher(const Model& m, uint32_t n_ctx, KvType kv, std::shared_ptr<ThreadPool> pool, uint32_t n_seqs,
                 uint32_t step_tokens, uint32_t page_size, uint64_t kv_positions)
    : Batcher(
          [&](KvPages pages) { return std::make_unique<CpuBackend>(m, n_ctx, kv, std::move(pool), pages); }, n_ctx,
          n_seqs, step_tokens == 0 ? UINT32_MAX : step_tokens, page_size, kv_positions) {}

Batcher::~Batcher() {
    if (!seqs_.empty()) std::fprintf(stderr, "ptxlm: a batcher destroyed before %zu of its sequences\n", seqs_.size());
}

std::unique_ptr<Backend> Batcher::open() {
    if (seqs_.size() >= n_seqs_)
        throw std::logic_error("batcher: " + std::to_string(n_seqs_) + " sequences are open already");
    auto s = std::make_unique<Seq>(*this, pool_.create());
    seqs_.push_back(s.get());
    return s;
}

Batcher::Seq& Batcher::find(const Backend& b) const {
    for (Seq* s : seqs_)
        if (s == &b) return *s;
    throw std::invalid_argument("batcher: not one of its sequences");
}

size_t Batcher::queued() const {
    size_t n = 0;
    for (const Seq* s : seqs_) n += s->q_.size();
    return n;
}

size_t Batcher::queued(const Backend& seq) const { return find(seq).q_.size(); }

void Batcher::close(Seq& s) {
    seqs_.erase(std::find(seqs_.begin(), seqs_.end(), &s));
    pool_.release(s.id_);
}

void Batcher::drop(const Backend& seq) {
    Seq& s = find(seq);
    s.q_.clear();
    if (!s.preempted_) pool_.truncate(s.id_, s.done_, true);   // the abandoned positions' pages hold nothing to find
    s.tokens_.resize(s.done_);
}

Batcher::Counts Batcher::counts() const {
    Counts c;
    for (const Seq* s : seqs_)
        if (!s->q_.empty()) ++(s->preempted_ ? c.waiting : c.running);
    c.preemptions = preemptions_;
    return c;
}

void Batcher::set_prefill_tokens(uint32_t n) {
    if (n == 0 || n > be_->max_step_tokens())
        throw std::invalid_argument("batcher: " + std::to_string(n) + " prompt tokens per step (1 to " +
                                    std::to_string(be_->max_step_tokens()) + ")");
    prefill_tokens_ = n;
}

bool Batcher::preempted(const Backend& seq) const { return find(seq).preempted_; }

uint32_t Batcher::positions(const Backend& seq) const {
    const Seq& s = find(seq);
    return s.preempted_ ? 0 : pool_.length(s.id_);
}

bool Batcher::append(Seq& s, uint32_t from) {
    if (from == s.tokens_.size()) return true;
    std::vector<KvPool::Copy> copies;
    if (!pool_.append(s.id_, std::span<const TokenId>(s.tokens_).subspan(from), copies)) return false;
    for (const KvPool::Copy& c : copies) be_->copy_page(c.from, c.to, c.positions);
    return true;
}

void Batcher::preempt(Seq& s) {
    // The positions reserved but not evaluated hold nothing to find; the
    // full pages evaluated stay cached, findable when s resumes.
    pool_.truncate(s.id_, s.done_, true);
    pool_.truncate(s.id_, 0);
    s.preempted_ = true;
    if (!s.q_.empty()) ++preemptions_;
}

Batcher::Seq* Batcher::idle_victim(const Seq& except) const {
    Seq* victim = nullptr;
    for (Seq* o : seqs_)
        if (o != &except && !o->preempted_ && o->q_.empty() && pool_.length(o->id_) != 0 &&
            (!victim || o->arrival_ < victim->arrival_))
            victim = o;
    return victim;
}

void Batcher::reserve(Seq& s, uint32_t from) {
    while (!append(s, from)) {
        // Room from an idle sequence's pages first, else from the sequence
        // with the newest prompt: s itself when no sequence holding pages
        // is newer.
        Seq* victim = idle_victim(s);
        if (!victim) {
            victim = &s;
            for (Seq* o : seqs_)
                if (!o->preempted_ && !o->q_.empty() && o->arrival_ > victim->arrival_) victim = o;
        }
        preempt(*victim);
        if (victim == &s) return;
    }
}

bool Batcher::resume(Seq& s) {
    // Reattach the evaluated pages still cached, but none that another
    // sequence has reserved and not yet evaluated.
    uint32_t got = pool_.attach_prefix(s.id_, std::span<const TokenId>(s.tokens_).first(s.done_));
    const uint32_t ps = pool_.page_size();
    for (const Seq* o : seqs_) {
        if (o == &s || o->preempted_ || o->q_.empty()) continue;
        const std::span<const uint32_t> theirs = pool_.pages(o->id_), mine = pool_.pages(s.id_);
        for (uint32_t i = 0; i < got / ps; ++i)
            if (std::find(theirs.begin() + o->done_ / ps, theirs.end(), mine[i]) != theirs.end()) {
                got = i * ps;
                break;
            }
    }
    pool_.truncate(s.id_, got);
    while (!append(s, got)) {
        // Room from idle sequences' pages, never from running ones.
        Seq* victim = idle_victim(s);
        if (!victim) {
            pool_.truncate(s.id_, 0);
            return false;
        }
        preempt(*victim);
    }
    s.preempted_ = false;
    if (got < s.done_)
        s.q_.push_front({got, std::vector<TokenId>(s.tokens_.begin() + got, s.tokens_.begin() + s.done_), nullptr, 0});
    s.done_ = got;
    return true;
}

uint32_t Batcher::reuse(Seq& s, std::span<const TokenId> prompt, uint32_t keep) {
    // Only when nothing is queued: then every findable page has been
    // evaluated (a page becomes findable when its positions are reserved).
    if (queued() != 0) return keep;
    const uint32_t found = pool_.prefix_length(prompt);
    if (found <= keep) return keep;
    pool_.truncate(s.id_, 0);
    const uint32_t got = pool_.attach_prefix(s.id_, prompt);
    s.done_ = got;
    s.tokens_.assign(prompt.begin(), prompt.begin() + got);
    s.preempted_ = false;
    return got;
}

void Batcher::enqueue(Seq& s, std::span<const TokenId> tokens, uint32_t pos, float* logits, uint32_t n_logits,
                      TokenId* argmax) {
    const uint32_t n = static_cast<uint32_t>(tokens.size());
    if (n == 0) return;
    if (n > kMaxRequest)
        throw std::invalid_argument("eval_batch: more than " + std::to_string(kMaxRequest) + " tokens");
    if (logits && (n_logits == 0 || n_logits > n)) throw std::invalid_argument("eval_batch: bad n_logits");
    for (TokenId token : tokens)
        if (token < 0 || uint32_t(token) >= be_->n_vocab())
            throw ModelError("token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                             std::to_string(be_->n_vocab() - 1) + ")");
    if (uint64_t(pos) + n > n_ctx_)
        throw ModelError("position " + std::to_string(uint64_t(pos) + n - 1) + " is past the context of " +
                         std::to_string(n_ctx_) + " tokens");
    const uint32_t length = static_cast<uint32_t>(s.tokens_.size());
    if (pos > length)
        throw std::invalid_argument("eval_batch: position " + std::to_string(pos) + " leaves a gap after the " +
                                    std::to_string(length) + " the cache holds");
    if (pos < length) {   // a rewind: what the cache held from pos on is replaced
        if (!s.q_.empty()) throw std::logic_error("eval_batch: a rewind while evaluations are queued");
        if (!s.preempted_) pool_.truncate(s.id_, pos);
        s.tokens_.resize(pos);
        s.done_ = std::min(s.done_, pos);
    }
    if (s.q_.empty() && (n > 1 || pos == 0)) s.arrival_ = ++arrivals_;   // a prompt, not the next decode token
    s.tokens_.insert(s.tokens_.end(), tokens.begin(), tokens.end());
    s.q_.push_back({pos, std::vector<TokenId>(tokens.begin(), tokens.end()), logits, logits ? n_logits : 0, argmax});
    if (!s.preempted_) reserve(s, pos);   // a preempted sequence reserves all its pages when it resumes
}

uint32_t Batcher::step() {
    // Decode tokens first (a request of one token), then prompt chunks in
    // turn from next_, each as far as the budget allows.
    std::vector<Seq*> waiting;
    for (Seq* s : seqs_)
        if (s->preempted_ && !s->q_.empty()) waiting.push_back(s);
    std::sort(waiting.begin(), waiting.end(), [](const Seq* a, const Seq* b) { return a->arrival_ < b->arrival_; });
    for (Seq* s : waiting)
        if (!resume(*s)) break;   // first come, first resumed
    std::vector<std::pair<Seq*, uint32_t>> take;
    uint32_t budget = step_tokens_;
    for (Seq* s : seqs_)
        if (!s->preempted_ && !s->q_.empty() && s->q_.front().tokens.size() == 1 && budget) {
            take.push_back({s, 1});
            --budget;
        }
    if (take.empty()) budget = prefill_tokens_;   // no stream waits for this step
    for (size_t i = 0; i < seqs_.size() && budget; ++i) {
        Seq* s = seqs_[(next_ + i) % seqs_.size()];
        if (s->preempted_ || s->q_.empty() || s->q_.front().tokens.size() == 1) continue;
        const uint32_t k = std::min<uint32_t>(budget, static_cast<uint32_t>(s->q_.front().tokens.size()));
        take.push_back({s, k});
        budget -= k;
    }
    last_seqs_ = static_cast<uint32_t>(take.size());
    if (take.empty()) return 0;
    if (!seqs_.empty()) next_ = (next_ + 1) % seqs_.size();
    const uint64_t nv = be_->n_vocab();
    std::vector<SeqStep> batch;
    std::vector<uint32_t> wanted;   // per part: logits rows it writes
    for (auto [s, k] : take) {
        const Request& r = s->q_.front();
        const uint32_t n = static_cast<uint32_t>(r.tokens.size()), first_wanted = n - r.n_logits;
        const uint32_t w = r.logits && k > first_wanted ? k - first_wanted : 0;
        wanted.push_back(w);
        batch.push_back({pool_.pages(s->id_), r.pos, {r.tokens.data(), k}, w ? r.logits : nullptr, w,
                         k == n ? r.argmax : nullptr});
    }
    try {
        be_->step(batch);
    } catch (...) {
        for (auto [s, k] : take) drop(*s);
        throw;
    }
    uint32_t tokens = 0;
    for (size_t i = 0; i < take.size(); ++i) {
        auto [s, k] = take[i];
        Request& r = s->q_.front();
        tokens += k;
        s->done_ = r.pos + k;
        if (k == r.tokens.size()) {
            s->q_.pop_front();
            continue;
        }
        r.tokens.erase(r.tokens.begin(), r.tokens.begin() + k);
        r.pos += k;
        if (wanted[i]) {
            r.logits += wanted[i] * nv;
            r.n_logits -= wanted[i];
        }
    }
    return tokens;
}

}  // namespace ptxlm::cpu
