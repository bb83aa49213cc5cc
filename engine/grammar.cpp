// GBNF: the parser and compiler (text -> Grammar). The recognizer (Matcher)
// is in grammar_match.cpp, the token filter in grammar_filter.cpp.
//
// Compilation follows llama.cpp's scheme: a rule is a list of alternatives,
// each a run of elements closed by End; groups become generated rules, and
// repetitions become generated right-recursive rules (x* -> R ::= x R | ""),
// so the recognizer only knows Char, Ref and End.
#include "engine/grammar.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <unordered_map>

namespace ptxlm::grammar {

// ---- Code point sets ----

bool Grammar::Class::contains(uint32_t cp) const {
    if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
    auto it = std::lower_bound(ranges.begin(), ranges.end(), cp,
                               [](const std::pair<uint32_t, uint32_t>& r, uint32_t v) { return r.second < v; });
    return it != ranges.end() && it->first <= cp;
}

bool Grammar::Class::intersects(uint32_t lo, uint32_t hi) const {
    auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                               [](const std::pair<uint32_t, uint32_t>& r, uint32_t v) { return r.second < v; });
    return it != ranges.end() && it->first <= hi;
}

bool Grammar::Class::covers(uint32_t lo, uint32_t hi) const {
    auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                               [](const std::pair<uint32_t, uint32_t>& r, uint32_t v) { return r.second < v; });
    return it != ranges.end() && it->first <= lo && it->second >= hi;
}

namespace {

constexpr uint32_t kNoRule = UINT32_MAX;

// Sorts and merges ranges (adjacent ones too), complements them when
// `negate`, and fills the ASCII bitmap.
Grammar::Class make_class(std::vector<std::pair<uint32_t, uint32_t>> r, bool negate) {
    std::sort(r.begin(), r.end());
    Grammar::Class c;
    for (const auto& x : r) {
        if (!c.ranges.empty() && x.first <= c.ranges.back().second + 1)
            c.ranges.back().second = std::max(c.ranges.back().second, x.second);
        else
            c.ranges.push_back(x);
    }
    if (negate) {
        std::vector<std::pair<uint32_t, uint32_t>> inv;
        uint32_t next = 0;
        for (const auto& x : c.ranges) {
            if (x.first > next) inv.emplace_back(next, x.first - 1);
            next = x.second + 1;
        }
        if (next <= kMaxCodePoint) inv.emplace_back(next, kMaxCodePoint);
        c.ranges = std::move(inv);
    }
    for (uint32_t cp = 0; cp < 128; ++cp)
        if (c.intersects(cp, cp)) c.ascii[cp >> 6] |= uint64_t(1) << (cp & 63);
    return c;
}

}  // namespace

// ---- The parser and compiler ----

class Compiler {
public:
    explicit Compiler(std::string_view src) : src_(src) {}

    std::shared_ptr<Grammar> run(std::string_view root) {
        for (;;) {
            skip_space(true);
            if (at_end()) break;
            parse_rule();
        }
        for (const Rule& r : rules_)
            if (!r.defined)
                throw GrammarError("grammar: rule '" + r.name + "' is used but never defined (" +
                                   where(r.used_at) + ")");
        auto root_it = names_.find(std::string(root));
        if (root_it == names_.end())
            throw GrammarError("grammar: no rule named '" + std::string(root) + "' (the start rule)");
        check_left_recursion();
        return link(root_it->second);
    }

private:
    struct Rule {
        std::string name;
        std::vector<std::vector<Elem>> alts;
        bool defined = false;
        bool repetition = false;   // generated for x* / x+ / x{m,}: may call itself in tail position
        std::string parent;        // generated rules: the user rule they came from
        size_t used_at = 0;
        uint32_t chain = Grammar::kNoChain;   // x{m,n}'s rules R1..R(n-m): which chain, and k
        uint32_t chain_k = 0;
    };

    // -- Text --
    bool at_end() const { return pos_ >= src_.size(); }
    char peek(size_t ahead = 0) const { return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0'; }

    std::string where(size_t at) const {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < at && i < src_.size(); ++i) {
            if (src_[i] == '\n') ++line, col = 1;
            else ++col;
        }
        return "line " + std::to_string(line) + ", column " + std::to_string(col);
    }
    [[noreturn]] void fail_at(size_t at, const std::string& msg) const {
        throw GrammarError("grammar: " + where(at) + ": " + msg);
    }
    [[noreturn]] void fail(const std::string& msg) const { fail_at(pos_, msg); }

    // Spaces, tabs, carriage returns and comments; newlines too when `newline_ok`.
    void skip_space(bool newline_ok) {
        while (!at_end()) {
            char c = peek();
            if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
                ++pos_;
            } else if (c == '#') {
                while (!at_end() && peek() != '\n') ++pos_;
            } else {
                break;
            }
        }
    }

    static bool is_name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    }
    std::string parse_name() {
        size_t start = pos_;
        while (!at_end() && is_name_char(peek())) ++pos_;
        return std::string(src_.substr(start, pos_ - start));
    }

    uint32_t decode_utf8() {
        const auto b0 = static_cast<uint8_t>(peek());
        int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
        if (n == 0) fail("invalid UTF-8 in the grammar");
        uint32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
        for (int i = 1; i < n; ++i) {
            const auto b = static_cast<uint8_t>(peek(static_cast<size_t>(i)));
            if ((b & 0xC0) != 0x80) fail("invalid UTF-8 in the grammar");
            cp = (cp << 6) | (b & 0x3F);
        }
        static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < kMin[n] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid UTF-8 in the grammar");
        pos_ += static_cast<size_t>(n);
        return cp;
    }

    // One character of a literal or class, escapes included; pos_ is on it.
    uint32_t parse_char(bool in_class = false) {
        if (peek() != '\\') return decode_utf8();
        const size_t start = pos_;
        ++pos_;
        if (at_end()) fail_at(start, "a '\\' at the end of the grammar");
        const char e = peek();
        ++pos_;
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': return static_cast<uint8_t>(e);
        case '-': case '^':   // in classes, as in regular expressions
            if (in_class) return static_cast<uint8_t>(e);
            break;
        case 'x': return parse_hex(start, 2);
        case 'u': return parse_hex(start, 4);
        case 'U': return parse_hex(start, 8);
        default: break;
        }
        std::string shown = (static_cast<uint8_t>(e) >= 0x20 && static_cast<uint8_t>(e) < 0x7F) ? std::string(1, e) : "?";
        fail_at(start, "unknown escape '\\" + shown + "' (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\xHH \\uHHHH \\UHHHHHHHH)");
    }
    uint32_t parse_hex(size_t start, int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
            const char c = peek();
            int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
            if (d < 0) fail_at(start, "expected " + std::to_string(digits) + " hex digits after '" +
                                          std::string(src_.substr(start, 2)) + "'");
            v = (v << 4) | static_cast<uint32_t>(d);
            ++pos_;
        }
        if (v > kMaxCodePoint) fail_at(start, "escape beyond U+10FFFF");
        return v;
    }

    // -- Building rules --
    void count_elements(uint64_t n) {
        n_elems_ += n;
        if (n_elems_ > kMaxElements)
            fail("the grammar is over the limit of " + std::to_string(kMaxElements) +
                 " elements (repetitions expanded)");
    }
    uint32_t class_elem_for(uint32_t cp) {
        auto [it, fresh] = char_class_.try_emplace(cp, static_cast<uint32_t>(classes_.size()));
        if (fresh) classes_.push_back(make_class({{cp, cp}}, false));
        return it->second;
    }
    uint32_t ref_rule(const std::string& name, size_t at) {
        auto [it, fresh] = names_.try_emplace(name, static_cast<uint32_t>(rules_.size()));
        if (fresh) {
            rules_.push_back({});
            rules_.back().name = name;
            rules_.back().used_at = at;
        }
        return it->second;
    }
    uint32_t new_rule(std::vector<std::vector<Elem>> alts, bool repetition = false) {
        Rule r;
        r.name = cur_rule_ + "_" + std::to_string(++generated_);
        r.alts = std::move(alts);
        r.defined = true;
        r.repetition = repetition;
        r.parent = cur_rule_;
        uint64_t n = 0;
        for (const auto& a : r.alts) n += a.size() + 1;
        count_elements(n);
        rules_.push_back(std::move(r));
        return static_cast<uint32_t>(rules_.size() - 1);
    }

    void parse_rule() {
        const size_t name_at = pos_;
        std::string name = parse_name();
        if (name.empty()) fail("expected a rule name");
        skip_space(false);
        if (src_.substr(pos_, 3) != "::=") fail("expected '::='");
        pos_ += 3;
        skip_space(true);
        const uint32_t id = ref_rule(name, name_at);
        if (rules_[id].defined) fail_at(name_at, "rule '" + name + "' is defined twice");
        rules_[id].defined = true;   // before the body: a self reference is not "undefined"
        cur_rule_ = name;
        auto alts = parse_alternatives(0);
        uint64_t n = 0;
        for (const auto& a : alts) n += a.size() + 1;
        count_elements(n);
        rules_[id].alts = std::move(alts);
        skip_space(false);
        if (!at_end() && peek() != '\n') {
            if (peek() == ')') fail("unbalanced ')'");
            fail("unexpected '" + std::string(1, peek()) + "'");
        }
    }

    // depth 0: a rule's body (a newline ends it unless the next line goes on
    // with '|'); > 0: inside parentheses (newlines are spaces).
    std::vector<std::vector<Elem>> parse_alternatives(uint32_t depth) {
        std::vector<std::vector<Elem>> alts;
        alts.push_back(parse_sequence(depth));
        for (;;) {
            if (depth == 0) {
                // A continuation line that starts with '|' (no new rule can start with it).
                size_t save = pos_;
                skip_space(true);
                if (peek() != '|') {
                    pos_ = save;
                    break;
                }
            }
            if (peek() != '|') break;
            ++pos_;
            skip_space(true);
            alts.push_back(parse_sequence(depth));
        }
        return alts;
    }

    std::vector<Elem> parse_sequence(uint32_t depth) {
        std::vector<Elem> seq;
        size_t last = SIZE_MAX;   // where the last repeatable item starts in seq
        for (;;) {
            const char c = peek();
            const size_t item_at = pos_;
            if (at_end()) break;
            if (c == '"') {
                last = seq.size();
                ++pos_;
                for (;;) {
                    if (at_end()) fail_at(item_at, "unterminated string literal");
                    if (peek() == '"') break;
                    seq.push_back({Op::Char, class_elem_for(parse_char())});
                    count_elements(1);
                }
                ++pos_;
            } else if (c == '[') {
                last = seq.size();
                seq.push_back({Op::Char, parse_class()});
                count_elements(1);
            } else if (c == '.') {
                ++pos_;
                last = seq.size();
                if (any_class_ == kNoRule) {
                    any_class_ = static_cast<uint32_t>(classes_.size());
                    classes_.push_back(make_class({{0, kMaxCodePoint}}, false));
                }
                seq.push_back({Op::Char, any_class_});
                count_elements(1);
            } else if (is_name_char(c)) {
                // A name followed by '::=' starts the next rule: a missing newline.
                std::string name = parse_name();
                size_t save = pos_;
                skip_space(false);
                if (src_.substr(pos_, 3) == "::=") fail_at(item_at, "expected a newline before rule '" + name + "'");
                pos_ = save;
                last = seq.size();
                seq.push_back({Op::Ref, ref_rule(name, item_at)});
                count_elements(1);
            } else if (c == '(') {
                if (depth + 1 > kMaxNesting)
                    fail("parentheses nested over " + std::to_string(kMaxNesting) + " deep");
                ++pos_;
                skip_space(true);
                auto alts = parse_alternatives(depth + 1);
                if (peek() != ')') fail_at(item_at, "expected ')' to close this '('");
                ++pos_;
                last = seq.size();
                seq.push_back({Op::Ref, new_rule(std::move(alts))});
                count_elements(1);
            } else if (c == '*' || c == '+' || c == '?' || c == '{') {
                if (last == SIZE_MAX) fail("'" + std::string(1, c) + "' with nothing before it to repeat");
                uint32_t lo = 0, hi = 0;
                bool unbounded = false;
                ++pos_;
                if (c == '*') unbounded = true;
                else if (c == '+') lo = 1, unbounded = true;
                else if (c == '?') hi = 1;
                else parse_bounds(item_at, lo, hi, unbounded);
                std::vector<Elem> item(seq.begin() + static_cast<ptrdiff_t>(last), seq.end());
                seq.resize(last);
                repeat(std::move(item), lo, hi, unbounded, seq);
            } else {
                break;
            }
            skip_space(depth > 0);
        }
        return seq;
    }

    // {m} {m,} {m,n}; pos_ is past '{'.
    void parse_bounds(size_t at, uint32_t& lo, uint32_t& hi, bool& unbounded) {
        auto number = [&]() -> uint32_t {
            skip_space(false);
            size_t start = pos_;
            while (peek() >= '0' && peek() <= '9') ++pos_;
            if (pos_ == start) fail("expected a number in the repetition bounds");
            if (pos_ - start > 6) fail_at(at, "repetition bound over the limit of " + std::to_string(kMaxRepeat));
            uint32_t v = 0;
            std::from_chars(src_.data() + start, src_.data() + pos_, v);
            if (v > kMaxRepeat)
                fail_at(at, "repetition bound " + std::to_string(v) + " is over the limit of " + std::to_string(kMaxRepeat));
            skip_space(false);
            return v;
        };
        lo = number();
        if (peek() == '}') {
            hi = lo;
        } else if (peek() == ',') {
            ++pos_;
            skip_space(false);
            if (peek() == '}') unbounded = true;
            else hi = number();
        } else {
            fail("expected ',' or '}' in the repetition bounds");
        }
        if (peek() != '}') fail("expected '}' to close the repetition bounds");
        ++pos_;
        if (!unbounded && hi < lo)
            fail_at(at, "bad repetition bounds {" + std::to_string(lo) + "," + std::to_string(hi) +
                            "}: the minimum is above the maximum");
    }

    // Appends `item` repeated lo..hi times (or lo.. with `unbounded`) to `out`.
    void repeat(std::vector<Elem> item, uint32_t lo, uint32_t hi, bool unbounded, std::vector<Elem>& out) {
        count_elements(0);
        n_elems_ -= item.size();   // the item moves from the sequence into the copies below
        if (item.size() > 1) item = {{Op::Ref, new_rule({item})}};
        if (item.empty()) return;  // "" repeated is ""
        const uint64_t tail = unbounded ? 0 : uint64_t(hi - lo) * 4;
        count_elements(uint64_t(lo) + tail + 1);
        for (uint32_t i = 0; i < lo; ++i) out.push_back(item[0]);
        if (unbounded) {
            // R ::= x R | ""
            const auto r = static_cast<uint32_t>(rules_.size());
            new_rule({{item[0], {Op::Ref, r}}, {}}, true);
            out.push_back({Op::Ref, r});
        } else if (hi > lo) {
            // R1 ::= x | "";  Rk ::= x R(k-1) | ""
            const uint32_t chain = n_chains_++;
            uint32_t prev = new_rule({{item[0]}, {}});
            for (uint32_t k = 1;; ++k) {
                rules_[prev].chain = chain;
                rules_[prev].chain_k = k;
                if (k == hi - lo) break;
                prev = new_rule({{item[0], {Op::Ref, prev}}, {}});
            }
            out.push_back({Op::Ref, prev});
        }
    }

    uint32_t parse_class() {
        const size_t start = pos_;
        ++pos_;
        bool negate = false;
        if (peek() == '^') negate = true, ++pos_;
        std::vector<std::pair<uint32_t, uint32_t>> r;
        for (;;) {
            if (at_end()) fail_at(start, "unterminated character class");
            if (peek() == ']') break;
            const size_t item_at = pos_;
            uint32_t lo = parse_char(true), hi = lo;
            if (peek() == '-' && peek(1) != ']' && pos_ + 1 < src_.size()) {
                ++pos_;
                hi = parse_char(true);
                if (hi < lo) fail_at(item_at, "bad range in character class: '" +
                                                  std::string(src_.substr(item_at, pos_ - item_at)) +
                                                  "' (the end is below the start)");
            }
            r.emplace_back(lo, hi);
        }
        ++pos_;
        classes_.push_back(make_class(std::move(r), negate));
        return static_cast<uint32_t>(classes_.size() - 1);
    }

    // -- Checks --

    // Left recursion: a rule that can reach itself before consuming input.
    // The one cycle allowed is a repetition rule's own tail call
    // (R ::= x R | "" with x able to match ""): it never grows a stack, and
    // the recognizer's deduplication ends it.
    void check_left_recursion() {
        const size_t n = rules_.size();
        // Nullable rules, by counting per alternative the elements not yet known nullable.
        std::vector<char> nullable(n, 0);
        std::vector<std::vector<std::pair<uint32_t, uint32_t>>> users(n);   // rule -> (rule, alt) uses
        std::vector<std::vector<uint32_t>> pending(n);
        std::vector<uint32_t> work;
        for (uint32_t r = 0; r < n; ++r) {
            pending[r].resize(rules_[r].alts.size());
            for (uint32_t a = 0; a < rules_[r].alts.size(); ++a) {
                uint32_t left = 0;
                for (const Elem& e : rules_[r].alts[a]) {
                    if (e.op == Op::Char) left = UINT32_MAX / 2;   // never nullable
                    else users[e.arg].emplace_back(r, a), ++left;
                }
                pending[r][a] = left;
                if (left == 0 && !nullable[r]) nullable[r] = 1, work.push_back(r);
            }
        }
        while (!work.empty()) {
            uint32_t s = work.back();
            work.pop_back();
            for (auto [r, a] : users[s])
                if (--pending[r][a] == 0 && !nullable[r]) nullable[r] = 1, work.push_back(r);
        }
        // Edges r -> s: s can be called by r before anything is consumed.
        std::vector<std::vector<uint32_t>> edges(n);
        for (uint32_t r = 0; r < n; ++r)
            for (const auto& alt : rules_[r].alts)
                for (size_t i = 0; i < alt.size(); ++i) {
                    if (alt[i].op == Op::Char) break;
                    const uint32_t s = alt[i].arg;
                    const bool tail_self = s == r && i + 1 == alt.size() && rules_[r].repetition;
                    if (!tail_self) edges[r].push_back(s);
                    if (!nullable[s]) break;
                }
        // Iterative DFS; a grey target closes a cycle.
        std::vector<uint8_t> color(n, 0);
        std::vector<std::pair<uint32_t, size_t>> dfs;
        for (uint32_t start = 0; start < n; ++start) {
            if (color[start]) continue;
            dfs.emplace_back(start, 0);
            color[start] = 1;
            while (!dfs.empty()) {
                auto& [r, next] = dfs.back();
                if (next == edges[r].size()) {
                    color[r] = 2;
                    dfs.pop_back();
                    continue;
                }
                const uint32_t s = edges[r][next++];
                if (color[s] == 1) report_cycle(dfs, s);
                if (color[s] == 0) {
                    color[s] = 1;
                    dfs.emplace_back(s, 0);
                }
            }
        }
    }
    [[noreturn]] void report_cycle(const std::vector<std::pair<uint32_t, size_t>>& dfs, uint32_t s) const {
        size_t i = dfs.size();
        while (i > 0 && dfs[i - 1].first != s) --i;
        std::vector<uint32_t> cycle;
        for (size_t k = i - 1; k < dfs.size(); ++k) cycle.push_back(dfs[k].first);
        // Name a rule the user wrote when the cycle has one.
        std::string path, named;
        for (uint32_t r : cycle) {
            const Rule& rule = rules_[r];
            const std::string shown = rule.parent.empty() ? rule.name : "(part of " + rule.parent + ")";
            if (named.empty() && rule.parent.empty()) named = rule.name;
            path += shown + " -> ";
        }
        path += rules_[cycle[0]].parent.empty() ? rules_[cycle[0]].name : "(part of " + rules_[cycle[0]].parent + ")";
        if (named.empty())
            throw GrammarError("grammar: left recursion through a group or repetition in rule '" +
                               rules_[cycle[0]].parent + "' (" + path + ")");
        throw GrammarError("grammar: left recursion through '" + named + "' (" + path + ")");
    }

    std::shared_ptr<Grammar> link(uint32_t root);

    std::string_view src_;
    size_t pos_ = 0;
    std::vector<Rule> rules_;
    std::unordered_map<std::string, uint32_t> names_;
    std::vector<Grammar::Class> classes_;
    std::unordered_map<uint32_t, uint32_t> char_class_;
    uint32_t any_class_ = kNoRule;
    uint64_t n_elems_ = 0;
    std::string cur_rule_;
    uint32_t generated_ = 0;
    uint32_t n_chains_ = 0;
};

namespace {

std::atomic<uint64_t> g_serial{0};

}  // namespace


std::shared_ptr<Grammar> Compiler::link(uint32_t root) {
    auto g = std::shared_ptr<Grammar>(new Grammar());
    g->classes_ = std::move(classes_);
    g->rule_alts_.push_back(0);
    for (const Rule& r : rules_) {
        g->rule_names_.push_back(r.name);
        for (const auto& alt : r.alts) {
            g->alt_begin_.push_back(static_cast<uint32_t>(g->elems_.size()));
            g->elems_.insert(g->elems_.end(), alt.begin(), alt.end());
            g->elems_.push_back({Op::End, 0});
        }
        g->rule_alts_.push_back(static_cast<uint32_t>(g->alt_begin_.size()));
    }
    g->root_ = root;
    g->serial_ = ++g_serial;
    g->chains_.resize(n_chains_);
    for (uint32_t r = 0; r < rules_.size(); ++r) {
        const Rule& rule = rules_[r];
        if (rule.chain == Grammar::kNoChain) continue;
        auto& c = g->chains_[rule.chain];
        if (c.size() < rule.chain_k) c.resize(rule.chain_k);
        c[rule.chain_k - 1] = r;
    }
    if (n_chains_ > 0) {
        g->elem_chain_.assign(g->elems_.size(), {Grammar::kNoChain, 0});
        for (uint32_t r = 0; r < rules_.size(); ++r) {
            if (rules_[r].chain == Grammar::kNoChain) continue;
            const uint32_t e0 = g->alt_begin_[g->rule_alts_[r]];
            const uint32_t e1 = g->rule_alts_[r + 1] < g->alt_begin_.size() ? g->alt_begin_[g->rule_alts_[r + 1]]
                                                                          : static_cast<uint32_t>(g->elems_.size());
            for (uint32_t e = e0; e < e1; ++e) g->elem_chain_[e] = {rules_[r].chain, rules_[r].chain_k};
        }
    }
    if (!Matcher::start(*g, root, g->initial_))
        throw GrammarError("grammar: rule '" + rules_[root].name + "' expands to over " + std::to_string(kMaxStacks) +
                           " alternatives before the first character");
    return g;
}

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf, std::string_view root) {
    return Compiler(gbnf).run(root);
}

std::string literal(std::string_view bytes) {
    static const char* hex = "0123456789ABCDEF";
    std::string out = "\"";
    for (unsigned char c : bytes) {
        if (c == '"') out += "\\\"";
        else if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7F) out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
        else out += char(c);
    }
    return out + "\"";
}

}  // namespace ptxlm::grammar
