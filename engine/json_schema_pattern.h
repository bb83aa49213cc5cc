// The JSON Schema 'pattern' keyword to GBNF (internal to engine/json_schema*.cpp):
// json_schema.cpp calls pattern_to_gbnf() for a string schema with a pattern;
// the regex subset it accepts is described in json_schema_pattern.cpp.
#pragma once

#include <string>

namespace ptxlm::json_schema_detail {

// The GBNF of the JSON string bodies (the text between the quotes) that the
// ECMA-262 regex `pattern` matches, anywhere in the string unless anchored.
// `any_char` is the rule for the unconstrained characters around an
// unanchored match. Throws SchemaError naming `path` (the pattern's JSON
// pointer) for a construct it does not support.
std::string pattern_to_gbnf(const std::string& pattern, const std::string& path, const std::string& any_char);

}  // namespace ptxlm::json_schema_detail
