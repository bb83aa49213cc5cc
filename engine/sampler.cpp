#include "engine/sampler.h"

#include "engine/tokenizer.h"   // utf8_complete_prefix

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

namespace ptxlm {

namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

}  // namespace

double log_sum_exp(std::span<const float> logits) {
    if (logits.empty()) return -INFINITY;
    const float mx = *std::max_element(logits.begin(), logits.end());
    double s = 0;
    for (float l : logits) s += std::exp(double(l) - mx);
    return mx + std::log(s);
}

void validate(const SamplerParams& p) {
    if (!std::isfinite(p.temperature) || p.temperature < 0) bad("--temp must be a number >= 0");
    if (!std::isfinite(p.top_p) || p.top_p <= 0 || p.top_p > 1) bad("--top-p must be in (0, 1]");
    if (!std::isfinite(p.min_p) || p.min_p < 0 || p.min_p > 1) bad("--min-p must be in [0, 1]");
    if (p.top_k < 0) bad("--top-k must be >= 0");
    if (!std::isfinite(p.repeat_penalty) || p.repeat_penalty <= 0) bad("--repeat-penalty must be a number > 0");
    if (!std::isfinite(p.presence_penalty) || std::fabs(p.presence_penalty) > 2)
        bad("--presence-penalty must be in [-2, 2]");
    if (!std::isfinite(p.frequency_penalty) || std::fabs(p.frequency_penalty) > 2)
        bad("--frequency-penalty must be in [-2, 2]");
    if (p.penalty_last_n < 0) bad("--repeat-last-n must be >= 0");
    for (const auto& [id, b] : p.logit_bias)
        if (id < 0 || !std::isfinite(b)) bad("a logit bias needs a token id >= 0 and a finite bias");
}

Sampler::Sampler(SamplerParams p, int32_t n_vocab) : p_(p), n_vocab_(n_vocab), rng_(p.seed) {
    validate(p_);
    if (n_vocab <= 0) throw std::invalid_argument("Sampler: empty vocabulary");
    for (const auto& [id, b] : p_.logit_bias)
        if (id >= n_vocab)
            throw std::invalid_argument("a logit bias names token " + std::to_string(id) + ", outside the vocabulary (" +
                                        std::to_string(n_vocab) + " tokens)");
}

void Sampler::reset() {
    recent_.clear();
    rng_.seed(p_.seed);
}

void Sampler::accept(int32_t token) {
    if (p_.penalty_last_n <= 0) return;
    recent_.push_back(token);
    while (recent_.size() > size_t(p_.penalty_last_n)) recent_.pop_front();
}

void Sampler::apply_penalties(std::span<float> logits) const {
    if (recent_.empty()) return;
    if (p_.repeat_penalty == 1.0f && p_.presence_penalty == 0.0f && p_.frequency_penalty == 0.0f) return;
    std::unordered_map<int32_t, int> count;
    for (int32_t t : recent_)
        if (t >= 0 && t < int32_t(logits.size())) ++count[t];
    for (const auto& [t, n] : count) {
        float& l = logits[t];
        l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
        l -= float(n) * p_.frequency_penalty + p_.presence_penalty;
    }
}

int32_t Sampler::sample(std::span<float> logits) {
    if (logits.size() != size_t(n_vocab_)) throw std::invalid_argument("Sampler: logits row has the wrong length");
    for (const auto& [id, b] : p_.logit_bias) logits[id] += b;
    apply_penalties(logits);
    if (p_.temperature <= 0) {
        // First maximum: ties go to the lowest id (NaN never wins).
        int32_t best = -1;
        for (int32_t i = 0; i < n_vocab_; ++i)
            if (!std::isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
        if (best < 0) throw std::runtime_error("Sampler: every logit is NaN");
        return best;
    }

    // Candidates: every token a draw may reach (NaN and -inf are out).
    cand_.clear();
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab_; ++i)
        if (!std::isnan(logits[i]) && logits[i] != -INFINITY) {
            cand_.emplace_back(logits[i], i);
            mx = std::max(mx, logits[i]);
        }
    if (cand_.empty()) throw std::runtime_error("Sampler: every token is excluded");
    if (mx == INFINITY) {   // an infinite logit takes all the mass: those tokens only
        std::erase_if(cand_, [](const auto& c) { return c.first != INFINITY; });
        for (auto& c : cand_) c.first = 0.0f;
        mx = 0.0f;
    }
    // Highest logit first, lowest id first among equals: the order top-k and
    // top-p read, and a deterministic one.
    auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };

    // top-k (k tokens: sorted, cheap).
    bool sorted = false;
    if (p_.top_k > 0 && size_t(p_.top_k) < cand_.size()) {
        std::nth_element(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
        cand_.resize(size_t(p_.top_k));
        std::sort(cand_.begin(), cand_.end(), by_logit);
        sorted = true;
    }
    // min-p keeps p_i >= min_p * p_max, i.e. l_i >= l_max + log(min_p); it
    // cuts after top-p (llama.cpp's order), but a token below that line never
    // survives whatever top-p keeps, so it can leave first, as long as top-p's
    // probabilities still count it.
    const float min_p_cut = p_.min_p > 0.0f ? mx + std::log(p_.min_p) : -INFINITY;
    auto min_p = [&] {
        if (p_.min_p > 0.0f) std::erase_if(cand_, [&](const auto& c) { return c.first < min_p_cut; });
    };
    if (p_.top_p < 1.0f) {
        // top-p: the smallest prefix (in logit order) whose probability at
        // temperature 1 over the candidates so far reaches top_p.
        double z = 0;
        for (const auto& c : cand_) z += std::exp(double(c.first) - mx);
        min_p();
        if (!sorted) {
            // Sort only a head that holds that prefix: the candidates within
            // `width` of the maximum, widened until their mass reaches top_p
            // (every candidate outside ranks below every one inside).
            for (float width = 8.0f;; width *= 2) {
                const auto mid = std::partition(cand_.begin(), cand_.end(),
                                                [&](const auto& c) { return c.first >= mx - width; });
                double mass = 0;
                for (auto it = cand_.begin(); it != mid; ++it) mass += std::exp(double(it->first) - mx) / z;
                if (mid == cand_.end() || mass >= double(p_.top_p) + 1e-9) {
                    cand_.erase(mid, cand_.end());
                    break;
                }
            }
            std::sort(cand_.begin(), cand_.end(), by_logit);
        }
        double cum = 0;
        for (size_t i = 0; i < cand_.size(); ++i) {
            cum += std::exp(double(cand_[i].first) - mx) / z;
            if (cum >= p_.top_p) {
                cand_.resize(i + 1);
                break;
            }
        }
    } else {
        min_p();
    }
    // Without top-k and top-p nothing is sorted: the candidates stay in id
    // order, as fixed an order for the draw as any.

    // Temperature, then one draw from the renormalised distribution.
    weights_.resize(cand_.size());
    double total = 0;
    for (size_t i = 0; i < cand_.size(); ++i)
        total += weights_[i] = std::exp(double(cand_[i].first - mx) / p_.temperature);
    const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
    double cum = 0;
    size_t last = 0;
    for (size_t i = 0; i < cand_.size(); ++i) {
        if (weights_[i] <= 0) continue;
        last = i;
        if ((cum += weights_[i]) > u) return cand_[i].second;
    }
    return cand_[last].second;   // u rounded up to the total
}

std::vector<std::pair<int32_t, float>> Sampler::top_logprobs(std::span<const float> logits, int n) {
    std::vector<int32_t> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
    n = std::min<int>(n, int(order.size()));
    std::partial_sort(order.begin(), order.begin() + n, order.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    const double lse = log_sum_exp(logits);
    std::vector<std::pair<int32_t, float>> out;
    for (int i = 0; i < n; ++i) out.emplace_back(order[i], float(double(logits[order[i]]) - lse));
    return out;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
    std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view text) {
    if (stopped_) return {};
    held_ += text;
    // A complete stop string: release what precedes the earliest one.
    size_t first = std::string::npos;
    for (const std::string& s : stops_) {
        const size_t at = held_.find(s);
        if (at < first || (at == first && at != std::string::npos && s.size() < matched_.size())) {
            first = at;
            matched_ = s;
        }
    }
    if (first != std::string::npos) {
        stopped_ = true;
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    // Hold back the longest tail that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const std::string& s : stops_)
        for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k)
            if (held_.compare(held_.size() - k, k, s, 0, k) == 0) { hold = k; break; }
    // Nor split a UTF-8 character: keep an unfinished sequence at the end.
    hold = std::max(hold, held_.size() - utf8_complete_prefix(held_));
    std::string out = held_.substr(0, held_.size() - hold);
    held_.erase(0, held_.size() - hold);
    return out;
}

std::string StopMatcher::flush() {
    if (stopped_) return {};
    std::string out;
    out.swap(held_);
    return out;
}

}  // namespace ptxlm
