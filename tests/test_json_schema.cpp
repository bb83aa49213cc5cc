// JSON Schema to GBNF (engine/json_schema.h): refusals name the keyword and
// the path, converted grammars parse with the grammar engine and accept what
// the schema accepts (and not what it refuses), outputs are deterministic.
// The broad cross-check against the `jsonschema` validator is
// tests/py/check_json_schema.py.
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/grammar.h"
#include "engine/json_schema.h"

namespace {

using ojson = nlohmann::ordered_json;
using ptxlm::SchemaError;
using ptxlm::json_schema_to_gbnf;
using namespace ptxlm::grammar;

std::string error_of(const std::string& schema) {
    try {
        json_schema_to_gbnf(ojson::parse(schema));
    } catch (const SchemaError& e) {
        return e.what();
    }
    return "(converted)";
}

std::shared_ptr<const Grammar> grammar_of(const std::string& schema) {
    return Grammar::parse(json_schema_to_gbnf(ojson::parse(schema)));
}

bool matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
    Matcher m(g);
    return m.accept(text) && m.can_end();
}

TEST(JsonSchemaErrors, NameKeywordAndPath) {
    struct Case {
        const char* schema;
        const char* message;
    };
    const Case cases[] = {
        {R"({"type":"object","properties":{"tags":{"patternProperties":{}}}})",
         "unsupported JSON Schema keyword 'patternProperties' at /properties/tags"},
        {R"({"properties":{"age":{"type":"integer","minimum":"3"}}})", "'minimum' must be a number at /properties/age/minimum"},
        {R"({"type":"string","format":"email"})", "unsupported 'format' 'email' (date, time, date-time, uuid) at /format"},
        {R"({"allOf":[{"type":"string"},{"minLength":1}]})", "'allOf' with 2 schemas is unsupported (only one) at /allOf"},
        {R"({"$ref":"https://example.com/s.json"})", "'$ref' 'https://example.com/s.json' is unsupported"},
        {R"({"$ref":"#/$defs/Missing"})", "'$ref' '#/$defs/Missing' does not resolve at /$ref"},
        {R"({"type":"array","items":{"type":"string"},"uniqueItems":true})", "'uniqueItems' true is unsupported at /uniqueItems"},
        {R"j({"type":"string","pattern":"(a)\\1"})j", "'pattern' backreference '\\1'"},
        {R"j({"type":"string","pattern":"(?=a)"})j", "'pattern' group '(?' (lookaround or named group)"},
        {R"({"type":"string","pattern":"a^b"})", "'pattern' anchor '^' not at the start"},
        {R"({"type":"number","minimum":0.5})", "'minimum' of a 'number' must be a whole number to be expressed at /minimum"},
        {R"({"type":"integer","minimum":5,"maximum":4})", "no integer lies between the minimum and the maximum at /"},
        {R"({"type":"integer","minimum":1e30})", "'minimum' is out of the supported range at /minimum"},
        {R"({"type":"string","maxLength":100001})", "'maxLength' above 10000 is unsupported at /maxLength"},
        {R"({"type":"string","minLength":-1})", "'minLength' must be a non-negative integer at /minLength"},
        {R"({"anyOf":[{"type":"string"}],"type":"string"})", "'type' alongside 'anyOf' is unsupported at /"},
        {R"({"enum":["a"],"minLength":1})", "'minLength' alongside 'enum' is unsupported at /"},
        {R"({"type":"strin"})", "'type' must be a JSON Schema type name or a list of them at /type"},
        {R"(false)", "schema 'false' (no value can match) at /"},
        {R"({"type":"object","properties":{"a~b/c":{"multipleOf":2}}})",
         "unsupported JSON Schema keyword 'multipleOf' at /properties/a~0b~1c"},
        {R"({"type":"object","properties":{"a":{}},"required":["b"],"additionalProperties":false})",
         "required property 'b' is neither in 'properties' nor allowed as an additional one at /required"},
        {R"({"type":"array","prefixItems":[{}],"items":false,"minItems":2})", "'minItems' cannot be met"},
        {R"({"type":"array","items":[{}]})", "'items' as an array is unsupported (use 'prefixItems') at /items"},
        {R"({"type":"string","pattern":"x","minLength":1})", "'minLength' together with 'pattern' is unsupported at /"},
        {R"({"$defs":{"A":{"not":{}}},"$ref":"#/$defs/A"})", "unsupported JSON Schema keyword 'not' at /$defs/A"},
        {R"({"anyOf":[{"$ref":"#"},{"type":"null"}]})",
         "'$ref' '#' reaches itself before any object or array (no finite value matches) at /anyOf/0/$ref"},
        {R"({"$defs":{"A":{"$ref":"#/$defs/B"},"B":{"allOf":[{"$ref":"#/$defs/A"}]}},"$ref":"#/$defs/A"})",
         "'$ref' '#/$defs/A' reaches itself"},
    };
    for (const auto& c : cases) {
        const std::string e = error_of(c.schema);
        EXPECT_NE(e.find(c.message), std::string::npos) << c.schema << "\n  got: " << e << "\n  want: " << c.message;
    }
}

TEST(JsonSchemaErrors, AnnotationsAreIgnored) {
    EXPECT_EQ(error_of(R"({"title":"T","description":"d","default":1,"examples":[1],"$schema":"x","$id":"y",
                          "$comment":"c","deprecated":true,"readOnly":false,"writeOnly":false,
                          "discriminator":{},"type":"integer"})"),
              "(converted)");
}

TEST(JsonSchemaGrammar, ObjectsInSchemaOrder) {
    const auto g = grammar_of(R"({"type":"object","properties":{
        "a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
        "required":["b"],"additionalProperties":false})");
    EXPECT_TRUE(matches(g, R"({"b":"x"})"));
    EXPECT_TRUE(matches(g, R"({"a":1,"b":"x"})"));
    EXPECT_TRUE(matches(g, R"({"a": 1, "b": "x", "c": true})"));
    EXPECT_TRUE(matches(g, "{\n  \"b\": \"x\",\n  \"c\": false\n}"));
    EXPECT_FALSE(matches(g, R"({"a":1})"));                 // b is required
    EXPECT_FALSE(matches(g, R"({"b":"x","a":1})"));         // out of order
    EXPECT_FALSE(matches(g, R"({"b":"x","d":1})"));         // additional
    EXPECT_FALSE(matches(g, R"({"b":  "x"})"));             // two spaces
    EXPECT_FALSE(matches(g, R"( {"b":"x"})"));              // nothing before the root value
}

TEST(JsonSchemaGrammar, IntegerBoundsDigitByDigit) {
    const auto g = grammar_of(R"({"type":"integer","minimum":-17,"maximum":2024})");
    for (int v = -40; v <= 2100; ++v)
        EXPECT_EQ(matches(g, std::to_string(v)), v >= -17 && v <= 2024) << v;
    EXPECT_FALSE(matches(g, "-0"));
    EXPECT_FALSE(matches(g, "007"));
    const auto x = grammar_of(R"({"type":"integer","exclusiveMinimum":99})");
    EXPECT_FALSE(matches(x, "99"));
    EXPECT_TRUE(matches(x, "100"));
    EXPECT_TRUE(matches(x, "123456789012"));
}

TEST(JsonSchemaGrammar, NumberBounds) {
    const auto g = grammar_of(R"({"type":"number","exclusiveMinimum":0,"maximum":1})");
    for (const char* ok : {"0.5", "1", "1.0", "1.000", "0.0001"}) EXPECT_TRUE(matches(g, ok)) << ok;
    for (const char* bad : {"0", "0.0", "1.01", "2", "-0.5", "1e0"}) EXPECT_FALSE(matches(g, bad)) << bad;
}

TEST(JsonSchemaGrammar, RecursiveTree) {
    const auto g = grammar_of(R"({"$defs":{"Node":{"type":"object","properties":{
        "value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/Node"}}},
        "required":["value","children"],"additionalProperties":false}},"$ref":"#/$defs/Node"})");
    EXPECT_TRUE(matches(g, R"({"value":1,"children":[{"value":2,"children":[]},{"value":3,"children":[{"value":4,"children":[]}]}]})"));
    EXPECT_FALSE(matches(g, R"({"value":1,"children":[{"value":2}]})"));
}

TEST(JsonSchemaGrammar, PatternsAndFormats) {
    const auto g = grammar_of(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})");
    EXPECT_TRUE(matches(g, R"("AB-123")"));
    EXPECT_FALSE(matches(g, R"("AB-12")"));
    EXPECT_FALSE(matches(g, R"("ab-123")"));
    const auto u = grammar_of(R"({"type":"string","pattern":"b\"c"})");  // unanchored, with a quote
    EXPECT_TRUE(matches(u, R"("ab\"cd")"));
    EXPECT_FALSE(matches(u, R"("abcd")"));
    const auto d = grammar_of(R"({"type":"string","format":"date-time"})");
    EXPECT_TRUE(matches(d, R"("2024-02-29T23:59:59.5+01:00")"));
    EXPECT_FALSE(matches(d, R"("2024-02-29 23:59:59")"));
}

TEST(JsonSchemaGrammar, StringLengthInCodePoints) {
    const auto g = grammar_of(R"({"type":"string","minLength":2,"maxLength":3})");
    EXPECT_TRUE(matches(g, "\"\xC3\xA9\xE2\x82\xAC\""));  // é€: two code points, five bytes
    EXPECT_TRUE(matches(g, R"("a\nb")"));
    EXPECT_FALSE(matches(g, R"("a")"));
    EXPECT_FALSE(matches(g, R"("abcd")"));
    EXPECT_FALSE(matches(g, "\"a\x01\""));  // raw control character
}

TEST(JsonSchemaGrammar, AnyValueAndDeterminism) {
    const auto g = grammar_of("{}");
    EXPECT_TRUE(matches(g, R"({"a": [1, "x", null, true, {"b": -1.5e3}]})"));
    EXPECT_FALSE(matches(g, R"({"a": [1,]})"));
    const std::string s = R"({"type":"object","properties":{"x":{"anyOf":[{"type":"string"},{"type":"null"}]}}})";
    EXPECT_EQ(json_schema_to_gbnf(ojson::parse(s)), json_schema_to_gbnf(ojson::parse(s)));
    EXPECT_EQ(json_schema_to_gbnf(ojson(true)), json_schema_to_gbnf(ojson::parse("{}")));
}

// Negative control: a grammar that is not the schema's must fail these checks,
// so they are not vacuous.
TEST(JsonSchemaGrammar, NegativeControl) {
    const auto wrong = grammar_of(R"({"type":"integer","minimum":-16,"maximum":2024})");
    EXPECT_FALSE(matches(wrong, "-17"));
    const auto loose = grammar_of(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
        "c":{"type":"boolean"}},"required":["a","b"],"additionalProperties":false})");
    EXPECT_FALSE(matches(loose, R"({"b":"x"})"));
}

}  // namespace
