// JSON Schema to GBNF: the grammar (engine/grammar.h) of the JSON texts a
// schema accepts, for structured outputs (OpenAI's response_format
// {"type": "json_schema"}, the openai client's .parse() with Pydantic models).
//
// The grammar is sound, not complete: every text it accepts is valid under
// the schema, but it writes each value one way, so some valid texts are left
// out. What it writes:
//   - Whitespace: at most one run between two tokens, either one space or a
//     newline followed by up to 40 spaces or tabs (json.dumps' default, its
//     compact form and indent=2 up to 20 levels all fit). None before or after
//     the root value. A model cannot loop on whitespace.
//   - Objects: the schema's properties in the schema's order; required ones
//     always, optional ones may be left out. Extra keys come after the listed
//     ones and are allowed only when additionalProperties is true or a schema,
//     or when it is absent and the object lists no properties. An extra key is
//     any string: it is not checked against the listed names.
//   - Integers without a fraction or exponent (1, never 1.0 or 1e0) and never
//     -0; bounded numbers without an exponent.
//   - Strings with a pattern or a format: each character in one spelling
//     (raw, or \" \\ \n \t \r \b \f, or \u00XX for other control characters).
//     Unconstrained strings take any JSON escape. minLength/maxLength count
//     \uXXXX escapes as one character each (a surrogate pair counts two).
//   - enum/const values as given (key order, number spelling), with
//     whitespace between their tokens.
//   - Without "type", the types the other keywords speak of (properties:
//     object, items: array, ...), or any value when none does.
//   - oneOf as anyOf: a value matching two branches is not refused.
// Anything it cannot honour is a SchemaError, never silently ignored; the
// keywords it supports are listed in json_schema.cpp.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace ptxlm {

// A schema the converter cannot honour: names the keyword and where
// ("unsupported JSON Schema keyword 'patternProperties' at /properties/tags";
// "'minimum' must be a number at /properties/age"). Paths are JSON pointers
// into the schema ("" is the root, shown as "/").
class SchemaError : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

// The grammar (GBNF text, root rule "root") of the JSON texts valid under
// `schema`. Deterministic: the same schema gives the same text.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);

}  // namespace ptxlm
