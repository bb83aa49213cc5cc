#include "engine/sampler.h"

#include "engine/tokenizer.h"   // utf8_complete_prefix

#include <emmintrin.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

namespace ptxlm {

namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

// Highest logit first, lowest id first among equals: the order top-k and
// top-p read, and a deterministic one.
bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

int32_t argmax(std::span<const float> logits) {
    const float* l = logits.data();
    const size_t n = logits.size();
    // maxps returns its second operand when either is NaN: m never takes
    // one. Four running maxima, so that their chains overlap.
    __m128 m0 = _mm_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm_max_ps(_mm_loadu_ps(l + i), m0);
        m1 = _mm_max_ps(_mm_loadu_ps(l + i + 4), m1);
        m2 = _mm_max_ps(_mm_loadu_ps(l + i + 8), m2);
        m3 = _mm_max_ps(_mm_loadu_ps(l + i + 12), m3);
    }
    for (; i + 4 <= n; i += 4) m0 = _mm_max_ps(_mm_loadu_ps(l + i), m0);
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
    float m = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
    for (; i < n; ++i)
        if (l[i] > m) m = l[i];
    // Every non-NaN logit is <= m, and m is one of them unless all are NaN
    // (then nothing equals -inf either).
    const __m128 want = _mm_set1_ps(m);
    for (i = 0; i + 16 <= n; i += 16) {
        const __m128 e0 = _mm_cmpeq_ps(_mm_loadu_ps(l + i), want), e1 = _mm_cmpeq_ps(_mm_loadu_ps(l + i + 4), want),
                     e2 = _mm_cmpeq_ps(_mm_loadu_ps(l + i + 8), want), e3 = _mm_cmpeq_ps(_mm_loadu_ps(l + i + 12), want);
        if (_mm_movemask_ps(_mm_or_ps(_mm_or_ps(e0, e1), _mm_or_ps(e2, e3)))) break;   // the first hit is in these 16
    }
    for (; i + 4 <= n; i += 4)
        if (const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(l + i), want)))
            return int32_t(i + size_t(__builtin_ctz(unsigned(hit))));
    for (; i < n; ++i)
        if (l[i] == m) return int32_t(i);
    return -1;
}

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

void Sampler::gather(std::span<const float> logits, float above, size_t from) {
    if (from == 0) cand_.clear();
    for (size_t i = from; i < logits.size(); ++i)
        if (logits[i] > above && logits[i] != -INFINITY) cand_.emplace_back(logits[i], int32_t(i));
}

bool Sampler::gather_top(std::span<const float> logits, size_t k) {
    // One pass, four logits a compare: a logit goes in only above the k-th
    // best kept so far (thr), and whenever the buffer fills it is taken down
    // to its best k. A logit at or below thr never ranks among the k: k kept
    // ones are above it, or equal with a lower id (ids only grow).
    // thr starts at -inf, which NaN and -inf fail too.
    const size_t cap = std::max<size_t>(2 * k, 256);
    const float* l = logits.data();
    const size_t n = logits.size();
    cand_.clear();
    bool cut = false;
    float thr = -INFINITY;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        // Sixteen at a time while none passes (most of a vocabulary, once thr has risen).
        for (const __m128 t = _mm_set1_ps(thr); i + 16 <= n; i += 16) {
            const __m128 g0 = _mm_cmpgt_ps(_mm_loadu_ps(l + i), t), g1 = _mm_cmpgt_ps(_mm_loadu_ps(l + i + 4), t),
                         g2 = _mm_cmpgt_ps(_mm_loadu_ps(l + i + 8), t), g3 = _mm_cmpgt_ps(_mm_loadu_ps(l + i + 12), t);
            if (_mm_movemask_ps(_mm_or_ps(_mm_or_ps(g0, g1), _mm_or_ps(g2, g3)))) break;
        }
        if (i + 4 > n) break;
        int hit = _mm_movemask_ps(_mm_cmpgt_ps(_mm_loadu_ps(l + i), _mm_set1_ps(thr)));
        for (; hit; hit &= hit - 1) {
            const size_t j = i + size_t(__builtin_ctz(unsigned(hit)));
            if (!(l[j] > thr)) continue;   // thr rose within these four
            cand_.emplace_back(l[j], int32_t(j));
            if (cand_.size() < cap) continue;
            std::nth_element(cand_.begin(), cand_.begin() + ptrdiff_t(k - 1), cand_.end(), by_logit);
            cand_.resize(k);
            thr = cand_[k - 1].first;
            cut = true;
        }
    }
    gather(logits, thr, i);   // the last few (cand_ may hold more than cap then)
    return !cut;
}

int32_t Sampler::sample(std::span<float> logits) {
    if (logits.size() != size_t(n_vocab_)) throw std::invalid_argument("Sampler: logits row has the wrong length");
    for (const auto& [id, b] : p_.logit_bias) logits[id] += b;
    apply_penalties(logits);
    if (p_.temperature <= 0) {
        const int32_t best = argmax(logits);
        if (best < 0) throw std::runtime_error("Sampler: every logit is NaN");
        return best;
    }

    // Candidates: every token a draw may reach (NaN and -inf are out), in id
    // order; with top-k only those that may be among the k, unless that
    // left out none (complete: the candidates are all there).
    bool complete = true;
    if (p_.top_k > 0) complete = gather_top(logits, size_t(p_.top_k));
    else gather(logits, -INFINITY, 0);
    if (cand_.empty()) throw std::runtime_error("Sampler: every token is excluded");
    float mx = -INFINITY;
    for (const auto& c : cand_) mx = std::max(mx, c.first);
    if (mx == INFINITY) {   // an infinite logit takes all the mass: those tokens only
        if (!complete) gather(logits, -INFINITY, 0);   // every one of them, for top-k to choose from
        complete = true;
        std::erase_if(cand_, [](const auto& c) { return c.first != INFINITY; });
        for (auto& c : cand_) c.first = 0.0f;
        mx = 0.0f;
    }

    // top-k (k tokens: sorted, cheap). Left incomplete, there were more than k.
    bool sorted = false;
    if (p_.top_k > 0 && (!complete || size_t(p_.top_k) < cand_.size())) {
        if (size_t(p_.top_k) < cand_.size()) {
            std::nth_element(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
            cand_.resize(size_t(p_.top_k));
        }
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
