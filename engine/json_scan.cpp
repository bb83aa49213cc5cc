// The tool-call parsers' JSON scanner (see json_scan.h): a recursive descent
// over RFC 8259 that returns Incomplete only where the text runs out, never
// guessing what later bytes would say, and the readers that walk a value it
// has already accepted (so they need no error handling of their own). Only
// string tokens are decoded (by nlohmann); everything else keeps the model's
// bytes as written.
#include "engine/json_scan.h"

#include <nlohmann/json.hpp>

#include <utility>

namespace ptxlm::tools::detail {
namespace {

// Deeper JSON is refused (as text), so that the recursive scanner's stack stays small.
constexpr int kMaxJsonDepth = 256;

Scan scan_value(std::string_view s, size_t& p, int depth);

Scan scan_literal(std::string_view s, size_t& p, std::string_view lit) {
    for (char c : lit) {
        if (p == s.size()) return Scan::Incomplete;
        if (s[p] != c) return Scan::Invalid;
        ++p;
    }
    return Scan::Ok;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A number never ends at the end of the text: more digits could follow.
Scan scan_number(std::string_view s, size_t& p) {
    const size_t n = s.size();
    if (s[p] == '-') ++p;
    if (p == n) return Scan::Incomplete;
    if (s[p] == '0') {
        ++p;
    } else if (s[p] >= '1' && s[p] <= '9') {
        while (p < n && is_digit(s[p])) ++p;
    } else {
        return Scan::Invalid;
    }
    if (p == n) return Scan::Incomplete;
    if (s[p] == '.') {
        if (++p == n) return Scan::Incomplete;
        if (!is_digit(s[p])) return Scan::Invalid;
        while (p < n && is_digit(s[p])) ++p;
        if (p == n) return Scan::Incomplete;
    }
    if (s[p] == 'e' || s[p] == 'E') {
        if (++p == n) return Scan::Incomplete;
        if (s[p] == '+' || s[p] == '-') ++p;
        if (p == n) return Scan::Incomplete;
        if (!is_digit(s[p])) return Scan::Invalid;
        while (p < n && is_digit(s[p])) ++p;
        if (p == n) return Scan::Incomplete;
    }
    return Scan::Ok;
}

// Four hex digits of a \u escape.
Scan scan_hex4(std::string_view s, size_t& p, unsigned& cp) {
    cp = 0;
    for (int i = 0; i < 4; ++i, ++p) {
        if (p == s.size()) return Scan::Incomplete;
        char c = s[p];
        unsigned d = is_digit(c) ? unsigned(c - '0') : (c >= 'a' && c <= 'f') ? unsigned(c - 'a' + 10)
                   : (c >= 'A' && c <= 'F') ? unsigned(c - 'A' + 10) : 16u;
        if (d == 16) return Scan::Invalid;
        cp = cp * 16 + d;
    }
    return Scan::Ok;
}

Scan scan_string(std::string_view s, size_t& p) {
    const size_t n = s.size();
    ++p;   // the opening quote
    while (true) {
        if (p == n) return Scan::Incomplete;
        const auto c = static_cast<unsigned char>(s[p]);
        if (c == '"') {
            ++p;
            return Scan::Ok;
        }
        if (c < 0x20) return Scan::Invalid;
        if (c == '\\') {
            if (++p == n) return Scan::Incomplete;
            const char e = s[p];
            if (std::string_view("\"\\/bfnrt").find(e) != std::string_view::npos) {
                ++p;
                continue;
            }
            if (e != 'u') return Scan::Invalid;
            ++p;
            unsigned cp = 0;
            if (Scan r = scan_hex4(s, p, cp); r != Scan::Ok) return r;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return Scan::Invalid;   // a lone low surrogate
            if (cp >= 0xD800 && cp <= 0xDBFF) {                      // needs its low half
                if (Scan r = scan_literal(s, p, "\\u"); r != Scan::Ok) return r;
                if (Scan r = scan_hex4(s, p, cp); r != Scan::Ok) return r;
                if (cp < 0xDC00 || cp > 0xDFFF) return Scan::Invalid;
            }
            continue;
        }
        if (c < 0x80) {
            ++p;
            continue;
        }
        // UTF-8: the range of the second byte depends on the first (no overlongs, no surrogates).
        int more = 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c == 0xE0) more = 2, lo = 0xA0;
        else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) more = 2;
        else if (c == 0xED) more = 2, hi = 0x9F;
        else if (c == 0xF0) more = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) more = 3;
        else if (c == 0xF4) more = 3, hi = 0x8F;
        else return Scan::Invalid;
        ++p;
        for (int k = 0; k < more; ++k, ++p) {
            if (p == n) return Scan::Incomplete;
            const auto b = static_cast<unsigned char>(s[p]);
            if (b < (k == 0 ? lo : 0x80u) || b > (k == 0 ? hi : 0xBFu)) return Scan::Invalid;
        }
    }
}

// The members of an object or the elements of an array, after the opening bracket.
Scan scan_container(std::string_view s, size_t& p, int depth, bool object) {
    const char close = object ? '}' : ']';
    const size_t n = s.size();
    ++p;
    p = skip_ws(s, p);
    if (p == n) return Scan::Incomplete;
    if (s[p] == close) {
        ++p;
        return Scan::Ok;
    }
    while (true) {
        if (object) {
            if (s[p] != '"') return Scan::Invalid;
            if (Scan r = scan_string(s, p); r != Scan::Ok) return r;
            p = skip_ws(s, p);
            if (p == n) return Scan::Incomplete;
            if (s[p] != ':') return Scan::Invalid;
            p = skip_ws(s, p + 1);
        }
        if (Scan r = scan_value(s, p, depth + 1); r != Scan::Ok) return r;
        p = skip_ws(s, p);
        if (p == n) return Scan::Incomplete;
        if (s[p] == close) {
            ++p;
            return Scan::Ok;
        }
        if (s[p] != ',') return Scan::Invalid;
        p = skip_ws(s, p + 1);
        if (p == n) return Scan::Incomplete;
    }
}

Scan scan_value(std::string_view s, size_t& p, int depth) {
    if (depth > kMaxJsonDepth) return Scan::Invalid;
    if (p == s.size()) return Scan::Incomplete;
    switch (s[p]) {
        case '{': return scan_container(s, p, depth, true);
        case '[': return scan_container(s, p, depth, false);
        case '"': return scan_string(s, p);
        case 't': return scan_literal(s, p, "true");
        case 'f': return scan_literal(s, p, "false");
        case 'n': return scan_literal(s, p, "null");
        default: return s[p] == '-' || is_digit(s[p]) ? scan_number(s, p) : Scan::Invalid;
    }
}

}  // namespace

Scanned scan_json(std::string_view s, size_t p) {
    Scan r = scan_value(s, p, 0);
    return {r, p};
}

// --- Reading a scanned (valid) value's parts.
std::optional<std::string> decode_string(std::string_view token) {
    try {
        auto j = nlohmann::json::parse(token);
        if (j.is_string()) return j.get<std::string>();
    } catch (const nlohmann::json::exception&) {
    }
    return std::nullopt;
}

// The members of the valid object at s[b].
std::vector<Member> members_of(std::string_view s, size_t b) {
    std::vector<Member> out;
    size_t p = skip_ws(s, b + 1);
    if (s[p] == '}') return out;
    while (true) {
        size_t kb = p;
        scan_string(s, p);
        Member m{decode_string(s.substr(kb, p - kb)).value_or(""), {0, 0}};
        p = skip_ws(s, skip_ws(s, p) + 1);   // past ':'
        m.value.b = p;
        scan_value(s, p, 1);
        m.value.e = p;
        out.push_back(std::move(m));
        p = skip_ws(s, p);
        if (s[p] != ',') return out;
        p = skip_ws(s, p + 1);
    }
}
// The elements of the valid array at s[b].
std::vector<Span> elements_of(std::string_view s, size_t b) {
    std::vector<Span> out;
    size_t p = skip_ws(s, b + 1);
    if (s[p] == ']') return out;
    while (true) {
        Span e{p, 0};
        scan_value(s, p, 1);
        e.e = p;
        out.push_back(e);
        p = skip_ws(s, p);
        if (s[p] != ',') return out;
        p = skip_ws(s, p + 1);
    }
}

}  // namespace ptxlm::tools::detail
