// TokenFilter: which tokens a Matcher allows next (grammar.h).
//
// The vocabulary's byte strings form a trie stored in depth-first preorder
// (flat arrays: one linear scan, and a rejected subtree is skipped with one
// jump). A walk carries the matcher's state down the trie; the states met
// in one walk are interned into a small DFA whose transitions are computed
// once per (state, byte), so a byte costs one table load after the first
// time (inside a JSON string almost every byte maps the string state to
// itself). The allowed set of each (grammar, state) is memoised in a bounded,
// thread-safe cache, since the same state comes back token after token.
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
};

struct TokenFilter::Cache {
    std::mutex mu;
    std::unordered_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> map;
    std::deque<std::string> order;   // insertion order: evicted first-in first-out
    size_t bytes = 0, limit = size_t(64) << 20;
    std::atomic<uint64_t> hits{0}, misses{0};
};

TokenFilter::TokenFilter(std::vector<std::string> token_bytes, std::vector<int32_t> end_tokens)
    : n_tokens_(token_bytes.size()), end_tokens_(std::move(end_tokens)), trie_(std::make_unique<Trie>()),
      cache_(std::make_unique<Cache>()) {
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

    // Sorted strings give the preorder directly: each string shares a prefix
    // with the previous one, pops the rest of the path and appends its tail.
    Trie& t = *trie_;
    std::vector<uint32_t> path;   // node indices from the root down
    std::string_view prev;
    for (int32_t id : order) {
        std::string_view s = token_bytes[static_cast<size_t>(id)];
        size_t common = 0;
        while (common < path.size() && common < s.size() && prev[common] == s[common]) ++common;
        while (path.size() > common) {
            t.nodes[path.back()].skip = static_cast<uint32_t>(t.nodes.size());
            path.pop_back();
        }
        for (size_t i = common; i < s.size(); ++i) {
            path.push_back(static_cast<uint32_t>(t.nodes.size()));
            t.nodes.push_back({static_cast<uint32_t>(path.size()), 0, static_cast<uint32_t>(t.ids.size()),
                               static_cast<uint8_t>(s[i])});
        }
        t.ids.push_back(id);
        t.max_depth = std::max(t.max_depth, static_cast<uint32_t>(s.size()));
        prev = s;
    }
    for (uint32_t i : path) t.nodes[i].skip = static_cast<uint32_t>(t.nodes.size());
    t.nodes.push_back({0, 0, static_cast<uint32_t>(t.ids.size()), 0});   // sentinel: ends the last token range
}

TokenFilter::~TokenFilter() = default;

namespace {

// The states one walk meets, interned, with their transitions.
class WalkDfa {
public:
    static constexpr int32_t kUnknown = -1, kDead = -2;

    explicit WalkDfa(const Grammar& g) : g_(g) {}

    int32_t intern(std::span<const uint32_t> state) {
        std::string key(reinterpret_cast<const char*>(state.data()), state.size_bytes());
        auto [it, fresh] = ids_.try_emplace(std::move(key), static_cast<int32_t>(states_.size()));
        if (fresh) {
            states_.emplace_back(state.begin(), state.end());
            next_.resize(next_.size() + 256, kUnknown);
        }
        return it->second;
    }

    int32_t next(int32_t s, uint8_t b) {
        int32_t t = next_[static_cast<size_t>(s) * 256 + b];
        if (t != kUnknown) return t;
        t = Matcher::step(g_, states_[static_cast<size_t>(s)], b, scratch_) ? intern(scratch_) : kDead;
        next_[static_cast<size_t>(s) * 256 + b] = t;
        return t;
    }

    // The hot loop reads the table directly.
    const int32_t* table() const { return next_.data(); }

private:
    const Grammar& g_;
    std::unordered_map<std::string, int32_t> ids_;
    std::vector<std::vector<uint32_t>> states_;
    std::vector<int32_t> next_;   // 256 per state
    std::vector<uint32_t> scratch_;
};

}  // namespace

void TokenFilter::compute(const Matcher& m, std::vector<uint64_t>& bits) const {
    bits.assign((n_tokens_ + 63) / 64, 0);
    const Trie& t = *trie_;
    if (m.can_continue()) {
        WalkDfa dfa(m.grammar());
        std::vector<int32_t> at(t.max_depth + 1);
        at[0] = dfa.intern(m.state());
        const size_t n = t.nodes.size() - 1;
        for (size_t i = 0; i < n;) {
            const Trie::Node& node = t.nodes[i];
            const int32_t from = at[node.depth - 1];
            int32_t s = dfa.table()[static_cast<size_t>(from) * 256 + node.byte];
            if (s == WalkDfa::kUnknown) s = dfa.next(from, node.byte);
            if (s == WalkDfa::kDead) {
                i = node.skip;
                continue;
            }
            at[node.depth] = s;
            for (uint32_t k = node.tok_begin, e = t.nodes[i + 1].tok_begin; k < e; ++k) {
                const auto id = static_cast<uint32_t>(t.ids[k]);
                bits[id >> 6] |= uint64_t(1) << (id & 63);
            }
            ++i;
        }
    }
    if (m.can_end())
        for (int32_t id : end_tokens_) bits[static_cast<size_t>(id) >> 6] |= uint64_t(1) << (id & 63);
}

void TokenFilter::allowed(const Matcher& m, std::vector<uint64_t>& bits) const {
    Cache& c = *cache_;
    const uint64_t serial = m.grammar().serial();
    const auto st = m.state();
    std::string key(reinterpret_cast<const char*>(&serial), sizeof serial);
    key.append(reinterpret_cast<const char*>(st.data()), st.size_bytes());
    {
        std::lock_guard lock(c.mu);
        auto it = c.map.find(key);
        if (it != c.map.end()) {
            std::shared_ptr<const std::vector<uint64_t>> hit = it->second;
            c.hits.fetch_add(1, std::memory_order_relaxed);
            bits = *hit;
            return;
        }
    }
    c.misses.fetch_add(1, std::memory_order_relaxed);
    compute(m, bits);
    std::lock_guard lock(c.mu);
    const size_t cost = bits.size() * sizeof(uint64_t) + key.size() + 64;
    if (cost > c.limit || c.map.count(key)) return;
    while (c.bytes + cost > c.limit && !c.order.empty()) {
        auto old = c.map.find(c.order.front());
        c.bytes -= old->second->size() * sizeof(uint64_t) + old->first.size() + 64;
        c.map.erase(old);
        c.order.pop_front();
    }
    c.map.emplace(key, std::make_shared<const std::vector<uint64_t>>(bits));
    c.order.push_back(std::move(key));
    c.bytes += cost;
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
