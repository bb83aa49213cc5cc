// JSON Schema to GBNF (see json_schema.h for what the grammar writes): the
// converter that walks a schema and names one rule per subschema. The GBNF
// building blocks and the digit-by-digit number ranges are in
// json_schema_gbnf.cpp, the 'pattern' translator in json_schema_pattern.cpp.
//
// Supported keywords:
//   type (a name or a list), enum, const, anyOf, oneOf (as anyOf), allOf with
//   one schema, $ref to "#" or any local JSON pointer ("#/$defs/X",
//   "#/definitions/X"), recursion included (one rule per reference);
//   objects: properties, required, additionalProperties (true, false, schema);
//   arrays: items (a schema or a boolean), prefixItems, minItems, maxItems,
//   uniqueItems false; strings: minLength, maxLength, pattern (see
//   json_schema_pattern.cpp), format date, time, date-time, uuid; numbers and
//   integers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (for a
//   "number" only whole bounds), written digit by digit.
// Annotations are ignored (kAnnotations); $defs/definitions are read only
// through $ref. Everything else is a SchemaError naming the keyword.
#include "engine/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/json_schema_gbnf.h"
#include "engine/json_schema_pattern.h"

namespace ptxlm {
namespace {

using namespace json_schema_detail;
using ojson = nlohmann::ordered_json;

// The longest rule name rule_name() makes (it keeps the end of a longer hint).
constexpr size_t kMaxRuleName = 48;

const std::set<std::string_view> kAnnotations = {"title",      "description", "default",  "examples",
                                                 "$schema",    "$id",         "$comment", "deprecated",
                                                 "readOnly",   "writeOnly",   "discriminator"};
const std::set<std::string_view> kStringKeys = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string_view> kNumberKeys = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const std::set<std::string_view> kObjectKeys = {"properties", "required", "additionalProperties"};
const std::set<std::string_view> kArrayKeys = {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"};
const std::set<std::string_view> kOtherKeys = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"};
// Read through $ref only.
const std::set<std::string_view> kContainers = {"$defs", "definitions"};

// A JSON pointer token (RFC 6901: ~ as ~0, / as ~1).
std::string pointer_token(std::string_view key) {
    std::string out;
    for (char c : key) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

std::string child(const std::string& path, std::string_view key) { return path + "/" + pointer_token(key); }
std::string child(const std::string& path, size_t i) { return path + "/" + std::to_string(i); }

// ---- The converter ----------------------------------------------------------

// JSON text shapes shared by all schemas; named once, added when first used.
const std::map<std::string, std::string, std::less<>> kPrimitives = {
    {"ws", "( \" \" | \"\\n\" [ \\t]{0,40} )?"},
    {"char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )"},
    {"string", "\"\\\"\" char* \"\\\"\""},
    {"integer", "\"0\" | \"-\"? [1-9] [0-9]*"},
    {"number", "\"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?"},
    {"boolean", "\"true\" | \"false\""},
    {"null", "\"null\""},
    {"value", "object | array | string | number | boolean | null"},
    {"object", "\"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\""},
    {"array", "\"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\""},
    {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )"},
    {"time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" ( [0-5] [0-9] | \"60\" ) ( \".\" [0-9]+ )? "
             "( [zZ] | [-+] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
    {"date-time", "date [tT] time"},
    {"uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}"},
};

// The primitives each primitive's body names.
const std::map<std::string, std::vector<std::string>, std::less<>> kPrimitiveUses = {
    {"string", {"char"}},
    {"value", {"object", "array", "string", "number", "boolean", "null"}},
    {"object", {"ws", "string", "value"}},
    {"array", {"ws", "value"}},
    {"date-time", {"date", "time"}},
};

std::string rule_name(std::string_view hint) {
    std::string out;
    for (char c : hint) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (ok) out += c;
        else if (!out.empty() && out.back() != '-') out += '-';
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    if (out.size() > kMaxRuleName) out = out.substr(out.size() - kMaxRuleName);
    while (!out.empty() && out.front() == '-') out.erase(0, 1);
    return out.empty() ? "schema" : out;
}

std::optional<int64_t> count_keyword(const ojson& s, const char* key, const std::string& path) {
    auto it = s.find(key);
    if (it == s.end()) return std::nullopt;
    const ojson& v = *it;
    const bool whole = v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (!whole || v.get<double>() < 0) fail(std::string("'") + key + "' must be a non-negative integer", child(path, key));
    if (v.get<double>() > double(kMaxRepeat))
        fail(std::string("'") + key + "' above " + std::to_string(kMaxRepeat) + " is unsupported", child(path, key));
    return v.get<int64_t>();
}

// The JSON type of an instance, as JSON Schema names it ("integer" for whole numbers).
std::string type_of(const ojson& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer()) return "integer";
    if (v.is_number_float()) return std::floor(v.get<double>()) == v.get<double>() ? "integer" : "number";
    if (v.is_string()) return "string";
    if (v.is_array()) return "array";
    return "object";
}

class Converter {
public:
    explicit Converter(const ojson& root) : root_(root) {
        for (const auto& [name, body] : kPrimitives) taken_.insert(name);
        taken_.insert("root");
        order_.push_back("root");
        refs_["#"] = "root";
    }

    std::string run() {
        head_refs_.insert("#");
        rules_["root"] = visit(root_, "", "root");
        std::string out;
        for (const auto& name : order_) out += name + " ::= " + rules_.at(name) + "\n";
        return out;
    }

private:
    const ojson& root_;
    std::vector<std::string> order_;               // rule names as created, "root" first
    std::map<std::string, std::string> rules_;     // name -> body
    std::set<std::string> taken_;
    std::map<std::string, std::string> refs_;      // $ref -> rule name
    // The $refs being resolved since the last '{' or '[': reaching one again
    // is a cycle that writes nothing (left recursion, no finite value).
    std::set<std::string> head_refs_;
    int depth_ = 0;

    // Inside an object or an array a token has been written: cycles are fine.
    struct AfterToken {
        Converter& c;
        std::set<std::string> saved;
        explicit AfterToken(Converter& conv) : c(conv), saved(std::move(conv.head_refs_)) { c.head_refs_.clear(); }
        ~AfterToken() { c.head_refs_ = std::move(saved); }
    };

    std::string prim(const std::string& name) {
        if (!rules_.count(name)) {
            rules_[name] = kPrimitives.at(name);
            order_.push_back(name);
            if (auto it = kPrimitiveUses.find(name); it != kPrimitiveUses.end())
                for (const auto& u : it->second) prim(u);
        }
        return name;
    }

    std::string reserve(std::string_view hint) {
        const std::string base = rule_name(hint);
        std::string name = base;
        for (int k = 2; taken_.count(name); ++k) name = base + "-" + std::to_string(k);
        taken_.insert(name);
        order_.push_back(name);
        rules_[name] = "";
        return name;
    }

    std::string add_rule(std::string_view hint, std::string body) {
        const std::string name = reserve(hint);
        rules_[name] = std::move(body);
        return name;
    }

    std::string visit(const ojson& s, const std::string& path, const std::string& hint) {
        if (depth_ >= kMaxDepth) fail("schema nested deeper than " + std::to_string(kMaxDepth), path);
        ++depth_;
        std::string r = visit_schema(s, path, hint);
        --depth_;
        return r;
    }

    std::string visit_schema(const ojson& s, const std::string& path, const std::string& hint) {
        if (s.is_boolean()) {
            if (!s.get<bool>()) fail("schema 'false' (no value can match)", path);
            return prim("value");
        }
        if (!s.is_object()) fail("a schema must be an object or a boolean", path);
        std::vector<std::string> keys;  // the constraining keywords present
        for (const auto& [k, v] : s.items()) {
            if (kAnnotations.count(k) || kContainers.count(k)) continue;
            if (!kOtherKeys.count(k) && !kStringKeys.count(k) && !kNumberKeys.count(k) && !kObjectKeys.count(k) &&
                !kArrayKeys.count(k))
                fail("unsupported JSON Schema keyword '" + k + "'", path);
            keys.push_back(k);
        }
        auto alone = [&](const char* key, const std::set<std::string_view>& allowed = {}) {
            for (const auto& k : keys)
                if (k != key && !allowed.count(k))
                    fail("'" + k + "' alongside '" + key + "' is unsupported", path);
        };
        if (s.contains("$ref")) {
            alone("$ref");
            return ref_rule(s["$ref"], child(path, "$ref"), hint);
        }
        if (s.contains("allOf")) {
            alone("allOf");
            const ojson& all = s["allOf"];
            if (!all.is_array() || all.empty()) fail("'allOf' must be a non-empty array", child(path, "allOf"));
            if (all.size() != 1)
                fail("'allOf' with " + std::to_string(all.size()) + " schemas is unsupported (only one)",
                     child(path, "allOf"));
            return visit(all[0], child(child(path, "allOf"), 0), hint);
        }
        if (s.contains("anyOf") || s.contains("oneOf")) {
            const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
            alone(key);
            const ojson& list = s[key];
            if (!list.is_array() || list.empty()) fail(std::string("'") + key + "' must be a non-empty array", child(path, key));
            std::vector<std::string> alts;
            const std::string name = reserve(hint);
            for (size_t i = 0; i < list.size(); ++i) {
                if (list[i].is_boolean() && !list[i].get<bool>()) continue;  // matches nothing
                alts.push_back(visit(list[i], child(child(path, key), i), hint + "-" + std::to_string(i)));
            }
            if (alts.empty()) fail(std::string("'") + key + "' with no schema that can match", child(path, key));
            std::string body;
            for (const auto& a : alts) body += (body.empty() ? "" : " | ") + a;
            rules_[name] = body;
            return name;
        }
        const std::vector<std::string> types = type_list(s, path);
        if (s.contains("enum") || s.contains("const")) {
            alone(s.contains("enum") ? "enum" : "const", {"type", "enum", "const"});
            return enum_rule(s, types, path, hint);
        }
        std::vector<std::string> alts;
        for (const auto& t : types) {
            if (t == "integer" && std::count(types.begin(), types.end(), "number")) continue;
            if (t == "string") alts.push_back(string_rule(s, path, hint));
            else if (t == "integer" || t == "number") alts.push_back(number_rule(s, t == "integer", path, hint));
            else if (t == "object") alts.push_back(object_rule(s, path, hint));
            else if (t == "array") alts.push_back(array_rule(s, path, hint));
            else alts.push_back(prim(t));
        }
        if (alts.empty()) return prim("value");
        if (alts.size() == 1) return alts[0];
        std::string body;
        for (const auto& a : alts) body += (body.empty() ? "" : " | ") + a;
        return add_rule(hint, body);
    }

    // The types a schema allows; without "type", those its keywords speak of (none: any).
    std::vector<std::string> type_list(const ojson& s, const std::string& path) {
        static const std::set<std::string_view> kTypes = {"string", "number", "integer", "boolean",
                                                          "null",   "object", "array"};
        std::vector<std::string> out;
        auto it = s.find("type");
        if (it == s.end()) {
            auto any_of = [&](const std::set<std::string_view>& keys) {
                return std::any_of(keys.begin(), keys.end(), [&](std::string_view k) { return s.contains(std::string(k)); });
            };
            if (any_of(kStringKeys)) out.push_back("string");
            if (any_of(kNumberKeys)) out.push_back("number");
            if (any_of(kObjectKeys)) out.push_back("object");
            if (any_of(kArrayKeys)) out.push_back("array");
            return out;
        }
        const ojson list = it->is_array() ? *it : ojson::array({*it});
        if (list.empty()) fail("'type' must not be an empty list", child(path, "type"));
        for (const auto& t : list) {
            if (!t.is_string() || !kTypes.count(t.get<std::string>()))
                fail("'type' must be a JSON Schema type name or a list of them", child(path, "type"));
            if (std::find(out.begin(), out.end(), t.get<std::string>()) == out.end()) out.push_back(t.get<std::string>());
        }
        return out;
    }

    std::string ref_rule(const ojson& ref, const std::string& path, const std::string& hint) {
        if (!ref.is_string()) fail("'$ref' must be a string", path);
        const std::string r = ref.get<std::string>();
        if (auto it = refs_.find(r); it != refs_.end()) {
            if (head_refs_.count(r))
                fail("'$ref' '" + r + "' reaches itself before any object or array (no finite value matches)", path);
            return it->second;
        }
        if (r.rfind("#/", 0) != 0) fail("'$ref' '" + r + "' is unsupported (only local references '#/...')", path);
        // Walk the JSON pointer (RFC 6901) from the root.
        const ojson* target = &root_;
        std::string last, pointer;
        for (size_t pos = 2; pos <= r.size();) {
            const size_t slash = std::min(r.find('/', pos), r.size());
            std::string token;
            for (size_t k = pos; k < slash; ++k) {
                if (r[k] == '~' && k + 1 < slash && (r[k + 1] == '0' || r[k + 1] == '1')) token += r[++k] == '0' ? '~' : '/';
                else token += r[k];
            }
            if (target->is_object() && target->contains(token)) {
                target = &(*target)[token];
            } else if (target->is_array() && !token.empty() &&
                       token.find_first_not_of("0123456789") == std::string::npos && token.size() < 10 &&
                       std::stoul(token) < target->size()) {
                target = &(*target)[std::stoul(token)];
            } else {
                fail("'$ref' '" + r + "' does not resolve", path);
            }
            pointer = child(pointer, token);
            last = token;
            pos = slash + 1;
        }
        const std::string name = reserve(last.empty() ? hint : last);
        refs_[r] = name;
        head_refs_.insert(r);
        rules_[name] = visit(*target, pointer, name);
        head_refs_.erase(r);
        return name;
    }

    // A JSON value written as given, with whitespace between its tokens.
    std::string literal_value(const ojson& v) {
        if (v.is_object()) {
            std::string out = "\"{\" ws";
            bool first = true;
            for (const auto& [k, x] : v.items()) {
                out += std::string(first ? " " : " \",\" ws ") + lit(ojson(k).dump()) + " ws \":\" ws " + literal_value(x) + " ws";
                first = false;
            }
            prim("ws");
            return "( " + out + " \"}\" )";
        }
        if (v.is_array()) {
            std::string out = "\"[\" ws";
            for (size_t i = 0; i < v.size(); ++i) out += std::string(i ? " \",\" ws " : " ") + literal_value(v[i]) + " ws";
            prim("ws");
            return "( " + out + " \"]\" )";
        }
        return lit(v.dump());
    }

    std::string enum_rule(const ojson& s, const std::vector<std::string>& types, const std::string& path,
                          const std::string& hint) {
        ojson values = ojson::array();
        if (s.contains("enum")) {
            if (!s["enum"].is_array() || s["enum"].empty()) fail("'enum' must be a non-empty array", child(path, "enum"));
            values = s["enum"];
        }
        if (s.contains("const")) {
            const ojson& c = s["const"];
            if (s.contains("enum")) {
                if (std::find(values.begin(), values.end(), c) == values.end())
                    fail("'const' is not one of 'enum' (no value can match)", child(path, "const"));
            }
            values = ojson::array({c});
        }
        std::vector<std::string> alts;
        for (const auto& v : values) {
            const std::string t = type_of(v);
            const bool typed = !s.contains("type") || std::count(types.begin(), types.end(), t) ||
                               (t == "integer" && std::count(types.begin(), types.end(), "number"));
            if (typed) alts.push_back(literal_value(v));
        }
        if (alts.empty()) fail("no value of 'enum'/'const' has a type in 'type'", path);
        std::string body;
        for (const auto& a : alts) body += (body.empty() ? "" : " | ") + a;
        return add_rule(hint, body);
    }

    std::string string_rule(const ojson& s, const std::string& path, const std::string& hint) {
        const auto min = count_keyword(s, "minLength", path), max = count_keyword(s, "maxLength", path);
        if (min && max && *max < *min) fail("'maxLength' below 'minLength' (no string can match)", child(path, "maxLength"));
        const std::string quote = lit("\"");
        if (s.contains("format")) {
            for (const char* k : {"minLength", "maxLength", "pattern"})
                if (s.contains(k)) fail(std::string("'") + k + "' together with 'format' is unsupported", path);
            const ojson& f = s["format"];
            if (!f.is_string()) fail("'format' must be a string", child(path, "format"));
            const std::string name = f.get<std::string>();
            if (name != "date" && name != "time" && name != "date-time" && name != "uuid")
                fail("unsupported 'format' '" + name + "' (date, time, date-time, uuid)", child(path, "format"));
            return add_rule(hint, quote + " " + prim(name) + " " + quote);
        }
        if (s.contains("pattern")) {
            for (const char* k : {"minLength", "maxLength"})
                if (s.contains(k)) fail(std::string("'") + k + "' together with 'pattern' is unsupported", path);
            if (!s["pattern"].is_string()) fail("'pattern' must be a string", child(path, "pattern"));
            const std::string body =
                pattern_to_gbnf(s["pattern"].get<std::string>(), child(path, "pattern"), prim("char"));
            return add_rule(hint, quote + " " + body + " " + quote);
        }
        if (!min && !max) return prim("string");
        return add_rule(hint, quote + " " + repeat(prim("char"), min.value_or(0), max.value_or(-1)) + " " + quote);
    }

    // A bound as a JSON number, or nullopt when absent.
    std::optional<double> bound_value(const ojson& s, const char* key, const std::string& path) {
        auto it = s.find(key);
        if (it == s.end()) return std::nullopt;
        if (!it->is_number()) fail(std::string("'") + key + "' must be a number", child(path, key));
        const double v = it->get<double>();
        // Whole values beyond +-2^62 would lose digits in an int64: refuse rather than round.
        if (!(std::fabs(v) < 4.6e18)) fail(std::string("'") + key + "' is out of the supported range", child(path, key));
        return v;
    }

    std::string number_rule(const ojson& s, bool integer, const std::string& path, const std::string& hint) {
        const auto min = bound_value(s, "minimum", path), max = bound_value(s, "maximum", path);
        const auto xmin = bound_value(s, "exclusiveMinimum", path), xmax = bound_value(s, "exclusiveMaximum", path);
        if (!min && !max && !xmin && !xmax) return prim(integer ? "integer" : "number");
        if (integer) {
            std::optional<int64_t> lo, hi;
            if (min) lo = int64_t(std::ceil(*min));
            if (xmin) lo = std::max(lo.value_or(INT64_MIN), int64_t(std::floor(*xmin)) + 1);
            if (max) hi = int64_t(std::floor(*max));
            if (xmax) hi = std::min(hi.value_or(INT64_MAX), int64_t(std::ceil(*xmax)) - 1);
            if (lo && hi && *lo > *hi) fail("no integer lies between the minimum and the maximum", path);
            return add_rule(hint, integer_range(lo, hi));
        }
        auto whole = [&](std::optional<double> v, const char* key, bool exclusive) -> std::optional<Bound> {
            if (!v) return std::nullopt;
            if (std::floor(*v) != *v)
                fail(std::string("'") + key + "' of a 'number' must be a whole number to be expressed", child(path, key));
            return Bound{int64_t(*v), exclusive};
        };
        std::optional<Bound> lo = whole(min, "minimum", false), hi = whole(max, "maximum", false);
        // Of two bounds on one side the tighter wins; at a tie, the exclusive one.
        if (auto x = whole(xmin, "exclusiveMinimum", true); x && (!lo || x->value >= lo->value)) lo = x;
        if (auto x = whole(xmax, "exclusiveMaximum", true); x && (!hi || x->value <= hi->value)) hi = x;
        if (lo && hi && lo->value > hi->value) fail("the minimum is above the maximum (no number can match)", path);
        const std::vector<std::string> alts = real_range(lo, hi);
        if (alts.empty()) fail("no number lies between the minimum and the maximum", path);
        std::string body;
        for (const auto& a : alts) body += (body.empty() ? "" : " | ") + a;
        return add_rule(hint, body);
    }

    std::string object_rule(const ojson& s, const std::string& path, const std::string& hint) {
        struct Member {
            std::string kv;  // rule: key ws ":" ws value
            bool required;
        };
        const ojson empty = ojson::object();
        const ojson& props = s.contains("properties") ? s["properties"] : empty;
        if (!props.is_object()) fail("'properties' must be an object", child(path, "properties"));
        std::vector<std::string> required;
        if (s.contains("required")) {
            const ojson& req = s["required"];
            if (!req.is_array()) fail("'required' must be an array of strings", child(path, "required"));
            for (const auto& r : req) {
                if (!r.is_string()) fail("'required' must be an array of strings", child(path, "required"));
                if (std::find(required.begin(), required.end(), r.get<std::string>()) == required.end())
                    required.push_back(r.get<std::string>());
            }
        }
        // Extra keys: additionalProperties true or a schema, or absent with no properties listed.
        std::optional<std::string> extra;  // the extra values' rule
        const std::string name = reserve(hint);
        prim("ws");
        const AfterToken after_brace(*this);
        if (s.contains("additionalProperties")) {
            const ojson& ap = s["additionalProperties"];
            if (!(ap.is_boolean() && !ap.get<bool>()))
                extra = visit(ap, child(path, "additionalProperties"), hint + "-additional");
        } else if (props.empty()) {
            extra = prim("value");
        }
        std::vector<Member> members;
        for (const auto& [key, sub] : props.items()) {
            const bool req = std::find(required.begin(), required.end(), key) != required.end();
            if (sub.is_boolean() && !sub.get<bool>()) {  // the property must be absent
                if (req) fail("required property '" + key + "' has schema false", child(child(path, "properties"), key));
                continue;
            }
            const std::string value = visit(sub, child(child(path, "properties"), key), hint + "-" + key);
            members.push_back({add_rule(hint + "-" + key + "-kv", lit(ojson(key).dump()) + " ws \":\" ws " + value), req});
        }
        for (const auto& r : required) {
            if (props.contains(r)) continue;
            if (!extra) fail("required property '" + r + "' is neither in 'properties' nor allowed as an additional one",
                             child(path, "required"));
            members.push_back({add_rule(hint + "-" + r + "-kv", lit(ojson(r).dump()) + " ws \":\" ws " + *extra), true});
        }
        std::string extra_kv, extra_tail;
        if (extra) {
            extra_kv = add_rule(hint + "-extra-kv", prim("string") + " ws \":\" ws " + *extra);
            extra_tail = "( ws \",\" ws " + extra_kv + " )*";
        }
        const size_t n = members.size();
        size_t first_required = n;
        for (size_t i = 0; i < n; ++i)
            if (members[i].required) {
                first_required = i;
                break;
            }
        // The members after member k, each with its comma; optional ones may be absent.
        // With more than one way to start, the tails are chained rules so the grammar stays linear.
        auto piece = [&](size_t j) {
            const std::string c = "ws \",\" ws " + members[j].kv;
            return members[j].required ? c : "( " + c + " )?";
        };
        std::vector<std::string> tail(n + 1);
        tail[n] = extra_tail;
        const bool chained = first_required > 0 && n > 1;
        for (size_t j = n; j-- > 0;) {
            std::string t = piece(j) + (tail[j + 1].empty() ? "" : " " + tail[j + 1]);
            tail[j] = chained && j > 0 ? add_rule(hint + "-tail-" + std::to_string(j), t) : t;
        }
        std::vector<std::string> alts;
        for (size_t k = 0; k < n && k <= first_required; ++k)
            alts.push_back(members[k].kv + (tail[k + 1].empty() ? "" : " " + tail[k + 1]));
        if (first_required == n && extra) alts.push_back(extra_kv + " " + extra_tail);
        std::string body;
        if (alts.empty()) body = "\"{\" ws \"}\"";
        else if (first_required < n) body = "\"{\" ws " + alternatives(alts) + " ws \"}\"";
        else body = "\"{\" ws ( " + alternatives(alts) + " ws )? \"}\"";
        rules_[name] = body;
        return name;
    }

    std::string array_rule(const ojson& s, const std::string& path, const std::string& hint) {
        const int64_t min = count_keyword(s, "minItems", path).value_or(0);
        std::optional<int64_t> max = count_keyword(s, "maxItems", path);
        if (max && *max < min) fail("'maxItems' below 'minItems' (no array can match)", child(path, "maxItems"));
        if (s.contains("uniqueItems")) {
            const ojson& u = s["uniqueItems"];
            if (!u.is_boolean()) fail("'uniqueItems' must be a boolean", child(path, "uniqueItems"));
            if (u.get<bool>()) fail("'uniqueItems' true is unsupported", child(path, "uniqueItems"));
        }
        const std::string name = reserve(hint);
        prim("ws");
        const AfterToken after_bracket(*this);
        std::vector<std::string> prefix;
        if (s.contains("prefixItems")) {
            const ojson& p = s["prefixItems"];
            if (!p.is_array()) fail("'prefixItems' must be an array of schemas", child(path, "prefixItems"));
            for (size_t i = 0; i < p.size(); ++i) {
                if (p[i].is_boolean() && !p[i].get<bool>()) {  // no element i: the array ends before it
                    max = std::min(max.value_or(int64_t(i)), int64_t(i));
                    break;
                }
                prefix.push_back(visit(p[i], child(child(path, "prefixItems"), i), hint + "-" + std::to_string(i)));
            }
        }
        std::optional<std::string> items;
        if (s.contains("items")) {
            const ojson& it = s["items"];
            if (it.is_array()) fail("'items' as an array is unsupported (use 'prefixItems')", child(path, "items"));
            if (!(it.is_boolean() && !it.get<bool>())) items = visit(it, child(path, "items"), hint + "-item");
        } else {
            items = prim("value");
        }
        const int64_t n = int64_t(prefix.size());
        if (!items) max = std::min(max.value_or(n), n);
        if (max && min > *max) fail("'minItems' cannot be met by the items allowed", child(path, "minItems"));
        if (max && *max == 0) {
            rules_[name] = "\"[\" ws \"]\"";
            return name;
        }
        // Elements j.. once j are written (count in [max(min, 1), max]); element 0 has no comma.
        const int64_t need = std::max<int64_t>(min, 1);
        const std::string sep = "ws \",\" ws ";
        std::string body;
        std::string close;
        for (int64_t j = 0; j < n && (!max || j < *max); ++j) {
            const std::string e = (j ? sep : "") + prefix[size_t(j)];
            if (j < need) {
                body += (body.empty() ? "" : " ") + e;
            } else {
                body += (body.empty() ? "" : " ") + std::string("( ") + e;
                close += " )?";
            }
        }
        if (items && (!max || *max > n)) {
            const int64_t lo = std::max<int64_t>(need - n, 0), hi = max ? *max - n : -1;
            if (n == 0) {
                body = *items + (hi == 1 ? "" : " " + repeat("( " + sep + *items + " )", std::max<int64_t>(lo - 1, 0),
                                                              hi < 0 ? -1 : hi - 1));
            } else {
                body += " " + repeat("( " + sep + *items + " )", lo, hi);
            }
        }
        body += close;
        rules_[name] = min == 0 ? "\"[\" ws ( " + body + " ws )? \"]\"" : "\"[\" ws " + body + " ws \"]\"";
        return name;
    }
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) { return Converter(schema).run(); }

}  // namespace ptxlm
