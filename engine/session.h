// One conversation's state on a backend: the tokens whose keys and values the
// cache holds, prompt processing that reuses the longest cached prefix, and
// the generation loop (sampling, end-of-generation tokens, stop strings,
// streaming of complete UTF-8 text, cancellation). run, chat, perplexity and
// serve all drive the engine through this: run and chat through
// Session::generate, the server through Generator, one token per step, so
// that one engine thread can advance several sessions in turn.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/grammar.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"

namespace ptxlm {

// The context cannot hold what was asked (a prompt longer than it).
class ContextFullError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class FinishReason { Stop, Length, ContextFull, Cancelled };
const char* finish_reason_name(FinishReason r);   // "stop", "length", "context_full", "cancelled"

// A grammar the answer follows: before each token is sampled, the tokens
// the grammar does not allow next are masked out (Tokenizer::grammar_filter;
// end-of-generation tokens only where the grammar may end).
struct GrammarConstraint {
    std::shared_ptr<const grammar::Grammar> grammar;
    // Empty: the whole answer follows it. Otherwise the answer is free text
    // until one of these strings appears, and the grammar holds from that
    // string's first byte on (a lazy grammar: a tool call that may or may not
    // come). Inside a reasoning block they do not count: when the answer
    // starts in one (`in_reasoning`) or opens one with `reasoning_open`,
    // only after `reasoning_close`.
    std::vector<std::string> triggers;
    std::string reasoning_open, reasoning_close;
    bool in_reasoning = false;
    // Without triggers and with a reasoning format, the model may reason
    // before the grammar's text: `after_reasoning` (whitespace, then
    // `grammar`) holds from the closing tag on; `opening` holds the first
    // bytes when the prompt did not open the block (the opening tag, or
    // `grammar`'s text). An end token cannot end the answer inside the block.
    std::shared_ptr<const grammar::Grammar> after_reasoning, opening;
};

struct GenerateOptions {
    int32_t max_tokens = -1;        // < 0: until the context is full
    SamplerParams sampling;
    std::vector<std::string> stop;  // stop strings: generation ends before them
    bool ignore_eos = false;        // end-of-generation tokens are never sampled
    std::shared_ptr<const GrammarConstraint> grammar;   // none: free text
};

struct Timings {
    uint32_t prompt_tokens = 0;     // evaluated for this request (the reused prefix excluded)
    uint32_t prompt_reused = 0;     // prompt tokens already in the cache
    double prompt_ms = 0;
    uint32_t generated = 0;
    double generate_ms = 0;
    double prompt_tps() const { return prompt_ms > 0 ? prompt_tokens * 1000.0 / prompt_ms : 0; }
    double generate_tps() const { return generate_ms > 0 ? generated * 1000.0 / generate_ms : 0; }
};

struct Generation {
    std::vector<TokenId> tokens;    // sampled ids, the end-of-generation token excluded
    std::string text;               // the text emitted (stop string excluded)
    FinishReason finish = FinishReason::Stop;
    std::string stop;               // the stop string that ended the text; empty: none did
    Timings timings;
};

class Generator;

class Session {
public:
    Session(Backend& backend, const Tokenizer& tokenizer);

    // Makes the cache hold exactly `prompt` and the logits those of its last
    // token: keeps the longest common prefix with what is cached and
    // evaluates the rest (at least the last token). Throws ContextFullError
    // when the prompt leaves no room to generate. Records prompt timings.
    void prefill(std::span<const TokenId> prompt);

    // Samples after prefill(). on_text receives text as it becomes final;
    // generation ends at an end-of-generation token (unless ignore_eos), a
    // stop string, max_tokens, a full context, or when cancel becomes true.
    Generation generate(const GenerateOptions& opt, const std::function<void(std::string_view)>& on_text,
                        const std::atomic<bool>* cancel = nullptr);

    // For a backend that queues its evaluations (Backend::queues_evals):
    // prefill returns before the prompt has run, so its caller records the
    // prompt's time once it has (before the Generator starts).
    void set_prompt_ms(double ms) { last_prompt_.prompt_ms = ms; }

    const std::vector<TokenId>& cached() const { return cached_; }
    std::span<const float> logits() const { return logits_; }
    uint32_t n_ctx() const { return backend_.n_ctx(); }
    void reset() { cached_.clear(); }

private:
    friend class Generator;
    Backend& backend_;
    const Tokenizer& tok_;
    std::vector<TokenId> cached_;
    std::vector<float> logits_;
    std::vector<TokenId> eog_;      // every end-of-generation id of the vocabulary
    TokenId argmax_ = -1;           // where the backend writes a greedy step's id (Backend::eval_argmax_into)
    Timings last_prompt_;
};

// What one step of a Generator produced.
struct GenStep {
    std::string text;                 // text that became final (whole UTF-8 characters; stop strings held back)
    std::optional<TokenId> token;     // the token sampled, if the step sampled one
    // With logprobs asked: the sampled token's log-probability and the n most
    // likely tokens' (best first), under the softmax of the raw logits
    // (before penalties, temperature and cuts).
    float logprob = 0;
    std::vector<std::pair<TokenId, float>> top;
    bool done = false;                // generation has ended; result().finish says why
};

// The generation loop of Session::generate, one token per step(): sample a
// token, emit the text it completes, evaluate it. The end conditions, the
// text and the timings are the same as generate()'s (which is a loop over
// step()). Construct it after Session::prefill; the session must not be
// prefilled again while the generator runs.
class Generator {
public:
    // top_logprobs < 0: no log-probabilities; n >= 0: each step reports the
    // sampled token's and the n most likely tokens' (this needs the logits on
    // the host, so greedy decoding then reads them instead of the backend's
    // argmax).
    Generator(Session& session, const GenerateOptions& opt, const std::atomic<bool>* cancel = nullptr,
              int top_logprobs = -1);

    // One token. After the step that reports done, step() must not be called.
    GenStep step();
    bool done() const { return done_; }
    // Tokens and text so far; finish and the generation timings once done.
    const Generation& result() const { return g_; }
    Generation take_result() { return std::move(g_); }

private:
    void finish(FinishReason why, GenStep& st);
    // After token t: the grammar's matcher advanced, or a trigger looked for.
    void follow_grammar(TokenId t);
    // The grammar's filter would allow t now.
    bool grammar_allows(TokenId t) const;

    Session& s_;
    GenerateOptions opt_;
    const std::atomic<bool>* cancel_;
    int top_logprobs_;
    Sampler sampler_;
    StreamDecoder decoder_;
    StopMatcher stops_;
    std::vector<float> work_;
    bool argmax_only_ = false;
    std::optional<TokenId> next_;     // the argmax of the current step, when the backend gave only that
    bool next_queued_ = false;        // next_ is the session's argmax_, once the backend has written it
    // Greedy tokens run ahead by the device (Backend::start_greedy), asked
    // for once; ended (which stops the device) when generation finishes.
    std::unique_ptr<Backend::GreedyStream> stream_;
    bool stream_tried_ = false;
    std::chrono::steady_clock::time_point t0_;
    Generation g_;
    bool done_ = false;
    // The grammar (opt_.grammar): its matcher once it holds; before that the
    // answer's bytes so far, searched for triggers from `search_from_`.
    std::optional<grammar::Matcher> matcher_;
    std::string raw_;
    size_t search_from_ = 0;
    bool in_reasoning_ = false;
    bool opening_checked_ = false;   // whether the answer opens a reasoning block is known
    bool opening_ = false;           // matcher_ follows GrammarConstraint::opening: the tag is still possible
};

}  // namespace ptxlm
