// One conversation's state on a backend: the tokens whose keys and values the
// cache holds, prompt processing that reuses the longest cached prefix, and
// the generation loop (sampling, end-of-generation tokens, stop strings,
// streaming of complete UTF-8 text, cancellation). run, chat, perplexity and
// serve all drive the engine through this.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend.h"
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

struct GenerateOptions {
    int32_t max_tokens = -1;        // < 0: until the context is full
    SamplerParams sampling;
    std::vector<std::string> stop;  // stop strings: generation ends before them
    bool ignore_eos = false;        // end-of-generation tokens are never sampled
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
    Timings timings;
};

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

    const std::vector<TokenId>& cached() const { return cached_; }
    std::span<const float> logits() const { return logits_; }
    uint32_t n_ctx() const { return backend_.n_ctx(); }
    void reset() { cached_.clear(); }

private:
    Backend& backend_;
    const Tokenizer& tok_;
    std::vector<TokenId> cached_;
    std::vector<float> logits_;
    std::vector<TokenId> eog_;      // every end-of-generation id of the vocabulary
    Timings last_prompt_;
};

}  // namespace ptxlm
