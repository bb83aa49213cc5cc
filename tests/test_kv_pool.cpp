// The paged KV pool's bookkeeping (engine/kv_pool.h): allocation, forks and
// copy-on-write, prefix reuse by hash chain, least-recently-used eviction,
// sliding-window release, truncation, a full pool refusing without side effects, and a
// randomized run against simulated page storage (every sequence reads back
// exactly its own tokens through its page table; a table with two pages
// swapped is caught: the negative control).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "engine/kv_pool.h"

namespace {

using ptxlm::KvPool;
using Tokens = std::vector<KvPool::Token>;

Tokens iota_tokens(int from, int n) {
    Tokens t(n);
    for (int i = 0; i < n; ++i) t[i] = from + i;
    return t;
}

TEST(KvPool, AppendTakesPagesAsPositionsGrow) {
    KvPool pool(8, 4);
    std::vector<KvPool::Copy> copies;
    const KvPool::Seq s = pool.create();
    ASSERT_TRUE(pool.append(s, iota_tokens(0, 5), copies));
    EXPECT_EQ(pool.length(s), 5u);
    EXPECT_EQ(pool.pages(s).size(), 2u);
    ASSERT_TRUE(pool.append(s, iota_tokens(5, 3), copies));
    EXPECT_EQ(pool.pages(s).size(), 2u);   // the second page filled in place
    EXPECT_TRUE(copies.empty());
    EXPECT_EQ(pool.stats().used, 2u);
    EXPECT_EQ(pool.stats().free, 6u);
    pool.release(s);
    EXPECT_EQ(pool.stats().used, 0u);
    EXPECT_EQ(pool.stats().cached, 2u);   // both full: findable by their tokens
    EXPECT_EQ(pool.stats().sequences, 0u);
}

TEST(KvPool, AFullPoolRefusesAndChangesNothing) {
    KvPool pool(3, 4);
    std::vector<KvPool::Copy> copies;
    const KvPool::Seq a = pool.create();
    ASSERT_TRUE(pool.append(a, iota_tokens(0, 10), copies));   // 3 pages
    const KvPool::Stats before = pool.stats();
    EXPECT_EQ(pool.pages_needed(a, 3), 1u);
    EXPECT_FALSE(pool.append(a, iota_tokens(10, 3), copies));
    EXPECT_EQ(pool.length(a), 10u);
    EXPECT_EQ(pool.stats().used, before.used);
    EXPECT_TRUE(pool.append(a, iota_tokens(10, 2), copies));   // fits the last page
    EXPECT_EQ(pool.length(a), 12u);
}

TEST(KvPool, AForkSharesPagesAndCopiesTheSharedPartialPageOnWrite) {
    KvPool pool(8, 4);
    std::vector<KvPool::Copy> copies;
    const KvPool::Seq a = pool.create();
    ASSERT_TRUE(pool.append(a, iota_tokens(0, 6), copies));
    const KvPool::Seq b = pool.fork(a);
    ASSERT_EQ(std::vector<uint32_t>(pool.pages(b).begin(), pool.pages(b).end()),
              std::vector<uint32_t>(pool.pages(a).begin(), pool.pages(a).end()));
    const uint32_t full = pool.pages(a)[0], partial = pool.pages(a)[1];
    EXPECT_EQ(pool.refs(full), 2u);
    EXPECT_EQ(pool.refs(partial), 2u);
    EXPECT_EQ(pool.pages_needed(b, 1), 1u);   // the copy
    ASSERT_TRUE(pool.append(b, Tokens{100}, copies));
    ASSERT_EQ(copies.size(), 1u);
    EXPECT_EQ(copies[0].from, partial);
    EXPECT_EQ(copies[0].positions, 2u);
    EXPECT_EQ(pool.pages(b)[1], copies[0].to);
    EXPECT_NE(copies[0].to, partial);
    EXPECT_EQ(pool.pages(b)[0], full);   // full pages stay shared
    EXPECT_EQ(pool.refs(partial), 1u);
    copies.clear();
    ASSERT_TRUE(pool.append(a, Tokens{200}, copies));   // a holds its page alone now: in place
    EXPECT_TRUE(copies.empty());
    EXPECT_EQ(pool.pages(a)[1], partial);
}

TEST(KvPool, APromptReusesTheFullPagesOfItsPrefixThenTheLeastRecentlyCachedAreEvicted) {
    KvPool pool(6, 4);
    std::vector<KvPool::Copy> copies;
    const Tokens prompt = iota_tokens(0, 10);
    const KvPool::Seq a = pool.create();
    ASSERT_TRUE(pool.append(a, prompt, copies));
    const std::vector<uint32_t> a_pages(pool.pages(a).begin(), pool.pages(a).end());
    // While a is running: a second request with the same first 8 tokens.
    const KvPool::Seq b = pool.create();
    Tokens other = prompt;
    other[9] = 99;
    EXPECT_EQ(pool.attach_prefix(b, other), 8u);
    EXPECT_EQ(pool.pages(b)[0], a_pages[0]);
    EXPECT_EQ(pool.pages(b)[1], a_pages[1]);
    EXPECT_EQ(pool.refs(a_pages[0]), 2u);
    // A differing token in the second page stops the match after the first.
    const KvPool::Seq c = pool.create();
    Tokens third = prompt;
    third[5] = -7;
    EXPECT_EQ(pool.attach_prefix(c, third), 4u);
    EXPECT_EQ(pool.stats().prefix_hit_tokens, 12u);
    pool.release(b);
    pool.release(c);
    pool.release(a);
    // a's two full pages cached, its partial one free.
    EXPECT_EQ(pool.stats().cached, 2u);
    EXPECT_EQ(pool.stats().free, 4u);
    // Found again after every sequence ended.
    const KvPool::Seq d = pool.create();
    EXPECT_EQ(pool.attach_prefix(d, prompt), 8u);
    pool.release(d);   // cached again, page 0's chain released before page 1's: 0 is the older
    // A stranger needing every page: the free ones first, then the cached in LRU order.
    const KvPool::Seq e = pool.create();
    ASSERT_TRUE(pool.append(e, iota_tokens(1000, 17), copies));   // 5 pages: 4 free + 1 evicted
    EXPECT_EQ(pool.stats().evictions, 1u);
    EXPECT_NE(std::find(pool.pages(e).begin(), pool.pages(e).end(), a_pages[0]), pool.pages(e).end());
    const KvPool::Seq f = pool.create();
    EXPECT_EQ(pool.attach_prefix(f, prompt), 0u);   // its first page is gone, so the chain is
    ASSERT_TRUE(pool.append(e, iota_tokens(2000, 4), copies));   // the last cached page
    EXPECT_EQ(pool.stats().evictions, 2u);
    EXPECT_FALSE(pool.append(e, iota_tokens(3000, 4), copies));   // nothing left
}

// A page's K/V depend on every token before it: the same four tokens after
// another prefix are another page (the hash chain, not the page alone).
TEST(KvPool, APageMatchesOnlyAfterTheSamePrefix) {
    KvPool pool(8, 4);
    std::vector<KvPool::Copy> copies;
    const KvPool::Seq a = pool.create();
    ASSERT_TRUE(pool.append(a, Tokens{1, 2, 3, 4, 5, 6, 7, 8}, copies));
    const KvPool::Seq b = pool.create();
    EXPECT_EQ(pool.attach_prefix(b, Tokens{5, 6, 7, 8}), 0u);
    const KvPool::Seq c = pool.create();
    EXPECT_EQ(pool.attach_prefix(c, Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9}), 8u);
}

TEST(KvPool, DropBeforeReleasesPagesOutsideTheWindow) {
    KvPool pool(8, 4);
    std::vector<KvPool::Copy> copies;
    const KvPool::Seq s = pool.create();
    ASSERT_TRUE(pool.append(s, iota_tokens(0, 14), copies));
    pool.drop_before(s, 9);   // pages 0 and 1 hold positions 0..7, all below 9
    EXPECT_EQ(pool.pages(s)[0], KvPool::kNoPage);
    EXPECT_EQ(pool.pages(s)[1], KvPool::kNoPage);
    EXPECT_NE(pool.pages(s)[2], KvPool::kNoPage);
    EXPECT_EQ(pool.stats().used, 2u);
    pool.drop_before(s, 9);   // again: nothing more
    EXPECT_EQ(pool.stats().used, 2u);
    EXPECT_THROW(pool.drop_before(s, 15), std::invalid_argument);
    pool.release(s);
    EXPECT_EQ(pool.stats().used, 0u);
}

TEST(KvPool, RefusesWhatItCannotDo) {
    EXPECT_THROW(KvPool(0, 4), std::invalid_argument);
    EXPECT_THROW(KvPool(4, 0), std::invalid_argument);
    KvPool pool(4, 4);
    std::vector<KvPool::Copy> copies;
    const KvPool::Seq s = pool.create();
    ASSERT_TRUE(pool.append(s, iota_tokens(0, 2), copies));
    EXPECT_THROW(pool.attach_prefix(s, iota_tokens(0, 4)), std::invalid_argument);   // has positions
    pool.release(s);
    EXPECT_THROW(pool.length(s), std::invalid_argument);   // released
    EXPECT_THROW(pool.fork(7), std::invalid_argument);
}

// Truncation: pages past the new length go (a full one stays cached); a
// full page partly kept by its only holder is no longer found by its tokens
// and is rewritten in place; one still shared is copied on the next append.
TEST(KvPool, TruncateReleasesThePastAndRewritesOnlyWhatItHoldsAlone) {
    KvPool pool(8, 4);
    std::vector<KvPool::Copy> copies;
    const KvPool::Seq a = pool.create();
    ASSERT_TRUE(pool.append(a, iota_tokens(0, 10), copies));   // pages: full, full, 2 of 4
    const uint32_t p0 = pool.pages(a)[0], p1 = pool.pages(a)[1];
    pool.truncate(a, 6);
    EXPECT_EQ(pool.length(a), 6u);
    EXPECT_EQ(pool.pages(a).size(), 2u);
    EXPECT_EQ(pool.stats().free, 6u);   // the partial third page went back
    const KvPool::Seq probe = pool.create();
    EXPECT_EQ(pool.attach_prefix(probe, iota_tokens(0, 8)), 4u);   // page 1 is no longer findable
    pool.release(probe);
    ASSERT_TRUE(pool.append(a, Tokens{50, 51}, copies));   // rewrites page 1 in place
    EXPECT_TRUE(copies.empty());
    EXPECT_EQ(pool.pages(a)[1], p1);
    Tokens want = iota_tokens(0, 6);
    want.insert(want.end(), {50, 51});
    const KvPool::Seq again = pool.create();
    EXPECT_EQ(pool.attach_prefix(again, want), 8u);   // found under its new tokens
    // Shared: b truncates into page 1 that `again` holds too: copied on write.
    const KvPool::Seq b = pool.fork(a);
    pool.truncate(b, 5);
    ASSERT_TRUE(pool.append(b, Tokens{70}, copies));
    ASSERT_EQ(copies.size(), 1u);
    EXPECT_EQ(copies[0].from, p1);
    EXPECT_EQ(copies[0].positions, 1u);
    EXPECT_EQ(pool.pages(b)[0], p0);
    EXPECT_THROW(pool.truncate(b, 7), std::invalid_argument);
    pool.drop_before(a, 8);
    EXPECT_THROW(pool.truncate(a, 6), std::invalid_argument);
    pool.truncate(a, 4);   // a page boundary: nothing partly kept
    EXPECT_EQ(pool.length(a), 4u);
}

// prefix_length finds what attach_prefix would, attaching nothing; pages
// abandoned unwritten (truncate with forget) are not found, while pages
// released by an ordinary truncation stay findable.
TEST(KvPool, PrefixLengthPeeksAndForgottenPagesAreNotFound) {
    KvPool pool(8, 4);
    std::vector<KvPool::Copy> copies;
    const KvPool::Seq a = pool.create();
    ASSERT_TRUE(pool.append(a, iota_tokens(0, 12), copies));
    EXPECT_EQ(pool.prefix_length(iota_tokens(0, 11)), 8u);
    EXPECT_EQ(pool.prefix_length(iota_tokens(0, 12)), 12u);
    EXPECT_EQ(pool.refs(pool.pages(a)[0]), 1u);   // nothing attached
    EXPECT_EQ(pool.stats().prefix_hit_tokens, 0u);
    pool.truncate(a, 8);             // evaluated, then rewound: still findable
    EXPECT_EQ(pool.prefix_length(iota_tokens(0, 12)), 12u);
    pool.truncate(a, 4, true);       // reserved, never written: forgotten
    EXPECT_EQ(pool.prefix_length(iota_tokens(0, 12)), 4u);
    EXPECT_EQ(pool.stats().free + pool.stats().used + pool.stats().cached, 8u);
}

// Simulated page storage: what a backend would hold.
struct Storage {
    uint32_t page_size;
    std::vector<Tokens> pages;
    Storage(uint32_t n, uint32_t p) : page_size(p), pages(n, Tokens(p, -1)) {}
    void apply(const std::vector<KvPool::Copy>& copies) {
        for (const KvPool::Copy& c : copies)
            std::copy_n(pages[c.from].begin(), c.positions, pages[c.to].begin());
    }
};

// Positions whose stored token differs from the sequence's own (dropped
// pages and positions before `from` are not read).
size_t mismatches(const Storage& st, std::span<const uint32_t> table, const Tokens& content, uint32_t from) {
    size_t bad = 0;
    for (uint32_t i = from; i < content.size(); ++i) {
        const uint32_t p = table[i / st.page_size];
        if (p != KvPool::kNoPage && st.pages[p][i % st.page_size] != content[i]) ++bad;
    }
    return bad;
}

TEST(KvPool, RandomRequestsReadBackTheirOwnTokensAndLeaveNoPageBehind) {
    constexpr uint32_t kPages = 24, kPage = 4;
    std::mt19937 rng(7);
    KvPool pool(kPages, kPage);
    Storage st(kPages, kPage);
    struct Live {
        Tokens content;
        uint32_t dropped = 0;   // positions below this were released
    };
    std::map<KvPool::Seq, Live> live;
    size_t copies_seen = 0, refusals = 0, hits = 0, swapped_caught = 0, truncations = 0;
    auto pick = [&] {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        return it;
    };
    auto write = [&](KvPool::Seq s, Live& l, const Tokens& t) {
        std::vector<KvPool::Copy> copies;
        if (!pool.append(s, t, copies)) {
            ++refusals;
            return;
        }
        copies_seen += copies.size();
        st.apply(copies);
        for (KvPool::Token tok : t) {
            const uint32_t pos = uint32_t(l.content.size());
            st.pages[pool.pages(s)[pos / kPage]][pos % kPage] = tok;
            l.content.push_back(tok);
        }
    };
    for (int step = 0; step < 4000; ++step) {
        const uint32_t op = rng() % 10;
        if (live.size() < 2 || op == 0) {   // a new request, often sharing a prefix with a running one
            const KvPool::Seq s = pool.create();
            Live l;
            Tokens prompt;
            if (!live.empty() && rng() % 2) {
                const Tokens& src = pick()->second.content;
                prompt.assign(src.begin(), src.begin() + rng() % (src.size() + 1));
            }
            for (uint32_t n = rng() % 9; n--;) prompt.push_back(int(rng() % 3));   // a small alphabet: repeats
            const uint32_t got = pool.attach_prefix(s, prompt);
            hits += got;
            l.content.assign(prompt.begin(), prompt.begin() + got);
            write(s, l, Tokens(prompt.begin() + got, prompt.end()));
            live[s] = l;
        } else if (op <= 4) {   // decode tokens
            auto it = pick();
            write(it->first, it->second, Tokens(1 + rng() % 3, int(rng() % 3)));
        } else if (op == 5) {
            auto it = pick();
            const KvPool::Seq c = pool.fork(it->first);
            live[c] = it->second;
        } else if (op == 6 || (pool.available() < 4 && live.size() > 2)) {
            auto it = pick();
            pool.release(it->first);
            live.erase(it);
        } else if (op == 8) {   // a conversation rewound to a shorter prefix
            auto it = pick();
            Live& l = it->second;
            const uint32_t len = uint32_t(l.content.size());
            const uint32_t lo = (l.dropped + kPage - 1) / kPage * kPage;   // not into a released page
            if (len > lo) {
                const uint32_t to = lo + rng() % (len - lo + 1);
                pool.truncate(it->first, to);
                l.content.resize(to);
                ++truncations;
            }
        } else if (op == 7) {   // a sliding window of 8 positions
            auto it = pick();
            const uint32_t len = uint32_t(it->second.content.size());
            if (len > 8) {
                pool.drop_before(it->first, len - 8);
                it->second.dropped = std::max(it->second.dropped, (len - 8) / kPage * kPage);
            }
        }
        // Every sequence reads back its own tokens; references match the tables.
        std::vector<uint32_t> refs(kPages, 0);
        for (const auto& [s, l] : live) {
            ASSERT_EQ(pool.length(s), l.content.size());
            ASSERT_EQ(mismatches(st, pool.pages(s), l.content, l.dropped), 0u) << "step " << step << " sequence " << s;
            for (uint32_t p : pool.pages(s))
                if (p != KvPool::kNoPage) ++refs[p];
        }
        for (uint32_t p = 0; p < kPages; ++p) ASSERT_EQ(pool.refs(p), refs[p]) << "step " << step << " page " << p;
        const KvPool::Stats ss = pool.stats();
        ASSERT_EQ(ss.used + ss.cached + ss.free, kPages);
        ASSERT_EQ(ss.sequences, live.size());
        // The negative control: a table with two distinct live pages swapped reads wrong tokens.
        auto it = pick();
        std::vector<uint32_t> table(pool.pages(it->first).begin(), pool.pages(it->first).end());
        if (table.size() >= 2 && table[0] != KvPool::kNoPage && table[1] != KvPool::kNoPage &&
            it->second.content.size() >= 2 * kPage && it->second.dropped == 0) {
            std::swap(table[0], table[1]);
            const Tokens& c = it->second.content;
            if (!std::equal(c.begin(), c.begin() + kPage, c.begin() + kPage)) {
                EXPECT_GT(mismatches(st, table, c, 0), 0u);
                ++swapped_caught;
            }
        }
    }
    for (const auto& [s, l] : live) pool.release(s);
    const KvPool::Stats end = pool.stats();
    EXPECT_EQ(end.used, 0u);
    EXPECT_EQ(end.sequences, 0u);
    // The run exercised what it claims to.
    std::printf("[kv pool] copies %zu, refusals %zu, prefix hit tokens %zu, evictions %llu, swaps caught %zu, "
                "truncations %zu\n",
                copies_seen, refusals, hits, (unsigned long long)end.evictions, swapped_caught, truncations);
    EXPECT_GT(copies_seen, 20u);
    EXPECT_GT(refusals, 0u);
    EXPECT_GT(hits, 100u);
    EXPECT_GT(end.evictions, 20u);
    EXPECT_GT(swapped_caught, 100u);
    EXPECT_GT(truncations, 100u);
}

}  // namespace
