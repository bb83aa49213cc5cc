// The sampler chain, penalties and stop strings.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
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

TEST(StopMatcher, EarliestStopWinsAndUtf8StaysWhole) {
    StopMatcher m({"世界", "b"});
    const std::string out = feed(m, {"日本 ", "世", "界 b"});
    EXPECT_EQ(out, "日本 ");
}

}  // namespace
