// GBNF building blocks of the JSON Schema converter (internal to
// engine/json_schema*.cpp): string literals, repetition and alternatives as
// GBNF text, the digit-by-digit rules for bounded integers and reals, the
// limits every part of the converter shares, and the one way it reports a
// schema it cannot honour. None of it knows about schemas: json_schema.cpp
// walks the schema and json_schema_pattern.cpp translates 'pattern', both
// writing their rules with these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar.h"

namespace ptxlm::json_schema_detail {

// Why these limits: the grammar engine expands {m,n} into rules, so counts
// are capped where a schema could make it build millions; nesting is capped
// so a hostile schema cannot exhaust the stack.
inline constexpr int64_t kMaxRepeat = 10000;
inline constexpr int kMaxDepth = 100;

// Throws SchemaError("<what> at <path>"); the root path "" is shown as "/".
[[noreturn]] void fail(const std::string& what, const std::string& path);

// A GBNF string literal matching exactly `bytes`.
inline std::string lit(std::string_view bytes) { return grammar::literal(bytes); }

// `x` repeated lo..hi times (hi < 0: unbounded); x must be an atom.
std::string repeat(const std::string& x, int64_t lo, int64_t hi);

// One alternative as it is, several as a parenthesized group.
std::string alternatives(const std::vector<std::string>& alts);

// Integers in [lo, hi] (absent: unbounded), never "-0".
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

// A whole bound of a "number", inclusive or exclusive.
struct Bound {
    int64_t value;
    bool exclusive;
};

// Reals between whole bounds (absent: unbounded), without an exponent, as
// alternatives; empty when none fits.
std::vector<std::string> real_range(std::optional<Bound> lo, std::optional<Bound> hi);

}  // namespace ptxlm::json_schema_detail
