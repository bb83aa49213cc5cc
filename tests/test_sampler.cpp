// The sampler chain, penalties and stop strings.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "engine/sampler.h"

using namespace ptxlm;

namespace {

SamplerParams plain(float temp) {
    SamplerParams p;
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

TEST(Sampler, GreedyIsArgmaxWithTiesToTheLowestId) {
    Sampler s(plain(0), 5);
    std::vector<float> l{1, 3, 2, 3, 0};
    EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, TopKOfOneIsGreedyAtAnyTemperature) {
    SamplerParams p = plain(5.0f);
    p.top_k = 1;
    Sampler s(p, 4);
    for (int i = 0; i < 100; ++i) {
        std::vector<float> l{0.1f, 0.3f, 0.2f, 0.25f};
        EXPECT_EQ(s.sample(l), 1);
    }
}

// logit_bias is added before anything else: +100 forces a token, -100 bans
// the best one, at temperature 0 and 1; an id outside the vocabulary or a
// non-finite bias is refused.
TEST(Sampler, LogitBiasForcesAndBans) {
    for (float temp : {0.0f, 1.0f}) {
        SamplerParams p = plain(temp);
        p.logit_bias = {{4, 100.f}};
        Sampler force(p, 5);
        p.logit_bias = {{1, -100.f}, {3, -100.f}};
        Sampler ban(p, 5);
        Sampler none(plain(temp), 5);
        bool none_differs = false;
        for (int i = 0; i < 200; ++i) {
            std::vector<float> l{1, 3, 2, 3, 0}, l2 = l, l3 = l;
            EXPECT_EQ(force.sample(l), 4);
            const int32_t b = ban.sample(l2);
            EXPECT_TRUE(b != 1 && b != 3) << b;
            none_differs |= none.sample(l3) != 4;
        }
        EXPECT_TRUE(none_differs);   // without the bias token 4 is not what comes out
    }
    SamplerParams p = plain(0);
    p.logit_bias = {{5, 1.f}};
    EXPECT_THROW(Sampler(p, 5), std::invalid_argument);
    p.logit_bias = {{0, NAN}};
    EXPECT_THROW(Sampler(p, 5), std::invalid_argument);
}

// Empirical frequencies over many draws.
std::map<int, double> draw(SamplerParams p, const std::vector<float>& logits, int n = 20000) {
    Sampler s(p, int32_t(logits.size()));
    std::map<int, double> f;
    for (int i = 0; i < n; ++i) {
        std::vector<float> l = logits;
        f[s.sample(l)] += 1.0 / n;
    }
    return f;
}

TEST(Sampler, TemperatureOneFollowsTheSoftmax) {
    const std::vector<float> l{0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};   // p = 0.1, 0.2, 0.3, 0.4
    auto f = draw(plain(1.0f), l);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], 0.1 * (i + 1), 0.015) << i;
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
    SamplerParams p = plain(1.0f);
    p.top_p = 0.65f;   // 0.4 + 0.3 >= 0.65: ids 3 and 2 only
    const std::vector<float> l{0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
    auto f = draw(p, l);
    EXPECT_EQ(f.count(0) + f.count(1), 0u);
    EXPECT_NEAR(f[3], 4.0 / 7.0, 0.015);
    EXPECT_NEAR(f[2], 3.0 / 7.0, 0.015);
}

TEST(Sampler, MinPDropsTokensBelowTheFractionOfTheBest) {
    SamplerParams p = plain(1.0f);
    p.min_p = 0.6f;    // keep p_i >= 0.6 * 0.4 = 0.24: ids 2 and 3
    const std::vector<float> l{0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
    auto f = draw(p, l);
    std::set<int> seen;
    for (auto& [id, _] : f) seen.insert(id);
    EXPECT_EQ(seen, (std::set<int>{2, 3}));
    EXPECT_NEAR(f[3], 4.0 / 7.0, 0.015);
    EXPECT_NEAR(f[2], 3.0 / 7.0, 0.015);
}

TEST(Sampler, TemperatureReshapesTheSurvivors) {
    // At temperature 0.5 the weights are p^2: 1, 4, 9, 16 over 30.
    const std::vector<float> l{0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
    auto f = draw(plain(0.5f), l);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], (i + 1) * (i + 1) / 30.0, 0.015) << i;
    // The cuts read temperature-1 probabilities: top-p 0.65 keeps ids 3 and 2
    // even at a temperature that would make id 3 alone hold 0.65.
    SamplerParams p = plain(0.5f);
    p.top_p = 0.65f;
    f = draw(p, l);
    EXPECT_EQ(f.count(0) + f.count(1), 0u);
    EXPECT_NEAR(f[3], 16.0 / 25.0, 0.015);
    EXPECT_NEAR(f[2], 9.0 / 25.0, 0.015);
}

TEST(Sampler, TopKKeepsTheKHighest) {
    SamplerParams p = plain(1.0f);
    p.top_k = 2;
    const std::vector<float> l{std::log(4.0f), 0.0f, std::log(3.0f), std::log(2.0f)};
    auto f = draw(p, l);
    EXPECT_EQ(f.count(1) + f.count(3), 0u);
    EXPECT_NEAR(f[0], 4.0 / 7.0, 0.015);
    EXPECT_NEAR(f[2], 3.0 / 7.0, 0.015);
}

TEST(Sampler, TheChainCutsInLlamaCppOrder) {
    // p = 0.05 0.1 0.15 0.3 0.4 (ids 0..4). top-k 4 drops id 0 and leaves
    // 0.1/0.95 ... ; top-p 0.8 over those keeps 0.4, 0.3, 0.15 (0.4/0.95 +
    // 0.3/0.95 = 0.737 < 0.8); min-p 0.5 then drops 0.15 (< 0.5 * 0.4).
    const std::vector<float> l{std::log(0.05f), std::log(0.1f), std::log(0.15f), std::log(0.3f), std::log(0.4f)};
    SamplerParams p = plain(1.0f);
    p.top_k = 4;
    p.top_p = 0.8f;
    auto f = draw(p, l);
    EXPECT_EQ(f.count(0) + f.count(1), 0u);
    EXPECT_NEAR(f[2], 0.15 / 0.85, 0.015);
    p.min_p = 0.5f;
    f = draw(p, l);
    EXPECT_EQ(f.count(0) + f.count(1) + f.count(2), 0u);
    EXPECT_NEAR(f[4], 4.0 / 7.0, 0.015);
}

// The chain written the plain way (sort everything, cut in order): the
// survivors and their probabilities.
std::map<int, double> reference_chain(const std::vector<float>& l, SamplerParams p) {
    std::vector<int> ids(l.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int(i);
    std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return l[a] > l[b]; });
    if (p.top_k > 0 && size_t(p.top_k) < ids.size()) ids.resize(size_t(p.top_k));
    auto softmax = [&](double temp) {
        std::vector<double> q(ids.size());
        double z = 0;
        for (size_t i = 0; i < ids.size(); ++i) z += q[i] = std::exp((double(l[ids[i]]) - l[ids[0]]) / temp);
        for (double& v : q) v /= z;
        return q;
    };
    if (p.top_p < 1.0f) {
        const std::vector<double> q = softmax(1.0);
        double cum = 0;
        for (size_t i = 0; i < q.size(); ++i)
            if ((cum += q[i]) >= p.top_p) { ids.resize(i + 1); break; }
    }
    if (p.min_p > 0.0f) {
        const std::vector<double> q = softmax(1.0);
        size_t keep = 0;
        while (keep < q.size() && q[keep] >= p.min_p * q[0]) ++keep;
        ids.resize(keep);
    }
    const std::vector<double> q = softmax(p.temperature);
    std::map<int, double> out;
    for (size_t i = 0; i < ids.size(); ++i) out[ids[i]] = q[i];
    return out;
}

TEST(Sampler, MatchesThePlainChainOnAWideVocabulary) {
    // With top-k off the sampler drops min-p losers before sorting; the
    // survivors and their frequencies must be those of the plain chain.
    // A wide spread (amplitude 12) puts most of the vocabulary more than 8
    // below the maximum, where top-p's sorted head is widened step by step.
    const int32_t n = 3000;
    std::vector<float> l(n);
    for (float amplitude : {2.5f, 12.0f}) {
    for (int32_t i = 0; i < n; ++i) l[i] = amplitude * std::sin(0.37f * float(i)) + 0.01f * float(i % 13);
    for (int32_t top_k : {0, 50}) {
        if (amplitude > 3 && top_k > 0) continue;   // top-k sorts its k: nothing to widen
        for (float min_p : {0.0f, 0.3f, 0.7f}) {
            for (float top_p : {1.0f, 0.2f, amplitude > 3 ? 0.9999f : 0.05f}) {
                SamplerParams p = plain(0.8f);
                p.top_k = top_k;
                p.min_p = min_p;
                p.top_p = top_p;
                const std::map<int, double> want = reference_chain(l, p);
                const std::map<int, double> got = draw(p, l, 4000);
                for (const auto& [id, freq] : got)
                    ASSERT_TRUE(want.count(id)) << id << " drawn, outside the chain's survivors (top_k " << top_k
                                                << " min_p " << min_p << " top_p " << top_p << ")";
                for (const auto& [id, prob] : want) {
                    if (prob <= 0.05) continue;
                    EXPECT_NEAR(got.count(id) ? got.at(id) : 0.0, prob, 0.03) << id;
                }
            }
        }
    }
    }
}

// The chain as the sampler ran it before top-k's one-pass gathering: every
// candidate collected, nth_element over all of them. Same seed and logits:
// the sampler must draw the same tokens.
int32_t every_candidate_sample(const std::vector<float>& logits, const SamplerParams& p, std::mt19937_64& rng) {
    std::vector<std::pair<float, int32_t>> cand;
    float mx = -INFINITY;
    for (int32_t i = 0; i < int32_t(logits.size()); ++i)
        if (!std::isnan(logits[i]) && logits[i] != -INFINITY) {
            cand.emplace_back(logits[i], i);
            mx = std::max(mx, logits[i]);
        }
    if (cand.empty()) return -1;   // every token excluded: the sampler throws
    if (mx == INFINITY) {
        std::erase_if(cand, [](const auto& c) { return c.first != INFINITY; });
        for (auto& c : cand) c.first = 0.0f;
        mx = 0.0f;
    }
    auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
    bool sorted = false;
    if (p.top_k > 0 && size_t(p.top_k) < cand.size()) {
        std::nth_element(cand.begin(), cand.begin() + p.top_k, cand.end(), by_logit);
        cand.resize(size_t(p.top_k));
        std::sort(cand.begin(), cand.end(), by_logit);
        sorted = true;
    }
    const float cut = p.min_p > 0.0f ? mx + std::log(p.min_p) : -INFINITY;
    if (p.top_p < 1.0f) {
        double z = 0;
        for (const auto& c : cand) z += std::exp(double(c.first) - mx);
        if (p.min_p > 0.0f) std::erase_if(cand, [&](const auto& c) { return c.first < cut; });
        if (!sorted) std::sort(cand.begin(), cand.end(), by_logit);
        double cum = 0;
        for (size_t i = 0; i < cand.size(); ++i)
            if ((cum += std::exp(double(cand[i].first) - mx) / z) >= p.top_p) {
                cand.resize(i + 1);
                break;
            }
    } else if (p.min_p > 0.0f) {
        std::erase_if(cand, [&](const auto& c) { return c.first < cut; });
    }
    std::vector<double> w(cand.size());
    double total = 0;
    for (size_t i = 0; i < cand.size(); ++i) total += w[i] = std::exp(double(cand[i].first - mx) / p.temperature);
    const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
    double cum = 0;
    size_t last = 0;
    for (size_t i = 0; i < cand.size(); ++i) {
        if (w[i] <= 0) continue;
        last = i;
        if ((cum += w[i]) > u) return cand[i].second;
    }
    return cand[last].second;
}

// top-k gathers in one pass, keeping only logits above the k-th best so
// far: the draws must be those of the chain over every candidate, token for
// token, on vocabularies around the pass's buffer (256) and SIMD widths,
// with ties at the cut, NaN, -inf and +inf (fewer and more than k).
TEST(Sampler, TopKGatheringDrawsWhatEveryCandidateWould) {
    std::mt19937 gen(11);
    for (int32_t n : {1, 5, 17, 255, 256, 257, 1000, 5003}) {
        for (int32_t k : {1, 2, 3, 40, 127, 128, 300, 5003}) {
            for (int kind = 0; kind < 5; ++kind) {
                std::vector<float> l(static_cast<size_t>(n));
                for (float& x : l) {
                    switch (kind) {
                        case 0: x = std::normal_distribution<float>(0, 3)(gen); break;
                        case 1: x = float(int(gen() % 6)); break;   // ties everywhere, at every cut
                        case 2: x = float(int(gen() % 4000)) * 0.01f; break;
                        default: x = std::normal_distribution<float>(0, 2)(gen); break;
                    }
                    if (kind >= 3) {
                        const uint32_t r = gen() % 20;
                        if (r == 0) x = NAN;
                        if (r == 1) x = -INFINITY;
                        if (r == 2 && kind == 4) x = INFINITY;   // about n / 20 of them
                    }
                }
                if (kind == 3 && n > 3) l[size_t(n) / 2] = INFINITY;   // one
                for (const auto& [top_p, min_p] : {std::pair{1.0f, 0.0f}, {0.9f, 0.0f}, {1.0f, 0.05f}, {0.95f, 0.05f}}) {
                    SamplerParams p = plain(0.8f);
                    p.top_k = k;
                    p.top_p = top_p;
                    p.min_p = min_p;
                    p.seed = 5;
                    Sampler s(p, n);
                    std::mt19937_64 rng(p.seed);
                    for (int t = 0; t < 4; ++t) {
                        std::vector<float> work = l;
                        const int32_t want = every_candidate_sample(l, p, rng);
                        if (want < 0) {
                            EXPECT_THROW(s.sample(work), std::runtime_error);
                            break;
                        }
                        ASSERT_EQ(s.sample(work), want) << "n " << n << " k " << k << " kind " << kind << " top_p " << top_p
                                                        << " min_p " << min_p << " draw " << t;
                    }
                }
            }
        }
    }
}

// argmax: the first maximum, NaN never taken, -1 when all are NaN, over
// lengths around the vector widths (4 and 16), against a plain loop.
TEST(Sampler, ArgmaxIsTheFirstMaximumSkippingNaN) {
    std::mt19937 gen(3);
    for (size_t n = 0; n < 70; ++n) {
        for (int trial = 0; trial < 40; ++trial) {
            std::vector<float> l(n);
            for (float& x : l) {
                const uint32_t r = gen() % 16;
                x = r == 0 ? NAN : r == 1 ? -INFINITY : r == 2 && trial % 4 == 0 ? INFINITY : r == 3 ? -0.0f : float(int(gen() % 7)) - 3;
            }
            if (trial % 10 == 9)
                for (float& x : l) x = NAN;
            int32_t want = -1;
            for (size_t i = 0; i < n; ++i)
                if (!std::isnan(l[i]) && (want < 0 || l[i] > l[size_t(want)])) want = int32_t(i);
            ASSERT_EQ(argmax(l), want) << "n " << n << " trial " << trial;
        }
    }
    std::vector<float> big(49152, -1.0f);
    big[40000] = 2.0f;
    big[49151] = 2.0f;
    EXPECT_EQ(argmax(big), 40000);
}

TEST(Sampler, TopPReachesPastTheTokensNearTheMaximum) {
    // One token at 0 and 10000 at -8.5: the one holds p0 = 1 / (1 + 10000
    // e^-8.5) = 0.33, so top-p 0.5 keeps it and the first ~2540 of the others
    // (ties: lowest id first), and draws it with p0 / 0.5. A sampler that
    // sorted only the tokens within 8 of the maximum would draw it every time.
    std::vector<float> l(10001, -8.5f);
    l[0] = 0.0f;
    SamplerParams p = plain(1.0f);
    p.top_p = 0.5f;
    const double p0 = 1.0 / (1.0 + 10000.0 * std::exp(-8.5));
    const int kept = int((0.5 - p0) / (p0 * std::exp(-8.5))) + 1;
    const std::map<int, double> f = draw(p, l, 2000);
    EXPECT_NEAR(f.count(0) ? f.at(0) : 0.0, p0 / 0.5, 0.04);
    EXPECT_GT(f.size(), 300u);
    EXPECT_LE(f.rbegin()->first, kept);
}

TEST(Sampler, ExcludedTokensAreNeverDrawn) {
    const float inf = INFINITY;
    std::vector<float> l{-inf, 1.0f, NAN, 1.0f, -inf};
    auto f = draw(plain(2.0f), l, 2000);
    EXPECT_EQ(f.count(0) + f.count(2) + f.count(4), 0u);
    Sampler g(plain(0), 5);
    std::vector<float> m{NAN, 1.0f, 2.0f, NAN, 2.0f};
    EXPECT_EQ(g.sample(m), 2);
    std::vector<float> all_out{-inf, -inf};
    Sampler s(plain(1.0f), 2);
    EXPECT_THROW(s.sample(all_out), std::runtime_error);
}

TEST(Sampler, ResetReplaysTheSameDraws) {
    SamplerParams p = plain(1.0f);
    p.seed = 42;
    p.repeat_penalty = 1.5f;
    Sampler s(p, 8);
    std::vector<float> base{1, 2, 3, 4, 4, 3, 2, 1};
    auto run = [&] {
        std::vector<int32_t> out;
        for (int i = 0; i < 50; ++i) {
            std::vector<float> l = base;
            out.push_back(s.sample(l));
            s.accept(out.back());
        }
        return out;
    };
    const auto first = run();
    s.reset();
    EXPECT_EQ(run(), first);
}

TEST(Sampler, SameSeedReplays) {
    SamplerParams p = plain(1.0f);
    p.seed = 1234;
    Sampler a(p, 50), b(p, 50);
    std::vector<float> base(50);
    for (int i = 0; i < 50; ++i) base[i] = std::sin(float(i));
    for (int i = 0; i < 200; ++i) {
        std::vector<float> x = base, y = base;
        ASSERT_EQ(a.sample(x), b.sample(y));
    }
    SamplerParams q = p;
    q.seed = 99;
    Sampler c(p, 50), d(q, 50);
    int differ = 0;
    for (int i = 0; i < 200; ++i) {
        std::vector<float> x = base, y = base;
        differ += c.sample(x) != d.sample(y);
    }
    EXPECT_GT(differ, 0);
}

TEST(Sampler, PenaltiesChangeTheLogitsAsSpecified) {
    SamplerParams p = plain(0);
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    Sampler s(p, 4);
    s.accept(1);
    s.accept(1);
    s.accept(2);
    std::vector<float> l{0.0f, 4.0f, -2.0f, 1.0f};
    s.sample(l);
    EXPECT_FLOAT_EQ(l[0], 0.0f);
    EXPECT_FLOAT_EQ(l[1], 4.0f / 2.0f - 2 * 0.25f - 0.5f);
    EXPECT_FLOAT_EQ(l[2], -2.0f * 2.0f - 0.25f - 0.5f);
    EXPECT_FLOAT_EQ(l[3], 1.0f);
}

TEST(Sampler, PresenceAndFrequencyAloneSubtract) {
    SamplerParams p = plain(0);
    p.presence_penalty = 1.0f;
    p.frequency_penalty = 0.5f;
    Sampler s(p, 3);
    for (int32_t t : {0, 0, 0, 2}) s.accept(t);
    std::vector<float> l{3.0f, 1.0f, -1.0f};
    s.sample(l);
    EXPECT_FLOAT_EQ(l[0], 3.0f - 1.0f - 3 * 0.5f);
    EXPECT_FLOAT_EQ(l[1], 1.0f);
    EXPECT_FLOAT_EQ(l[2], -1.0f - 1.0f - 0.5f);
}

TEST(Sampler, PenaltyWindowForgetsOldTokens) {
    SamplerParams p = plain(0);
    p.repeat_penalty = 100.0f;
    p.penalty_last_n = 2;
    Sampler s(p, 3);
    s.accept(0);
    s.accept(1);
    s.accept(2);   // 0 left the window
    std::vector<float> l{5.0f, 5.0f, 5.0f};
    EXPECT_EQ(s.sample(l), 0);
}

TEST(Sampler, ValidateNamesTheFlag) {
    auto msg = [](SamplerParams p) {
        try {
            validate(p);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    SamplerParams p;
    p.temperature = NAN;
    EXPECT_NE(msg(p).find("--temp"), std::string::npos);
    p = {};
    p.temperature = -1;
    EXPECT_NE(msg(p).find("--temp"), std::string::npos);
    p = {};
    p.top_p = 0;
    EXPECT_NE(msg(p).find("--top-p"), std::string::npos);
    p = {};
    p.top_p = 1.5f;
    EXPECT_NE(msg(p).find("--top-p"), std::string::npos);
    p = {};
    p.min_p = -0.1f;
    EXPECT_NE(msg(p).find("--min-p"), std::string::npos);
    p = {};
    p.top_k = -3;
    EXPECT_NE(msg(p).find("--top-k"), std::string::npos);
    p = {};
    p.repeat_penalty = 0;
    EXPECT_NE(msg(p).find("--repeat-penalty"), std::string::npos);
    p = {};
    p.top_p = 1.0f;   // 1: off, allowed
    p.min_p = 0.0f;
    p.top_k = 0;
    p.temperature = 0;
    EXPECT_EQ(msg(p), "");
    p = {};
    p.min_p = 1.5f;
    EXPECT_NE(msg(p).find("--min-p"), std::string::npos);
    p = {};
    p.top_p = NAN;
    EXPECT_NE(msg(p).find("--top-p"), std::string::npos);
    p = {};
    p.presence_penalty = INFINITY;
    EXPECT_NE(msg(p).find("--presence-penalty"), std::string::npos);
    p = {};
    p.frequency_penalty = -3;
    EXPECT_NE(msg(p).find("--frequency-penalty"), std::string::npos);
    p = {};
    p.penalty_last_n = -1;
    EXPECT_NE(msg(p).find("--repeat-last-n"), std::string::npos);
    p = {};
    p.temperature = -1;
    EXPECT_THROW(Sampler(p, 4), std::invalid_argument);
    p = {};
    EXPECT_EQ(msg(p), "");
}

TEST(Sampler, TopLogprobsAreNormalised) {
    std::vector<float> l{0.0f, std::log(3.0f)};
    auto t = Sampler::top_logprobs(l, 2);
    ASSERT_EQ(t.size(), 2u);
    EXPECT_EQ(t[0].first, 1);
    EXPECT_NEAR(std::exp(t[0].second), 0.75, 1e-6);
    EXPECT_NEAR(std::exp(t[1].second), 0.25, 1e-6);
}

std::string feed(StopMatcher& m, std::initializer_list<const char*> pieces) {
    std::string out;
    for (const char* p : pieces) out += m.push(p);
    return out + m.flush();
}

TEST(StopMatcher, StopsBeforeAStringSplitAcrossPieces) {
    StopMatcher m({"</end>"});
    EXPECT_EQ(feed(m, {"Hello </", "en", "d> after"}), "Hello ");
    EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, HoldsBackOnlyWhatMayStartAStop) {
    StopMatcher m({"ab"});
    EXPECT_EQ(m.push("xa"), "x");      // "a" may begin "ab"
    EXPECT_EQ(m.push("a"), "a");       // "aa": the first a cannot
    EXPECT_EQ(m.push("b"), "");        // "ab": stop
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(m.push("more"), "");
}

TEST(StopMatcher, NoStopReleasesEverythingAtTheEnd) {
    StopMatcher m({"STOP", "halt"});
    EXPECT_EQ(feed(m, {"ST", "O", "ry ha", "l"}), "STOry hal");
    EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, OverlappingPrefixes) {
    StopMatcher a({"ab"});
    EXPECT_EQ(a.push("aab"), "a");
    EXPECT_TRUE(a.stopped());
    // "abab" may still become "ababac" from the second a: hold "ab" only.
    StopMatcher b({"abac"});
    EXPECT_EQ(b.push("xabab"), "xab");
    EXPECT_EQ(b.push("ac tail"), "");
    EXPECT_TRUE(b.stopped());
    EXPECT_EQ(b.flush(), "");
    StopMatcher c({"abac"});
    EXPECT_EQ(c.push("abab"), "ab");
    EXPECT_EQ(c.push("ab"), "ab");   // "abab" again
    EXPECT_EQ(c.flush(), "ab");
    EXPECT_FALSE(c.stopped());
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
    StopMatcher m({});
    EXPECT_EQ(m.push("abc"), "abc");
    StopMatcher e({""});   // an empty stop string matches nothing
    EXPECT_EQ(e.push("abc"), "abc");
    EXPECT_FALSE(e.stopped());
}

TEST(StopMatcher, ReturnedTextNeverSplitsACharacter) {
    StopMatcher m({"STOP"});
    // 日 = E6 97 A5, 本 = E6 9C AC, 🎉 = F0 9F 8E 89.
    EXPECT_EQ(m.push("\xE6\x97\xA5\xE6"), "\xE6\x97\xA5");
    EXPECT_EQ(m.push("\x9C"), "");
    EXPECT_EQ(m.push("\xAC\xF0\x9F\x8E"), "\xE6\x9C\xAC");
    EXPECT_EQ(m.push("\x89!"), "\xF0\x9F\x8E\x89!");
    EXPECT_EQ(m.push("\xF0\x9F"), "");
    EXPECT_EQ(m.flush(), "\xF0\x9F");   // the end releases even a broken tail
    // A stop string that starts inside a multi-byte character's bytes.
    StopMatcher s({"\xE6\x9C\xAC!"});
    EXPECT_EQ(s.push("\xE6\x97\xA5\xE6\x9C"), "\xE6\x97\xA5");
    EXPECT_EQ(s.push("\xAC!after"), "");
    EXPECT_TRUE(s.stopped());
}

TEST(StopMatcher, EarliestStopWinsAndUtf8StaysWhole) {
    StopMatcher m({"世界", "b"});
    const std::string out = feed(m, {"日本 ", "世", "界 b"});
    EXPECT_EQ(out, "日本 ");
}

}  // namespace
