#include "server/json_fields.h"

namespace ptxlm::server::fields {

using nlohmann::json;

const char* type_name(const json& v) {
    switch (v.type()) {
        case json::value_t::object: return "an object";
        case json::value_t::array: return "an array";
        case json::value_t::string: return "a string";
        case json::value_t::boolean: return "a boolean";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned: return "an integer";
        case json::value_t::number_float: return "a number";
        default: return "null";
    }
}

void wrong_type(const std::string& param, const char* expected, const json& got) {
    bad(param, "invalid type for '" + param + "': expected " + expected + ", but got " + type_name(got));
}

json parse_body(std::string_view body) {
    try {
        return json::parse(body);
    } catch (const json::exception& e) {
        throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
    }
}

const json* field(const json& obj, std::string_view name) {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

}  // namespace ptxlm::server::fields
