// GBNF's recognizer: a state is a set of stacks over the compiled elements
// (see Matcher::state_), advanced one byte at a time. The parser and compiler
// are in grammar.cpp.
#include "engine/grammar.h"

#include <algorithm>
#include <unordered_set>

namespace ptxlm::grammar {

namespace {

// ---- The recognizer ----
//
// A stack record in a state is [depth, partial, positions...]. `partial`
// describes a code point whose first bytes were accepted:
//   bits 0-1: continuation bytes still to come (0: no partial code point)
//   bits 2-3: the sequence's length - 1
//   bit 4:    every completion is in the class and a valid code point
//             (then the bits so far are dropped, so that all such prefixes
//             give the same state)
//   bits 5+:  the bits so far
constexpr uint32_t kFull = 1u << 4;
constexpr uint32_t kMaxWork = 1u << 20;   // expansions per step
constexpr uint32_t kDedupAfter = 64;      // expansions per step before stacks are deduplicated on the way

enum class Fed { Dead, Partial, Done };

Fed feed(const Grammar::Class& c, uint32_t partial, uint8_t b, uint32_t& out) {
    uint32_t k, len, base;
    if (partial == 0) {
        if (b < 0x80) return (c.ascii[b >> 6] >> (b & 63)) & 1 ? Fed::Done : Fed::Dead;
        if (b >= 0xC2 && b <= 0xDF) k = 1, base = b & 0x1F;
        else if (b >= 0xE0 && b <= 0xEF) k = 2, base = b & 0x0F;
        else if (b >= 0xF0 && b <= 0xF4) k = 3, base = b & 0x07;
        else return Fed::Dead;
        len = k + 1;
    } else {
        if ((b & 0xC0) != 0x80) return Fed::Dead;
        k = (partial & 3) - 1;
        len = ((partial >> 2) & 3) + 1;
        base = ((partial >> 5) << 6) | (b & 0x3F);
        if (partial & kFull) {
            if (k == 0) return Fed::Done;
            out = k | ((len - 1) << 2) | kFull;
            return Fed::Partial;
        }
        if (k == 0) return c.contains(base) && !(base >= 0xD800 && base <= 0xDFFF) ? Fed::Done : Fed::Dead;
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    const uint32_t lo = base << (6 * k), hi = lo | ((1u << (6 * k)) - 1);
    uint32_t clo = std::max(lo, kMin[len]), chi = std::min(hi, kMaxCodePoint);
    // UTF-16 surrogates (U+D800..U+DFFF, only after the lead byte ED) are not
    // characters: a range inside them is dead, one reaching them is cut below.
    if (clo <= 0xDFFF && chi >= 0xD800) {
        if (clo >= 0xD800) return Fed::Dead;
        chi = 0xD7FF;
    }
    if (clo > chi || !c.intersects(clo, chi)) return Fed::Dead;
    if (clo == lo && chi == hi && c.covers(lo, hi)) out = k | ((len - 1) << 2) | kFull;
    else out = k | ((len - 1) << 2) | (base << 5);
    return Fed::Partial;
}

struct VecHash {
    size_t operator()(const std::vector<uint32_t>& v) const {
        uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
        for (uint32_t x : v) h = (h ^ x) * 0x100000001B3ull;
        return static_cast<size_t>(h ^ (h >> 29));
    }
};

// Expands stacks whose top may be a Ref or End into stacks whose top is a
// Char (or empty: root complete), collecting records.
class Expander {
public:
    Expander(const std::vector<Elem>& elems, const std::vector<uint32_t>& alt_begin,
             const std::vector<uint32_t>& rule_alts)
        : elems_(elems), alt_begin_(alt_begin), rule_alts_(rule_alts) {}

    void add_partial(std::span<const uint32_t> positions, uint32_t partial) {
        std::vector<uint32_t> rec;
        rec.reserve(positions.size() + 2);
        rec.push_back(static_cast<uint32_t>(positions.size()));
        rec.push_back(partial);
        rec.insert(rec.end(), positions.begin(), positions.end());
        out_.push_back(std::move(rec));
    }

    void expand(std::vector<uint32_t> st) {
        todo_.push_back(std::move(st));
        while (!todo_.empty() && !overflow_) {
            std::vector<uint32_t> s = std::move(todo_.back());
            todo_.pop_back();
            for (;;) {
                if (++work_ > kMaxWork) {
                    overflow_ = true;
                    break;
                }
                if (s.empty() || elems_[s.back()].op == Op::Char) {
                    add_partial(s, 0);
                    if (out_.size() > kMaxStacks) overflow_ = true;
                    break;
                }
                const Elem e = elems_[s.back()];
                if (e.op == Op::End) {
                    s.pop_back();
                    continue;
                }
                // Deduplication stops nullable loops and ambiguity blow-ups; the
                // common step expands a few rules, where hashing whole stacks
                // (deep in recursive grammars) would cost more than it saves.
                if (work_ > kDedupAfter && !seen_.insert(s).second) break;
                // Return to the element after the call; a return to End is a tail call.
                s.back() += 1;
                while (!s.empty() && elems_[s.back()].op == Op::End) s.pop_back();
                if (s.size() + 1 > kMaxDepth) {
                    overflow_ = true;
                    break;
                }
                const uint32_t a0 = rule_alts_[e.arg], a1 = rule_alts_[e.arg + 1];
                for (uint32_t a = a0 + 1; a < a1; ++a) {
                    todo_.push_back(s);
                    todo_.back().push_back(alt_begin_[a]);
                }
                s.push_back(alt_begin_[a0]);
            }
        }
    }

    // The state: records sorted and deduplicated. False on overflow or when empty.
    bool finish(std::vector<uint32_t>& state) {
        state.clear();
        if (overflow_ || out_.empty()) return false;
        std::sort(out_.begin(), out_.end());
        out_.erase(std::unique(out_.begin(), out_.end()), out_.end());
        for (const auto& r : out_) state.insert(state.end(), r.begin(), r.end());
        return true;
    }

private:
    const std::vector<Elem>& elems_;
    const std::vector<uint32_t>& alt_begin_;
    const std::vector<uint32_t>& rule_alts_;
    std::vector<std::vector<uint32_t>> out_, todo_;
    std::unordered_set<std::vector<uint32_t>, VecHash> seen_;
    uint32_t work_ = 0;
    bool overflow_ = false;
};

}  // namespace

// ---- Matcher ----

bool Matcher::start(const Grammar& g, uint32_t root, std::vector<uint32_t>& state) {
    Expander ex(g.elems_, g.alt_begin_, g.rule_alts_);
    for (uint32_t a = g.rule_alts_[root]; a < g.rule_alts_[root + 1]; ++a) ex.expand({g.alt_begin_[a]});
    return ex.finish(state);
}

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
    if (!g_) throw std::invalid_argument("grammar::Matcher: no grammar");
    state_ = g_->initial_;
}

bool Matcher::step(const Grammar& g, std::span<const uint32_t> from, uint8_t byte, std::vector<uint32_t>& next) {
    Expander ex(g.elems_, g.alt_begin_, g.rule_alts_);
    bool any = false;
    for (size_t i = 0; i < from.size();) {
        const uint32_t depth = from[i], partial = from[i + 1];
        std::span<const uint32_t> pos = from.subspan(i + 2, depth);
        i += 2 + depth;
        if (depth == 0) continue;   // root complete: nothing more may come
        const Elem& top = g.elems_[pos.back()];
        uint32_t np = 0;
        switch (feed(g.classes_[top.arg], partial, byte, np)) {
        case Fed::Dead: break;
        case Fed::Partial: ex.add_partial(pos, np), any = true; break;
        case Fed::Done: {
            std::vector<uint32_t> st(pos.begin(), pos.end());
            st.back() += 1;
            ex.expand(std::move(st));
            any = true;
            break;
        }
        }
    }
    return any && ex.finish(next);
}

bool Matcher::accept(std::string_view bytes) {
    if (bytes.empty()) return true;
    std::vector<uint32_t> cur, next;
    std::span<const uint32_t> from = state_;
    for (char c : bytes) {
        if (!step(*g_, from, static_cast<uint8_t>(c), next)) return false;
        cur.swap(next);
        from = cur;
    }
    state_ = std::move(cur);
    return true;
}

bool Matcher::can_end() const {
    // Records are sorted, so a complete one ([0, 0]) comes first.
    return state_.size() >= 2 && state_[0] == 0;
}

bool Matcher::can_continue() const {
    for (size_t i = 0; i < state_.size(); i += 2 + state_[i])
        if (state_[i] > 0) return true;
    return false;
}

size_t Matcher::n_stacks() const {
    size_t n = 0;
    for (size_t i = 0; i < state_.size(); i += 2 + state_[i]) ++n;
    return n;
}

}  // namespace ptxlm::grammar
