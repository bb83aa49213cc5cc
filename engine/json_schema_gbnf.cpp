// GBNF building blocks of the JSON Schema converter (see json_schema_gbnf.h):
// literals, repetition, alternatives, and the rules for bounded integers and
// reals. A bounded number is written digit by digit: the decimal strings of
// each length between the bounds are split where the bounds' digits differ,
// so the grammar accepts exactly the numbers in range.
#include "engine/json_schema_gbnf.h"

#include "engine/json_schema.h"

namespace ptxlm::json_schema_detail {

void fail(const std::string& what, const std::string& path) {
    throw SchemaError(what + " at " + (path.empty() ? std::string("/") : path));
}

// A GBNF string literal matching exactly `bytes` (UTF-8 is written raw).
// `x` repeated lo..hi times (hi < 0: unbounded); x must be an atom.
std::string repeat(const std::string& x, int64_t lo, int64_t hi) {
    if (hi == 0) return "\"\"";
    if (lo == 1 && hi == 1) return x;
    if (lo == 0 && hi < 0) return x + "*";
    if (lo == 1 && hi < 0) return x + "+";
    if (lo == 0 && hi == 1) return x + "?";
    if (hi < 0) return x + "{" + std::to_string(lo) + ",}";
    if (lo == hi) return x + "{" + std::to_string(lo) + "}";
    return x + "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
}

std::string alternatives(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
    return out + " )";
}

// ---- Integer and real ranges, digit by digit -------------------------------

namespace {

std::string digit_class(char a, char b) {
    if (a == b) return lit(std::string(1, a));
    if (a == '0' && b == '9') return "[0-9]";
    return std::string("[") + a + "-" + b + "]";
}

// The decimal strings of one length n >= 1 in [lo, hi], lo <= hi.
std::string same_length_range(std::string_view lo, std::string_view hi) {
    const size_t n = lo.size();
    if (lo == hi) return lit(lo);
    if (lo[0] == hi[0]) return lit(lo.substr(0, 1)) + " " + same_length_range(lo.substr(1), hi.substr(1));
    const std::string_view lo_rest = lo.substr(1), hi_rest = hi.substr(1);
    const bool lo_rest_min = lo_rest.find_first_not_of('0') == std::string_view::npos;
    const bool hi_rest_max = hi_rest.find_first_not_of('9') == std::string_view::npos;
    // std::string(" ") rather than " ": GCC 12 warns falsely (-Wrestrict) on a literal + a temporary here.
    const std::string any_rest = n > 1 ? std::string(" ") + repeat("[0-9]", int64_t(n - 1), int64_t(n - 1)) : "";
    std::vector<std::string> alts;
    if (!lo_rest_min) alts.push_back(lit(lo.substr(0, 1)) + " " + same_length_range(lo_rest, std::string(n - 1, '9')));
    const char a = char(lo[0] + (lo_rest_min ? 0 : 1)), b = char(hi[0] - (hi_rest_max ? 0 : 1));
    if (a <= b) alts.push_back(digit_class(a, b) + any_rest);
    if (!hi_rest_max) alts.push_back(lit(hi.substr(0, 1)) + " " + same_length_range(std::string(n - 1, '0'), hi_rest));
    return alternatives(alts);
}

uint64_t pow10(size_t n) {
    uint64_t p = 1;
    while (n--) p *= 10;
    return p;
}

// Decimal integers (no sign, no leading zeros) in [a, b]; b absent: [a, inf).
std::string magnitude_range(uint64_t a, std::optional<uint64_t> b) {
    const size_t la = std::to_string(a).size();
    const size_t lb = b ? std::to_string(*b).size() : la;
    std::vector<std::string> alts;
    for (size_t len = la; len <= lb; ++len) {
        const uint64_t lo = len == la ? a : pow10(len - 1);
        const uint64_t hi = (b && len == lb) ? *b : pow10(len) - 1;  // len <= 19 here: no overflow
        alts.push_back(same_length_range(std::to_string(lo), std::to_string(hi)));
    }
    if (!b) alts.push_back("[1-9] " + repeat("[0-9]", int64_t(la), -1));
    return alternatives(alts);
}

uint64_t magnitude(int64_t v) { return v < 0 ? uint64_t(-(v + 1)) + 1 : uint64_t(v); }

// Non-negative reals m with a < m < b (or <=, per the flags) and whole a, b,
// written as integer part and optional fraction; empty when none fits.
std::vector<std::string> real_magnitude(uint64_t a, bool a_excl, std::optional<uint64_t> b, bool b_excl) {
    const std::string any_frac = " ( \".\" [0-9]+ )?", zero_frac = " ( \".\" \"0\"+ )?",
                      nonzero_frac = " \".\" [0-9]* [1-9] [0-9]*";
    std::vector<std::string> alts;
    if (b && a == *b) {
        if (!a_excl && !b_excl) alts.push_back(magnitude_range(a, a) + zero_frac);
        return alts;
    }
    const uint64_t start = a_excl ? a + 1 : a;
    if (!b || start + 1 <= *b) alts.push_back(magnitude_range(start, b ? std::optional<uint64_t>(*b - 1) : b) + any_frac);
    if (a_excl) alts.push_back(magnitude_range(a, a) + nonzero_frac);
    if (b && !b_excl) alts.push_back(magnitude_range(*b, *b) + zero_frac);
    return alts;
}

}  // namespace

// Integers in [lo, hi] (absent: unbounded), never "-0".
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    std::vector<std::string> alts;
    if (!lo || *lo < 0) {  // negative part: magnitudes [max(1, -hi), -lo]
        const uint64_t a = (hi && *hi < 0) ? magnitude(*hi) : 1;
        alts.push_back("\"-\" " + magnitude_range(a, lo ? std::optional<uint64_t>(magnitude(*lo)) : std::nullopt));
    }
    if (!hi || *hi >= 0) {
        const uint64_t a = (lo && *lo > 0) ? uint64_t(*lo) : 0;
        alts.push_back(magnitude_range(a, hi ? std::optional<uint64_t>(uint64_t(*hi)) : std::nullopt));
    }
    return alternatives(alts);
}

// Reals between whole bounds, without an exponent; empty when none fits.
std::vector<std::string> real_range(std::optional<Bound> lo, std::optional<Bound> hi) {
    std::vector<std::string> alts;
    if (!lo || lo->value < 0) {  // x < 0: magnitudes in (-hi or 0, -lo]
        const bool hi_neg = hi && hi->value < 0;
        auto parts = real_magnitude(hi_neg ? magnitude(hi->value) : 0, hi_neg ? hi->exclusive : true,
                                    lo ? std::optional<uint64_t>(magnitude(lo->value)) : std::nullopt,
                                    lo && lo->exclusive);
        for (auto& p : parts) alts.push_back("\"-\" " + p);
    }
    if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
        const bool lo_pos = lo && lo->value >= 0;
        auto parts = real_magnitude(lo_pos ? uint64_t(lo->value) : 0, lo_pos && lo->exclusive,
                                    hi ? std::optional<uint64_t>(uint64_t(hi->value)) : std::nullopt,
                                    hi && hi->exclusive);
        alts.insert(alts.end(), parts.begin(), parts.end());
    }
    return alts;
}

}  // namespace ptxlm::json_schema_detail
