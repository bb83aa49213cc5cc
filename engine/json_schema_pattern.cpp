// JSON Schema 'pattern' to GBNF (see json_schema_pattern.h): a translator
// from the practical subset of ECMA-262 regular expressions to grammar rules
// over the JSON spelling of a string's characters. The regex is parsed by
// recursive descent (RegexToGbnf); each character, class or escape becomes a
// set of code points (CharSet), written as the JSON spellings of its
// characters, one spelling each (see json_schema.h). A construct outside the
// subset is a SchemaError that names it, never a looser grammar.
#include "engine/json_schema_pattern.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "engine/json_schema_gbnf.h"
#include "engine/utf8.h"

namespace ptxlm::json_schema_detail {
namespace {

// Code points as sorted, disjoint, non-adjacent closed ranges.
using CharSet = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

CharSet normalized(CharSet s) {
    std::sort(s.begin(), s.end());
    CharSet out;
    for (const auto& r : s) {
        if (!out.empty() && r.first <= out.back().second + 1) out.back().second = std::max(out.back().second, r.second);
        else out.push_back(r);
    }
    return out;
}

CharSet complement(const CharSet& s) {
    CharSet out;
    uint32_t next = 0;
    for (const auto& [a, b] : s) {
        if (a > next) out.push_back({next, a - 1});
        next = b + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    return out;
}

CharSet intersect(const CharSet& x, const CharSet& y) {
    CharSet out;
    for (const auto& [a, b] : x)
        for (const auto& [c, d] : y)
            if (std::max(a, c) <= std::min(b, d)) out.push_back({std::max(a, c), std::min(b, d)});
    return normalized(out);
}

bool contains(const CharSet& s, uint32_t c) {
    for (const auto& [a, b] : s)
        if (a <= c && c <= b) return true;
    return false;
}

// One code point inside a GBNF class.
std::string class_char(uint32_t c) {
    static const char* hex = "0123456789ABCDEF";
    if (c == '\\' || c == ']' || c == '[' || c == '^' || c == '-') return std::string("\\") + char(c);
    if (c < 0x20 || c == 0x7F) return std::string("\\x") + hex[c >> 4] + hex[c & 15];
    if (c < 0x80 || c > 0xFFFF) return utf8_encode(c);
    std::string o = "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) o += hex[(c >> shift) & 15];
    return o;
}

std::string class_ranges(const CharSet& s) {
    std::string o;
    for (const auto& [a, b] : s) o += a == b ? class_char(a) : class_char(a) + "-" + class_char(b);
    return o;
}

// The JSON spellings of the characters in `s`, one spelling each: raw where
// JSON allows, else \" \\ \b \f \n \r \t or \u00XX.
std::string charset_gbnf(const CharSet& s) {
    std::vector<std::string> alts;
    const CharSet raw = intersect(s, {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodePoint}});
    if (raw.size() == 1 && raw[0].first == raw[0].second) {
        alts.push_back(lit(utf8_encode(raw[0].first)));
    } else if (!raw.empty()) {
        if (raw.back().second == kMaxCodePoint)  // name what is left out: no high code points to write
            alts.push_back("[^\"\\\\\\x00-\\x1F" +
                           class_ranges(intersect(complement(raw), {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodePoint}})) + "]");
        else
            alts.push_back(std::string("[") + class_ranges(raw) + "]");  // not "[" + ...: GCC 12 warns falsely
    }
    if (contains(s, '"')) alts.push_back(lit("\\\""));
    if (contains(s, '\\')) alts.push_back(lit("\\\\"));
    static const std::pair<uint32_t, char> kShort[] = {{8, 'b'}, {12, 'f'}, {10, 'n'}, {13, 'r'}, {9, 't'}};
    for (const auto& [c, e] : kShort)
        if (contains(s, c)) alts.push_back(lit(std::string("\\") + e));
    std::string low[2];  // \u00XX for the other control characters, by the high digit X
    for (uint32_t c = 0; c < 0x20; ++c) {
        if (!contains(s, c) || c == 8 || c == 9 || c == 10 || c == 12 || c == 13) continue;
        const char d = "0123456789abcdef"[c & 15];
        low[c >> 4] += d;
        if (d >= 'a') low[c >> 4] += char(d - 'a' + 'A');
    }
    for (int h = 0; h < 2; ++h)
        if (!low[h].empty()) alts.push_back(lit(std::string("\\u00") + char('0' + h)) + " [" + low[h] + "]");
    if (alts.empty()) return "";
    return alternatives(alts);
}

// A regex (ECMA-262 syntax, the practical subset) to the GBNF of the JSON
// string bodies it matches, anywhere in the string unless anchored.
// Supported: literals, escapes \d \D \w \W \s \S \t \n \r \f \v \0 \xHH
// \uHHHH and escaped punctuation, classes [...] [^...] with ranges, '.',
// groups ( ) (?: ), '|', * + ? {m} {m,} {m,n} (lazy forms too), and ^ $ at the
// start and end of a top-level alternative. Refused by name: backreferences,
// lookaround, named groups, \b \B, \p, and anchors elsewhere.
class RegexToGbnf {
public:
    RegexToGbnf(std::string p, std::string path) : p_(std::move(p)), path_(std::move(path)) {}

    // `any_char` is the rule for unconstrained characters around an unanchored match.
    std::string convert(const std::string& any_char) {
        std::vector<std::string> alts;
        for (;;) {
            bool start = false, end = false;
            if (peek('^')) {
                ++i_;
                start = true;
            }
            std::string seq = sequence(true, end);
            std::string a = (start ? "" : any_char + "* ") + seq + (end ? "" : " " + any_char + "*");
            alts.push_back(a);
            if (i_ >= p_.size()) break;
            if (p_[i_] == ')') error("unbalanced ')'");
            ++i_;  // '|'
        }
        return alternatives(alts);
    }

private:
    std::string p_;
    std::string path_;
    size_t i_ = 0;
    int depth_ = 0;

    [[noreturn]] void error(const std::string& what) {
        fail("'pattern' " + what + " (at offset " + std::to_string(i_) + ") is unsupported", path_);
    }
    bool peek(char c) const { return i_ < p_.size() && p_[i_] == c; }

    std::string alternation() {
        std::vector<std::string> alts;
        for (;;) {
            bool end = false;
            alts.push_back(sequence(false, end));
            if (!peek('|')) break;
            ++i_;
        }
        return alternatives(alts);
    }

    // Atoms until '|', ')' or the end; `top`: a '$' may end it (sets `end`).
    std::string sequence(bool top, bool& end) {
        std::vector<std::string> items;
        while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
            if (p_[i_] == '$') {
                const bool last = i_ + 1 == p_.size() || p_[i_ + 1] == '|';
                if (!top || !last) error("anchor '$' not at the end");
                ++i_;
                end = true;
                break;
            }
            if (p_[i_] == '^') error("anchor '^' not at the start");
            std::string a = atom();
            items.push_back(quantified(a));
        }
        if (items.empty()) return "\"\"";
        // Adjacent plain literals merge into one ("x" "." "c" -> "x.c").
        auto plain = [](const std::string& x) {
            if (x.size() < 2 || x.front() != '"' || x.back() != '"') return false;
            for (size_t k = 1; k + 1 < x.size(); ++k) {
                if (x[k] == '\\') ++k;
                else if (x[k] == '"') return false;
            }
            return true;
        };
        std::vector<std::string> merged;
        for (auto& it : items) {
            if (!merged.empty() && plain(merged.back()) && plain(it)) merged.back() = merged.back().substr(0, merged.back().size() - 1) + it.substr(1);
            else merged.push_back(std::move(it));
        }
        items = std::move(merged);
        std::string out;
        for (const auto& it : items) out += (out.empty() ? "" : " ") + it;
        return items.size() == 1 ? out : "( " + out + " )";
    }

    std::optional<int64_t> number() {
        size_t j = i_;
        int64_t v = 0;
        while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9' && v <= kMaxRepeat) v = v * 10 + (p_[j++] - '0');
        if (j == i_) return std::nullopt;
        if (v > kMaxRepeat) error("count above " + std::to_string(kMaxRepeat));
        i_ = j;
        return v;
    }

    // {m}, {m,}, {m,n} at i_ (on '{'); nullopt (i_ unchanged) when it is a literal '{'.
    std::optional<std::pair<int64_t, int64_t>> braces() {
        const size_t save = i_;
        ++i_;
        auto m = number();
        if (!m) {
            i_ = save;
            return std::nullopt;
        }
        int64_t n = *m;
        if (peek(',')) {
            ++i_;
            auto hi = number();
            n = hi ? *hi : -1;
        }
        if (!peek('}')) {
            i_ = save;
            return std::nullopt;
        }
        ++i_;
        if (n >= 0 && n < *m) error("repetition {m,n} with n < m");
        return std::pair{*m, n};
    }

    std::string quantified(const std::string& a) {
        std::optional<std::pair<int64_t, int64_t>> q;
        if (peek('*')) q = std::pair<int64_t, int64_t>{0, -1};
        else if (peek('+')) q = std::pair<int64_t, int64_t>{1, -1};
        else if (peek('?')) q = std::pair<int64_t, int64_t>{0, 1};
        if (q) ++i_;
        else if (peek('{')) q = braces();
        if (!q) return a;
        if (peek('?')) ++i_;  // lazy: the same strings
        if (peek('*') || peek('+') || peek('?') || (peek('{') && braces())) error("repeated quantifier");
        return repeat(a, q->first, q->second);
    }

    uint32_t hex_digits(size_t n) {
        if (i_ + n > p_.size()) error("short \\x or \\u escape");
        uint32_t v = 0;
        for (size_t k = 0; k < n; ++k) {
            const char c = p_[i_ + k];
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) error("bad hex escape");
            v = v * 16 + uint32_t(d);
        }
        i_ += n;
        return v;
    }

    uint32_t code_point() {
        const unsigned char c = p_[i_];
        const int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
        if (n == 0 || i_ + n > p_.size()) error("invalid UTF-8");
        uint32_t v = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
        for (int k = 1; k < n; ++k) v = (v << 6) | (uint32_t(p_[i_ + k]) & 0x3F);
        i_ += n;
        return v;
    }

    // After a '\\': the set an escape stands for. `in_class`: \b is backspace.
    CharSet escape(bool in_class) {
        if (i_ >= p_.size()) error("trailing '\\'");
        const char c = p_[i_++];
        static const CharSet digit = {{'0', '9'}}, word = normalized({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
        static const CharSet space = normalized({{9, 13}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                                 {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                                 {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
        switch (c) {
        case 'd': return digit;
        case 'D': return complement(digit);
        case 'w': return word;
        case 'W': return complement(word);
        case 's': return space;
        case 'S': return complement(space);
        case 't': return {{9, 9}};
        case 'n': return {{10, 10}};
        case 'v': return {{11, 11}};
        case 'f': return {{12, 12}};
        case 'r': return {{13, 13}};
        case 'x': { const uint32_t v = hex_digits(2); return {{v, v}}; }
        case 'u': { const uint32_t v = hex_digits(4); return {{v, v}}; }
        case '0':
            if (peek('0') || (i_ < p_.size() && p_[i_] >= '1' && p_[i_] <= '9')) error("octal escape");
            return {{0, 0}};
        case 'b':
            if (in_class) return {{8, 8}};
            error("word boundary '\\b'");
        default: break;
        }
        --i_;
        if (c >= '1' && c <= '9') error("backreference '\\" + std::string(1, c) + "'");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) error("escape '\\" + std::string(1, c) + "'");
        const uint32_t v = code_point();
        return {{v, v}};
    }

    CharSet char_class() {  // after '['
        bool negate = false;
        if (peek('^')) {
            negate = true;
            ++i_;
        }
        if (peek(']')) error("empty class '[]'");
        CharSet set;
        while (!peek(']')) {
            if (i_ >= p_.size()) error("unterminated class '['");
            auto one = [&]() -> CharSet {
                if (peek('\\')) {
                    ++i_;
                    return escape(true);
                }
                if (peek('[') && i_ + 1 < p_.size() && p_[i_ + 1] == ':') error("POSIX class '[:'");
                const uint32_t v = code_point();
                return {{v, v}};
            };
            CharSet lo = one();
            if (peek('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
                ++i_;
                CharSet hi = one();
                if (lo.size() != 1 || hi.size() != 1 || lo[0].first != lo[0].second || hi[0].first != hi[0].second)
                    error("class range with a class escape");
                if (hi[0].first < lo[0].first) error("class range out of order");
                set.push_back({lo[0].first, hi[0].first});
            } else {
                set.insert(set.end(), lo.begin(), lo.end());
            }
        }
        ++i_;
        set = normalized(set);
        return negate ? complement(set) : set;
    }

    std::string atom() {
        const char c = p_[i_];
        if (c == '(') {
            ++i_;
            if (peek('?')) {
                if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') i_ += 2;
                else error("group '(?' (lookaround or named group)");
            }
            if (++depth_ > kMaxDepth) error("nesting deeper than " + std::to_string(kMaxDepth));
            std::string inner = alternation();
            --depth_;
            if (!peek(')')) error("unbalanced '('");
            ++i_;
            // A quantifier may follow: the group must stay one atom ("a"* is not).
            return inner.front() == '(' && inner.back() == ')' ? inner : "( " + inner + " )";
        }
        if (c == '*' || c == '+' || c == '?') error("nothing to repeat before '" + std::string(1, c) + "'");
        CharSet set;
        if (c == '[') {
            ++i_;
            set = char_class();
        } else if (c == '.') {
            ++i_;
            set = complement({{'\n', '\n'}});
        } else if (c == '\\') {
            ++i_;
            set = escape(false);
        } else {
            const uint32_t v = code_point();
            set = {{v, v}};
        }
        std::string g = charset_gbnf(set);
        if (g.empty()) error("class that matches nothing");
        return g;
    }
};

}  // namespace

std::string pattern_to_gbnf(const std::string& pattern, const std::string& path, const std::string& any_char) {
    RegexToGbnf re(pattern, path);
    return re.convert(any_char);
}

}  // namespace ptxlm::json_schema_detail
