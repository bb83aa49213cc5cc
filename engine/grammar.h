// GBNF grammars for constrained decoding, as llama.cpp's server accepts them
// (grammars/README.md): rules `name ::= alternatives`, string literals,
// character classes, `.`, groups, repetition (* + ? {m} {m,} {m,n}) and
// comments. Matching is over Unicode code points; the Matcher is fed UTF-8
// bytes, and a code point may be split between calls (and between tokens).
//
// Three pieces:
//   Grammar      parsed and compiled once; immutable, shared between threads.
//   Matcher      one generation's position in a grammar: a pushdown
//                recognizer, i.e. a deduplicated set of stacks of positions
//                into the compiled rules (every alternative is tracked, so
//                ambiguous grammars work). Copying one is a vector copy.
//   TokenFilter  built once per vocabulary: which tokens may come next. It
//                walks a trie of the token byte strings with the matcher's
//                state, pruning a subtree at the first rejected byte, and
//                memoises the result per state (inside a JSON string the state
//                repeats token after token). The states its walks meet and
//                their byte transitions are kept with the grammar, so a later
//                walk over the same states costs one table load per trie node.
//
// Hostile grammars stop with GrammarError at parse (sizes are capped, left
// recursion is refused); a Matcher step has bounded work: a byte whose
// expansion would exceed the caps (kMaxStacks stacks, kMaxDepth nesting) is
// rejected rather than followed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ptxlm::grammar {

// A grammar error: parse errors name line and column ("grammar: line 3,
// column 7: expected '::='"), semantic errors name the rule ("grammar: rule
// 'value' is used but never defined", "... left recursion through 'expr'").
class GrammarError : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

// A GBNF string literal matching exactly `bytes` (quotes, backslashes and
// control characters escaped; other bytes, UTF-8 included, written raw).
std::string literal(std::string_view bytes);

// Limits on what a grammar may ask for.
inline constexpr uint32_t kMaxRepeat = 10000;      // a bound in {m,n}
inline constexpr uint32_t kMaxElements = 100000;   // compiled elements, repetitions expanded
inline constexpr uint32_t kMaxNesting = 1000;      // parentheses inside parentheses
inline constexpr uint32_t kMaxStacks = 10000;      // live stacks in one matcher state
inline constexpr uint32_t kMaxDepth = 10000;       // rule nesting in one stack
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// One compiled element. A rule's alternatives are runs of elements, each
// closed by End.
enum class Op : uint8_t { Char, Ref, End };
struct Elem {
    Op op;
    uint32_t arg;   // Char: index into classes; Ref: rule index; End: unused
};

class Grammar {   // compiled and immutable; share it through shared_ptr between generations and threads
public:
    static std::shared_ptr<const Grammar> parse(std::string_view gbnf, std::string_view root = "root");
    ~Grammar();
    Grammar(const Grammar&) = delete;
    Grammar& operator=(const Grammar&) = delete;

    // A code point set: sorted, disjoint, non-adjacent inclusive ranges.
    struct Class {
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        uint64_t ascii[2] = {0, 0};   // bit c: code point c < 128 is in the set (the fast path)
        bool contains(uint32_t cp) const;
        bool intersects(uint32_t lo, uint32_t hi) const;
        bool covers(uint32_t lo, uint32_t hi) const;
    };

    size_t n_rules() const { return rule_names_.size(); }
    const std::string& rule_name(size_t i) const { return rule_names_.at(i); }
    size_t n_elements() const { return elems_.size(); }
    // Distinct for every parsed grammar in the process: a cache key.
    uint64_t serial() const { return serial_; }

    // A bounded repetition x{m,n} compiles to a chain of rules R_k ::= x R_(k-1)
    // | "", where k is how many more x may come, so each position in a
    // `[^"]{0,40}` string is its own state. Two states that differ only in
    // chains at k > c accept the same byte strings of up to c - 1 bytes (such
    // a string needs at most c - 1 copies of x that are not empty, so the
    // bound cannot bite). clamp() writes
    // `state` with every such k lowered to c into `out` (canonical: sorted,
    // deduplicated) and returns true, or returns false when nothing changes.
    bool clamp(std::span<const uint32_t> state, uint32_t c, std::vector<uint32_t>& out) const;

private:
    friend class Matcher;
    friend class Compiler;
    friend class TokenFilter;
    Grammar();
    struct Transitions;   // grammar_filter.cpp


    std::vector<Elem> elems_;
    std::vector<Class> classes_;
    std::vector<uint32_t> alt_begin_;              // alternative starts, grouped by rule
    std::vector<uint32_t> rule_alts_;              // rule r's alternatives: alt_begin_[rule_alts_[r] .. rule_alts_[r+1])
    std::vector<std::string> rule_names_;
    uint32_t root_ = 0;
    uint64_t serial_ = 0;
    std::vector<uint32_t> initial_;                // the Matcher's start state (see Matcher::state_)
    static constexpr uint32_t kNoChain = UINT32_MAX;
    std::vector<std::vector<uint32_t>> chains_;    // chain -> its rules R_1, R_2, ...
    std::vector<std::pair<uint32_t, uint32_t>> elem_chain_;   // element -> (chain, k), or kNoChain; empty without chains
    // The token filter's memo of states and byte transitions: a cache that
    // never changes what the grammar accepts, so it is written through the
    // pointer of a const Grammar, under its own lock.
    std::unique_ptr<Transitions> transitions_;
};

class Matcher {   // the state of one generation over a grammar; cheap to copy
public:
    explicit Matcher(std::shared_ptr<const Grammar> g);

    // Advances over bytes (UTF-8; a code point may be split across calls).
    // All or nothing: on a byte the grammar rejects, returns false and the
    // state is unchanged.
    bool accept(std::string_view bytes);
    bool can_end() const;        // what was accepted so far is a complete match of root (no partial UTF-8 pending)
    bool can_continue() const;   // some non-empty continuation is possible
    const Grammar& grammar() const { return *g_; }
    // The canonical state: equal states give equal keys (for caches).
    std::span<const uint32_t> state() const { return state_; }
    size_t n_stacks() const;

    // One step of the recognizer: `next` = `from` advanced over `byte`.
    // Returns false (next undefined) when the byte is rejected.
    static bool step(const Grammar& g, std::span<const uint32_t> from, uint8_t byte, std::vector<uint32_t>& next);

private:
    friend class Compiler;
    // The state before any byte: root's alternatives expanded. False when the
    // expansion exceeds the caps.
    static bool start(const Grammar& g, uint32_t root, std::vector<uint32_t>& state);

    std::shared_ptr<const Grammar> g_;
    // Stacks, sorted and deduplicated, each stored as [depth, partial,
    // positions bottom..top]. The top is a Char element; positions below are
    // where to resume when the rule above ends. Depth 0: root is complete.
    // partial: a code point begun but not finished (see grammar_match.cpp).
    std::vector<uint32_t> state_;
};

// Which tokens may come next: built once per vocabulary (token i's bytes;
// empty for control tokens, which are never allowed), shared by every grammar
// and generation; thread-safe.
class TokenFilter {
public:
    // split: see split(); 0 chooses it from the vocabulary.
    TokenFilter(std::vector<std::string> token_bytes, std::vector<int32_t> end_tokens, uint32_t split = 0);
    ~TokenFilter();
    TokenFilter(const TokenFilter&) = delete;
    TokenFilter& operator=(const TokenFilter&) = delete;

    size_t n_tokens() const { return n_tokens_; }
    // Tokens of up to split() bytes share memo entries across the positions
    // of bounded repetitions (Grammar::clamp); longer ones are walked per state.
    uint32_t split() const { return split_; }
    // Bit i set: token i may come next. End tokens are allowed exactly when m.can_end().
    void allowed(const Matcher& m, std::vector<uint64_t>& bits) const;
    // logits[i] = -infinity for every token not allowed.
    void apply(const Matcher& m, std::span<float> logits) const;

    // The memo of allowed sets per (grammar, state): hits and misses so far.
    struct CacheStats { uint64_t hits = 0, misses = 0; size_t entries = 0, bytes = 0; };
    CacheStats cache_stats() const;
    // The memo's bound in bytes (default 64 MiB); 0 turns memoising off.
    void set_cache_limit(size_t bytes);

private:
    struct Trie;
    struct Cache;
    void part(const Trie& t, char tag, const Grammar& g, std::span<const uint32_t> state,
              std::vector<uint64_t>& bits, bool& first, bool& missed) const;

    size_t n_tokens_ = 0;
    std::vector<int32_t> end_tokens_;
    uint32_t split_ = 0;
    std::unique_ptr<Trie> short_, long_;
    std::unique_ptr<Cache> cache_;
};

}  // namespace ptxlm::grammar
