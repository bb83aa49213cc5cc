// TokenFilter: which tokens a Matcher allows next (grammar.h), and the two
// pieces of Grammar only it uses: clamp() and the transition memo.
//
// The vocabulary's byte strings form a trie stored in depth-first preorder
// (flat arrays: one linear scan, and a rejected subtree is skipped with one
// jump); short and long tokens have a trie each (see the constructor). A
// walk carries the matcher's state down the trie; the states met are
// interned into a DFA kept with the grammar, whose transitions are
// computed once per (state, byte), so a byte costs one table load after the
// first time (inside a JSON string almost every byte maps the string state to
// itself). The allowed set of each (grammar, state) is memoised in a bounded,
// thread-safe cache, since the same state comes back token after token; the
// short tokens' set is keyed by the clamped state, so the positions of a
// bounded string share it.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <limits>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "engine/grammar.h"

namespace ptxlm::grammar {

struct TokenFilter::Trie {
    struct Node {
        uint32_t depth;       // 1 for a first byte
        uint32_t skip;        // the node after this subtree
        uint32_t tok_begin;   // tokens ending here: ids[tok_begin .. nodes[i + 1].tok_begin)
        uint8_t byte;
    };
    std::vector<Node> nodes;   // preorder, plus a sentinel
    std::vector<int32_t> ids;
    uint32_t max_depth = 0;

    Trie(const std::vector<std::string>& bytes, std::span<const int32_t> sorted);
    // Sets the bit of every token whose bytes the grammar accepts from `state`.
    void walk(const Grammar& g, std::span<const uint32_t> state, std::vector<uint64_t>& bits) const;
};

struct TokenFilter::Cache {
    std::mutex mu;
    std::unordered_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> map;
    std::deque<std::string> order;   // insertion order: evicted first-in first-out
    size_t bytes = 0, limit = size_t(64) << 20;
    std::atomic<uint64_t> hits{0}, misses{0};
};

TokenFilter::TokenFilter(std::vector<std::string> token_bytes, std::vector<int32_t> end_tokens, uint32_t split)
    : n_tokens_(token_bytes.size()), end_tokens_(std::move(end_tokens)), cache_(std::make_unique<Cache>()) {
    for (int32_t id : end_tokens_)
        if (id < 0 || static_cast<size_t>(id) >= n_tokens_)
            throw std::invalid_argument("grammar::TokenFilter: end token " + std::to_string(id) + " is not in the vocabulary");
    std::vector<char> is_end(n_tokens_, 0);
    for (int32_t id : end_tokens_) is_end[static_cast<size_t>(id)] = 1;

    std::vector<int32_t> order;
    for (size_t i = 0; i < n_tokens_; ++i)
        if (!token_bytes[i].empty() && !is_end[i]) order.push_back(static_cast<int32_t>(i));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return token_bytes[static_cast<size_t>(a)] < token_bytes[static_cast<size_t>(b)];
    });

    // The split: tokens of up to split_ bytes go to the short trie, whose
    // allowed sets are memoised by clamped state (Grammar::clamp), so they are
    // shared by every position of a bounded string more than split_ + 1 from
    // its bound; the rest go to the long trie, memoised by exact state. The
    // split is the shortest length whose long trie has at most 1/16 of the
    // nodes (SmolLM2: 14 bytes; Gemma 3: 25).
    std::vector<size_t> hist;   // nodes by the length of the longest token through them
    {
        std::vector<uint32_t> longest;   // along the path, from the root down
        std::string_view prev;
        size_t total = 0;
        for (int32_t id : order) {
            std::string_view s = token_bytes[static_cast<size_t>(id)];
            size_t common = 0;
            while (common < longest.size() && common < s.size() && prev[common] == s[common]) ++common;
            for (; longest.size() > common; longest.pop_back()) {
                if (hist.size() <= longest.back()) hist.resize(longest.back() + 1);
                ++hist[longest.back()];
            }
            longest.resize(s.size(), 0);
            for (uint32_t& l : longest) l = std::max(l, static_cast<uint32_t>(s.size()));
            total += s.size() - common;
            prev = s;
        }
        for (uint32_t l : longest) {
            if (hist.size() <= l) hist.resize(l + 1);
            ++hist[l];
        }
        size_t above = total;   // nodes whose longest token is longer than split_
        split_ = 0;
        while (split_ + 1 < hist.size() && above > total / 16) above -= hist[++split_];
        split_ = split > 0 ? split : std::max<uint32_t>(split_, 1);
    }
    std::vector<int32_t> short_ids, long_ids;
    for (int32_t id : order) (token_bytes[static_cast<size_t>(id)].size() <= split_ ? short_ids : long_ids).push_back(id);
    short_ = std::make_unique<Trie>(token_bytes, short_ids);
    long_ = std::make_unique<Trie>(token_bytes, long_ids);
}

// Sorted strings give the preorder directly: each string shares a prefix
// with the previous one, pops the rest of the path and appends its tail.
TokenFilter::Trie::Trie(const std::vector<std::string>& bytes, std::span<const int32_t> sorted) {
    std::vector<uint32_t> path;   // node indices from the root down
    std::string_view prev;
    for (int32_t id : sorted) {
        std::string_view s = bytes[static_cast<size_t>(id)];
        size_t common = 0;
        while (common < path.size() && common < s.size() && prev[common] == s[common]) ++common;
        while (path.size() > common) {
            nodes[path.back()].skip = static_cast<uint32_t>(nodes.size());
            path.pop_back();
        }
        for (size_t i = common; i < s.size(); ++i) {
            path.push_back(static_cast<uint32_t>(nodes.size()));
            nodes.push_back({static_cast<uint32_t>(path.size()), 0, static_cast<uint32_t>(ids.size()),
                             static_cast<uint8_t>(s[i])});
        }
        ids.push_back(id);
        max_depth = std::max(max_depth, static_cast<uint32_t>(s.size()));
        prev = s;
    }
    for (uint32_t i : path) nodes[i].skip = static_cast<uint32_t>(nodes.size());
    nodes.push_back({0, 0, static_cast<uint32_t>(ids.size()), 0});   // sentinel: ends the last token range
}

TokenFilter::~TokenFilter() = default;

// The states the filter's walks met over one grammar, interned, with their
// byte transitions. It lives as long as the grammar, so every generation and
// every sequence over it shares what was computed: inside a bounded string
// (`[^"]{0,40}`) each position is its own state, and without this each walk
// would recompute the transitions of the next max-token-length positions.
struct Grammar::Transitions {
    static constexpr int32_t kUnknown = -1, kDead = -2;
    // Past this many bytes the next walk starts from an empty table.
    static constexpr size_t kLimit = size_t(16) << 20;

    std::mutex mu;   // held for a whole walk
    std::unordered_map<std::string, int32_t> ids;
    std::vector<std::vector<uint32_t>> states;
    std::vector<int32_t> next;   // 256 per state
    std::vector<uint32_t> scratch;
    size_t bytes = 0;

    int32_t intern(std::span<const uint32_t> state) {
        std::string key(reinterpret_cast<const char*>(state.data()), state.size_bytes());
        const size_t cost = 256 * sizeof(int32_t) + 2 * key.size() + 96;
        auto [it, fresh] = ids.try_emplace(std::move(key), static_cast<int32_t>(states.size()));
        if (fresh) {
            states.emplace_back(state.begin(), state.end());
            next.resize(next.size() + 256, kUnknown);
            bytes += cost;
        }
        return it->second;
    }

    int32_t step(const Grammar& g, int32_t s, uint8_t b) {
        int32_t t = next[static_cast<size_t>(s) * 256 + b];
        if (t != kUnknown) return t;
        t = Matcher::step(g, states[static_cast<size_t>(s)], b, scratch) ? intern(scratch) : kDead;
        next[static_cast<size_t>(s) * 256 + b] = t;
        return t;
    }

    // Only between walks: a walk holds state ids.
    void reset_if_full() {
        if (bytes <= kLimit) return;
        ids.clear();
        states.clear();
        next.clear();
        bytes = 0;
    }
};

// Positions in a chain's rule R_k (k > c) move to the same offset in R_c.
// R_k for k >= 2 all have the shape [x, Ref R(k-1), End] [End], so offsets
// carry over; c >= 2 keeps R_1's other shape out of it.
bool Grammar::clamp(std::span<const uint32_t> state, uint32_t c, std::vector<uint32_t>& out) const {
    if (elem_chain_.empty() || c < 2) return false;
    auto moves = [&](uint32_t e) { return elem_chain_[e].first != kNoChain && elem_chain_[e].second > c; };
    bool any = false;
    for (size_t i = 0; i < state.size() && !any; i += 2 + state[i])
        for (size_t q = i + 2; q < i + 2 + state[i]; ++q) any = any || moves(state[q]);
    if (!any) return false;
    bool changed = false;
    std::vector<std::vector<uint32_t>> recs;
    for (size_t i = 0; i < state.size();) {
        const size_t n = 2 + state[i];
        std::vector<uint32_t> rec(state.begin() + static_cast<ptrdiff_t>(i),
                                  state.begin() + static_cast<ptrdiff_t>(i + n));
        for (size_t q = 2; q < n; ++q) {
            const auto [chain, k] = elem_chain_[rec[q]];
            if (chain == kNoChain || k <= c) continue;
            const uint32_t from = alt_begin_[rule_alts_[chains_[chain][k - 1]]];
            const uint32_t to = alt_begin_[rule_alts_[chains_[chain][c - 1]]];
            rec[q] = to + (rec[q] - from);
            changed = true;
        }
        recs.push_back(std::move(rec));
        i += n;
    }
    if (!changed) return false;
    std::sort(recs.begin(), recs.end());
    recs.erase(std::unique(recs.begin(), recs.end()), recs.end());
    out.clear();
    for (const auto& r : recs) out.insert(out.end(), r.begin(), r.end());
    return true;
}

Grammar::Grammar() : transitions_(std::make_unique<Transitions>()) {}
Grammar::~Grammar() = default;

void TokenFilter::Trie::walk(const Grammar& g, std::span<const uint32_t> state, std::vector<uint64_t>& bits) const {
    if (nodes.size() <= 1) return;
    Grammar::Transitions& dfa = *g.transitions_;
    std::lock_guard lock(dfa.mu);
    dfa.reset_if_full();
    std::vector<int32_t> at(max_depth + 1);
    at[0] = dfa.intern(state);
    const size_t n = nodes.size() - 1;
    for (size_t i = 0; i < n;) {
        const Node& node = nodes[i];
        const int32_t from = at[node.depth - 1];
        int32_t s = dfa.next[static_cast<size_t>(from) * 256 + node.byte];
        if (s == Grammar::Transitions::kUnknown) s = dfa.step(g, from, node.byte);
        if (s == Grammar::Transitions::kDead) {
            i = node.skip;
            continue;
        }
        at[node.depth] = s;
        for (uint32_t k = node.tok_begin, e = nodes[i + 1].tok_begin; k < e; ++k) {
            const auto id = static_cast<uint32_t>(ids[k]);
            bits[id >> 6] |= uint64_t(1) << (id & 63);
        }
        ++i;
    }
}

void TokenFilter::part(const Trie& t, char tag, const Grammar& g, std::span<const uint32_t> state,
                       std::vector<uint64_t>& bits, bool& first, bool& missed) const {
    if (t.ids.empty()) return;
    Cache& c = *cache_;
    const uint64_t serial = g.serial();
    std::string key(reinterpret_cast<const char*>(&serial), sizeof serial);
    key += tag;
    key.append(reinterpret_cast<const char*>(state.data()), state.size_bytes());
    auto merge = [&](const std::vector<uint64_t>& v) {   // the first part is copied, the second ORed
        if (first) bits = v;
        else
            for (size_t w = 0; w < bits.size(); ++w) bits[w] |= v[w];
        first = false;
    };
    {
        std::lock_guard lock(c.mu);
        auto it = c.map.find(key);
        if (it != c.map.end()) {
            std::shared_ptr<const std::vector<uint64_t>> hit = it->second;
            merge(*hit);
            return;
        }
    }
    missed = true;
    std::vector<uint64_t> mine(bits.size(), 0);
    t.walk(g, state, mine);
    merge(mine);
    std::lock_guard lock(c.mu);
    const size_t cost = mine.size() * sizeof(uint64_t) + key.size() + 64;
    if (cost > c.limit || c.map.count(key)) return;
    while (c.bytes + cost > c.limit && !c.order.empty()) {
        auto old = c.map.find(c.order.front());
        c.bytes -= old->second->size() * sizeof(uint64_t) + old->first.size() + 64;
        c.map.erase(old);
        c.order.pop_front();
    }
    c.map.emplace(key, std::make_shared<const std::vector<uint64_t>>(std::move(mine)));
    c.order.push_back(std::move(key));
    c.bytes += cost;
}

void TokenFilter::allowed(const Matcher& m, std::vector<uint64_t>& bits) const {
    bits.assign((n_tokens_ + 63) / 64, 0);
    bool missed = false, first = true;
    if (m.can_continue()) {
        const Grammar& g = m.grammar();
        const std::span<const uint32_t> exact = m.state();
        std::vector<uint32_t> clamped;
        const bool changed = g.clamp(exact, split_ + 1, clamped);
        part(*short_, 's', g, changed ? std::span<const uint32_t>(clamped) : exact, bits, first, missed);
        part(*long_, 'l', g, exact, bits, first, missed);
    }
    if (m.can_end())
        for (int32_t id : end_tokens_) bits[static_cast<size_t>(id) >> 6] |= uint64_t(1) << (id & 63);
    (missed ? cache_->misses : cache_->hits).fetch_add(1, std::memory_order_relaxed);
}

void TokenFilter::apply(const Matcher& m, std::span<float> logits) const {
    thread_local std::vector<uint64_t> bits;
    allowed(m, bits);
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < logits.size(); ++i)
        if (i >= n_tokens_ || !((bits[i >> 6] >> (i & 63)) & 1)) logits[i] = neg_inf;
}

TokenFilter::CacheStats TokenFilter::cache_stats() const {
    std::lock_guard lock(cache_->mu);
    return {cache_->hits.load(), cache_->misses.load(), cache_->map.size(), cache_->bytes};
}

void TokenFilter::set_cache_limit(size_t bytes) {
    Cache& c = *cache_;
    std::lock_guard lock(c.mu);
    c.limit = bytes;
    while (c.bytes > c.limit && !c.order.empty()) {
        auto old = c.map.find(c.order.front());
        c.bytes -= old->second->size() * sizeof(uint64_t) + old->first.size() + 64;
        c.map.erase(old);
        c.order.pop_front();
    }
}

}  // namespace ptxlm::grammar
