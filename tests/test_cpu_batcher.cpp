// Several sequences stepped together over one KV pool (engine/cpu/batcher.h),
// driven as the server drives its slots: Session::prefill queues a prompt
// (chunks split across steps when a step's budget is small), each
// Generator steps only once its sequence has nothing queued, and one
// batcher step evaluates every sequence's next request. Each stream's
// tokens and final logits equal a solo run's on its own CpuBackend, greedy
// and sampled, through a rewind to a shorter shared prefix; a prompt reuses
// the pages another sequence evaluated; a pool too small for every stream
// preempts and resumes them, their results unchanged; plain greedy streams
// take only each step's argmax. Negative control: a driver that reads a
// sequence's logits before its step has run generates other tokens.
// Misuse is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "engine/cpu/batcher.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/session.h"
#include "models/synth/synth.h"
#include "tests/forwarding_step.h"

using namespace ptxlm;

namespace {

struct Fixture : ::testing::TestWithParam<synth::Arch> {
    std::vector<uint8_t> bytes = synth::model_bytes(synth::preset(GetParam(), synth::Size::Tiny));
    Model model = Model::from_file(gguf::File::parse(bytes, "synth"));
    Tokenizer tok = Tokenizer::from_gguf(model.file);
};

GenerateOptions options(int n, float temperature, uint32_t seed) {
    GenerateOptions o;
    o.max_tokens = n;
    o.ignore_eos = true;   // every stream runs its full length
    o.sampling.temperature = temperature;
    o.sampling.seed = seed;
    return o;
}

std::vector<TokenId> prompt_of(uint32_t n, uint32_t salt) {
    std::vector<TokenId> p;
    for (uint32_t i = 0; i < n; ++i) p.push_back(TokenId((i * 7919u + salt * 131u + 13u) % 700u));
    return p;
}

struct Solo {
    std::vector<TokenId> tokens;
    std::vector<float> logits;
};

Solo solo(const Model& m, const Tokenizer& tok, const std::vector<TokenId>& prompt, const GenerateOptions& o) {
    cpu::CpuBackend b(m, 128, KvType::F16, 1);
    Session s(b, tok);
    s.prefill(prompt);
    Solo out{s.generate(o, nullptr).tokens, {}};
    out.logits.assign(s.logits().begin(), s.logits().end());
    return out;
}

struct Stream {
    std::unique_ptr<Backend> be;
    std::unique_ptr<Session> s;
    std::optional<Generator> g;
    GenerateOptions opt;
};

// The server's loop: generators step once their queue is empty (`eager`:
// whatever is queued, the negative control), then one batcher step.
void drive(cpu::Batcher& b, std::vector<Stream>& streams, bool eager = false) {
    for (int guard = 0; guard < 10000; ++guard) {
        bool running = false;
        for (Stream& st : streams) {
            const bool ready = eager || b.queued(*st.be) == 0;
            if (!st.g && ready) st.g.emplace(*st.s, st.opt);
            else if (st.g && !st.g->done() && ready) st.g->step();
            running |= !st.g || !st.g->done();
        }
        b.step();
        if (!running && b.queued() == 0) return;
    }
    ADD_FAILURE() << "the streams did not finish";
}

// Each stream's tokens and final logits are its solo run's.
void expect_solo(const Model& m, const Tokenizer& tok, std::vector<Stream>& streams,
                 const std::vector<std::vector<TokenId>>& prompts, const std::vector<GenerateOptions>& opts) {
    for (size_t i = 0; i < streams.size(); ++i) {
        const Solo want = solo(m, tok, prompts[i], opts[i]);
        EXPECT_EQ(streams[i].g->result().tokens, want.tokens) << "stream " << i;
        EXPECT_EQ(std::memcmp(streams[i].s->logits().data(), want.logits.data(), want.logits.size() * 4), 0)
            << "stream " << i;
    }
}

// A new request on a stream that shares 40 tokens with its first prompt
// (the cache rewound to them, or recomputed after a preemption), driven
// alone; returns the stream, now finished.
Stream continue_alone(cpu::Batcher& b, const Model& m, const Tokenizer& tok, Stream st, const std::vector<TokenId>& first) {
    std::vector<TokenId> again(first.begin(), first.begin() + 40);
    for (TokenId t : prompt_of(11, 9)) again.push_back(t);
    st.g.reset();
    st.s->prefill(again);
    st.opt = options(15, 0.7f, 5);
    std::vector<Stream> one;
    one.push_back(std::move(st));
    drive(b, one);
    EXPECT_EQ(one[0].g->result().tokens, solo(m, tok, again, one[0].opt).tokens);
    return std::move(one[0]);
}

TEST_P(Fixture, StreamsSteppedTogetherGenerateWhatEachGeneratesAlone) {
    const std::vector<std::vector<TokenId>> prompts = {prompt_of(70, 1), prompt_of(9, 2), prompt_of(33, 3)};
    const std::vector<GenerateOptions> opts = {options(20, 0, 1), options(30, 0.8f, 7), options(12, 1.0f, 3)};
    for (uint32_t budget : {64u, 5u}) {   // a small budget splits prompts over steps
        SCOPED_TRACE("step budget " + std::to_string(budget));
        cpu::Batcher b(model, 128, KvType::F16, std::make_shared<cpu::ThreadPool>(2), 3, budget);
        std::vector<Stream> streams(3);
        for (size_t i = 0; i < 3; ++i) {
            streams[i].be = b.open();
            EXPECT_TRUE(streams[i].be->queues_evals());
            streams[i].s = std::make_unique<Session>(*streams[i].be, tok);
            streams[i].s->prefill(prompts[i]);
            streams[i].opt = opts[i];
        }
        EXPECT_GT(b.queued(), 3u);
        drive(b, streams);
        expect_solo(model, tok, streams, prompts, opts);
        // Stream 0's cache is rewound to the 40 tokens (KvPool::truncate).
        const Stream st = continue_alone(b, model, tok, std::move(streams[0]), prompts[0]);
        EXPECT_EQ(st.g->result().timings.prompt_reused, 40u);
    }
}

TEST_P(Fixture, ReadingLogitsBeforeTheStepIsCaught) {
    // Steps of 5 tokens: the prompts take several, and the eager driver
    // samples from logits their last chunk has not written yet.
    cpu::Batcher b(model, 128, KvType::F16, std::make_shared<cpu::ThreadPool>(2), 2, 5);
    std::vector<Stream> streams(2);
    const std::vector<TokenId> p = prompt_of(20, 4);
    for (Stream& st : streams) {
        st.be = b.open();
        st.s = std::make_unique<Session>(*st.be, tok);
        st.s->prefill(p);
        st.opt = options(10, 0, 1);
    }
    drive(b, streams, true);
    EXPECT_NE(streams[0].g->result().tokens, solo(model, tok, p, streams[0].opt).tokens);
}

// A CpuBackend for the batcher that counts the parts of its steps that ask
// for an argmax and for logits.
class CountingCpu final : public test::ForwardingStep {
public:
    using ForwardingStep::ForwardingStep;
    void step(std::span<const SeqStep> batch) override {
        for (const SeqStep& s : batch) {
            argmax_parts += s.argmax != nullptr;
            logits_parts += s.logits != nullptr;
        }
        ForwardingStep::step(batch);
    }
    uint32_t argmax_parts = 0, logits_parts = 0;
};

// Plain greedy streams (no ignore_eos, penalties or log-probabilities) take
// only each step's argmax (Backend::eval_argmax_into, written by the step),
// beside a sampled stream that takes logits: the tokens are the solo runs',
// which read the full logits. Negative control: the step saw argmax parts,
// and the greedy sessions' logits stayed the prompt's (no decode step wrote
// them), so the argmax path is what ran.
TEST_P(Fixture, GreedyStreamsTakeOnlyTheArgmax) {
    CountingCpu* counting = nullptr;
    auto pool = std::make_shared<cpu::ThreadPool>(2);
    cpu::Batcher b(
        [&](KvPages pages) {
            auto c = std::make_unique<CountingCpu>(std::make_unique<cpu::CpuBackend>(model, 128, KvType::F16, pool, pages));
            counting = c.get();
            return c;
        },
        128, 3, 8);
    const std::vector<std::vector<TokenId>> prompts = {prompt_of(21, 5), prompt_of(9, 6), prompt_of(14, 7)};
    std::vector<GenerateOptions> opts = {options(16, 0, 1), options(16, 0.8f, 2), options(16, 0, 3)};
    opts[0].ignore_eos = opts[2].ignore_eos = false;   // plain greedy: the argmax alone
    std::vector<Stream> streams(3);
    std::vector<std::vector<float>> prompt_logits(3);
    for (size_t i = 0; i < 3; ++i) {
        streams[i].be = b.open();
        streams[i].s = std::make_unique<Session>(*streams[i].be, tok);
        streams[i].s->prefill(prompts[i]);
        streams[i].opt = opts[i];
    }
    while (b.step()) {}
    for (size_t i = 0; i < 3; ++i) prompt_logits[i].assign(streams[i].s->logits().begin(), streams[i].s->logits().end());
    drive(b, streams);
    ASSERT_NE(counting, nullptr);
    EXPECT_GT(counting->argmax_parts, 0u);
    EXPECT_GT(counting->logits_parts, 0u);
    for (size_t i = 0; i < 3; ++i) {
        const Solo want = solo(model, tok, prompts[i], opts[i]);
        EXPECT_EQ(streams[i].g->result().tokens, want.tokens) << "stream " << i;
        EXPECT_GT(streams[i].g->result().tokens.size(), 1u) << "stream " << i;
        const bool greedy = i != 1;
        EXPECT_EQ(streams[i].s->logits().size() == prompt_logits[i].size() &&
                      std::equal(prompt_logits[i].begin(), prompt_logits[i].end(), streams[i].s->logits().begin()),
                  greedy)
            << "stream " << i;
    }
}

// A prompt reuses the full pages another sequence evaluated with the same
// start (the pool's hash chain): 48 of a 60-token prompt sharing 50 tokens
// with another stream's, the tokens still the solo run's. Not while
// anything is queued (a findable page may not be evaluated yet), and never
// pages whose positions were reserved and then dropped unevaluated.
TEST_P(Fixture, APromptReusesPagesAnotherSequenceEvaluated) {
    cpu::Batcher b(model, 128, KvType::F16, std::make_shared<cpu::ThreadPool>(2), 3);
    const std::vector<TokenId> p = prompt_of(70, 1);
    std::vector<TokenId> q(p.begin(), p.begin() + 50);
    for (TokenId t : prompt_of(10, 8)) q.push_back(t);
    std::vector<Stream> a(1), c(1);
    a[0].be = b.open();
    a[0].s = std::make_unique<Session>(*a[0].be, tok);
    a[0].opt = options(5, 0, 1);
    // Reserved and dropped unevaluated: nothing of it may be found.
    a[0].s->prefill(p);
    b.drop(*a[0].be);
    c[0].be = b.open();
    c[0].s = std::make_unique<Session>(*c[0].be, tok);
    c[0].opt = options(6, 0.9f, 2);
    c[0].s->prefill(q);
    drive(b, c);
    EXPECT_EQ(c[0].g->result().timings.prompt_reused, 0u);
    a[0].s->reset();
    a[0].s->prefill(p);
    drive(b, a);
    EXPECT_EQ(a[0].g->result().tokens, solo(model, tok, p, a[0].opt).tokens);
    std::vector<Stream> d(1);
    d[0].be = b.open();
    d[0].s = std::make_unique<Session>(*d[0].be, tok);
    d[0].opt = options(6, 0.9f, 2);
    a[0].g.reset();
    a[0].s->prefill(prompt_of(20, 5));   // queued: d must not reuse now
    d[0].s->prefill(q);
    while (b.step()) {}
    EXPECT_EQ(Generator(*d[0].s, d[0].opt).result().timings.prompt_reused, 0u);
    d[0].s->reset();
    d[0].s->prefill(q);   // nothing queued: three pages of 16 found
    drive(b, d);
    EXPECT_EQ(d[0].g->result().timings.prompt_reused, 48u);
    EXPECT_EQ(d[0].g->result().tokens, solo(model, tok, q, d[0].opt).tokens);
    EXPECT_EQ(d[0].g->result().tokens, c[0].g->result().tokens);
}

// A pool of one context (128 positions) for four streams that need about
// 300: requests that find no page left preempt the newest prompt's stream
// (its pages released, its tokens recomputed when it resumes), a finished
// stream's idle pages go first. Every stream's tokens and logits are still
// a solo run's, also for a stream whose idle conversation was evicted and
// then continues; every page is released once the streams close.
TEST_P(Fixture, StreamsPreemptedForPagesGenerateWhatEachGeneratesAlone) {
    const std::vector<std::vector<TokenId>> prompts = {prompt_of(70, 1), prompt_of(40, 2), prompt_of(33, 3),
                                                       prompt_of(50, 4)};
    const std::vector<GenerateOptions> opts = {options(30, 0, 1), options(25, 0.8f, 7), options(40, 0, 3),
                                               options(20, 1.0f, 4)};
    for (uint32_t budget : {64u, 7u}) {
        SCOPED_TRACE("step budget " + std::to_string(budget));
        cpu::Batcher b(model, 128, KvType::F16, std::make_shared<cpu::ThreadPool>(2), 4, budget, 16, 128);
        EXPECT_EQ(b.pool_stats().pages, 8u);
        std::vector<Stream> streams(4);
        for (size_t i = 0; i < 4; ++i) {
            streams[i].be = b.open();
            streams[i].s = std::make_unique<Session>(*streams[i].be, tok);
            streams[i].s->prefill(prompts[i]);
            streams[i].opt = opts[i];
        }
        EXPECT_GT(b.counts().waiting, 0u);   // the pool holds only some prompts
        drive(b, streams);
        EXPECT_GT(b.counts().preemptions, 0u);
        expect_solo(model, tok, streams, prompts, opts);
        // Stream 0's conversation continues after the others' pages took its own.
        std::optional<Stream> st = continue_alone(b, model, tok, std::move(streams[0]), prompts[0]);
        EXPECT_EQ(b.counts().running + b.counts().waiting, 0u);
        st.reset();
        streams.clear();
        EXPECT_EQ(b.pool_stats().used, 0u);
        EXPECT_EQ(b.pool_stats().cached + b.pool_stats().free, 8u);
    }
}

// A step with a stream decoding takes step_tokens in all; a step of
// prompts alone takes the prefill budget.
TEST_P(Fixture, AStepOfPromptsAloneTakesThePrefillBudget) {
    cpu::Batcher b(model, 128, KvType::F16, std::make_shared<cpu::ThreadPool>(2), 2, 5);
    b.set_prefill_tokens(64);
    std::unique_ptr<Backend> x = b.open(), y = b.open();
    std::vector<float> logits(x->n_vocab());
    x->eval_batch(prompt_of(40, 1), 0, logits.data(), 1);
    EXPECT_EQ(b.step(), 40u);
    x->eval_batch(prompt_of(1, 2), 40, logits.data(), 1);   // a decode token
    y->eval_batch(prompt_of(30, 3), 0, logits.data(), 1);
    EXPECT_EQ(b.step(), 5u);    // the decode token and 4 prompt tokens
    EXPECT_EQ(b.step(), 26u);   // the prompt's rest, alone
    EXPECT_THROW(b.set_prefill_tokens(65), std::invalid_argument);
}

TEST_P(Fixture, MisuseIsRefused) {
    cpu::Batcher b(model, 32, KvType::F16, std::make_shared<cpu::ThreadPool>(1), 1);
    std::unique_ptr<Backend> s = b.open();
    EXPECT_THROW(b.open(), std::logic_error);
    std::vector<float> logits(s->n_vocab());
    const std::vector<TokenId> p = prompt_of(8, 1);
    EXPECT_THROW(s->eval_batch(p, 3, nullptr, 0), std::invalid_argument);   // a gap
    s->eval_batch(p, 0, logits.data(), 1);
    EXPECT_THROW(s->eval_batch(p, 2, nullptr, 0), std::logic_error);   // a rewind over queued work
    EXPECT_THROW(s->eval_argmax(p[0], 8), std::logic_error);
    EXPECT_THROW(s->eval_batch(p, 30, nullptr, 0), ModelError);   // past the context
    EXPECT_EQ(b.step(), 8u);
    EXPECT_EQ(b.queued(), 0u);
    s->eval_batch(p, 8, nullptr, 0);
    b.drop(*s);   // a cancelled request: the cache ends at what was evaluated
    s->eval_batch(p, 8, logits.data(), 1);   // no gap
    EXPECT_EQ(b.step(), 8u);
    EXPECT_THROW(cpu::Batcher(model, 32, KvType::F16, std::make_shared<cpu::ThreadPool>(1), 1, 65), std::invalid_argument);
    // A pool smaller than one context, a page of no positions.
    EXPECT_THROW(cpu::Batcher(model, 32, KvType::F16, std::make_shared<cpu::ThreadPool>(1), 2, 8, 16, 31),
                 std::invalid_argument);
    EXPECT_THROW(cpu::Batcher(model, 32, KvType::F16, std::make_shared<cpu::ThreadPool>(1), 2, 8, 0), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Archs, Fixture, ::testing::Values(synth::Arch::Llama, synth::Arch::Gemma3),
                         [](const auto& info) { return std::string(synth::arch_name(info.param)); });

}  // namespace
