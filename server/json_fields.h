// The small checks every request parser of the server shares (request.cpp,
// anthropic.cpp, utility.cpp): a 400 ApiError naming the field, the wrong-
// type message in OpenAI's words, and "null counts as absent".
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/request.h"

namespace ptxlm::server::fields {

// Throws ApiError(400, message) with `param` as the field at fault.
[[noreturn]] inline void bad(const std::string& param, const std::string& message) {
    throw ApiError(400, message, param);
}

// "an object", "an array", "a string", "a boolean", "an integer", "a number" or "null".
const char* type_name(const nlohmann::json& v);

// "invalid type for 'param': expected <expected>, but got <got's type>".
[[noreturn]] void wrong_type(const std::string& param, const char* expected, const nlohmann::json& got);

// The field's value, or null when it is absent or null (OpenAI and Anthropic
// treat both as "not given").
const nlohmann::json* field(const nlohmann::json& obj, std::string_view name);

// A request body as JSON; ApiError 400 when it is not valid JSON.
nlohmann::json parse_body(std::string_view body);

// fn(), with any exception other than ApiError turned into a 400: a
// conversion a parser failed to guard is still the client's request at fault.
template <class Fn>
auto client_error(Fn&& fn) -> decltype(fn()) {
    try {
        return fn();
    } catch (const ApiError&) {
        throw;
    } catch (const std::exception& e) {
        throw ApiError(400, std::string("invalid request: ") + e.what());
    }
}

}  // namespace ptxlm::server::fields
