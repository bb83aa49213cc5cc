// Choosing the next token from a row of logits, and stop strings.
//
// The chain, in llama.cpp's default order (common_sampler: penalties, top-k,
// top-p, min-p, temperature, dist):
//   1. penalties over the last penalty_last_n accepted tokens: repetition
//      (positive logits divided, negative multiplied), then frequency
//      (per occurrence) and presence (once) subtracted;
//   2. temperature <= 0: greedy, the argmax (ties to the lowest id);
//   3. top-k keeps the k highest logits;
//   4. top-p keeps the smallest highest-first prefix whose softmax mass (at
//      temperature 1) reaches top_p;
//   5. min-p keeps tokens whose probability is >= min_p times the best's;
//   6. the survivors' logits are divided by the temperature and one token is
//      drawn from their softmax with a seeded std::mt19937_64 (same seed and
//      same logits: same tokens).
// The cuts read temperature-1 probabilities, as llama.cpp's do, so the
// temperature only reshapes the distribution among the survivors.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ptxlm {

struct SamplerParams {
    float temperature = 0.8f;   // <= 0: greedy (argmax; ties go to the lowest id)
    int32_t top_k = 40;         // <= 0: off
    float top_p = 0.95f;        // >= 1: off
    float min_p = 0.05f;        // <= 0: off
    float repeat_penalty = 1.0f;      // 1: off. Divides positive logits, multiplies negative ones
    float presence_penalty = 0.0f;    // subtracted once from every token in the window
    float frequency_penalty = 0.0f;   // subtracted per occurrence in the window
    int32_t penalty_last_n = 64;      // window size; 0: penalties off
    uint64_t seed = 0;
    // Added to a token's logit before anything else (OpenAI's logit_bias:
    // -100 bans a token in practice, +100 forces it); ids below n_vocab.
    std::vector<std::pair<int32_t, float>> logit_bias;
};

// The index of the first maximum of logits, NaN never taken (greedy
// decoding's token: ties go to the lowest id); -1 when every logit is NaN.
// Two SSE2 passes (the maximum, then its first index): over SmolLM2's 49152
// logits on a Zen 4 core the scalar scans it replaces took 33 us (the
// sampler's) and 148 us (std::max_element, the CPU backend's greedy step),
// 1-5% of a token.
int32_t argmax(std::span<const float> logits);

// log Σ exp(logits), in double (the normaliser of log-probabilities).
double log_sum_exp(std::span<const float> logits);

// Throws std::invalid_argument naming the field (as its command-line flag) and its range.
void validate(const SamplerParams& p);

class Sampler {
public:
    Sampler(SamplerParams p, int32_t n_vocab);

    // Applies the chain to `logits` (modified in place) and returns the token.
    int32_t sample(std::span<float> logits);
    // A token entering the context (prompt or generated): the penalties see it.
    void accept(int32_t token);
    void reset();

    // The n most likely tokens with their log-probabilities under the
    // softmax of `logits` (for logprobs reporting).
    static std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int n);

private:
    void apply_penalties(std::span<float> logits) const;

    SamplerParams p_;
    int32_t n_vocab_;
    std::deque<int32_t> recent_;
    std::mt19937_64 rng_;
    // cand_ = the logits above `above` (not -inf) from id `from` on, in id
    // order, after what it holds (emptied first when from is 0).
    void gather(std::span<const float> logits, float above, size_t from);
    // cand_ = the candidates that may be among the k best; false if some
    // were left out (then there were more than k).
    bool gather_top(std::span<const float> logits, size_t k);
    std::vector<std::pair<float, int32_t>> cand_;   // scratch: (logit, id)
    std::vector<double> weights_;                   // scratch: the draw's weights
};

// Stop strings over streamed text: push() returns what may be shown now,
// holding back a tail that could still begin a stop string (and an
// incomplete UTF-8 sequence at the end, so what is returned never splits a
// character); once a stop string appears, stopped() is true and neither it
// nor anything after it is ever returned.
class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops);
    std::string push(std::string_view text);
    std::string flush();    // end of generation: release the held tail
    bool stopped() const { return stopped_; }
    // Once stopped: the stop string found (the earliest; at one position, the shortest).
    const std::string& matched() const { return matched_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    std::string matched_;
    bool stopped_ = false;
};

}  // namespace ptxlm
