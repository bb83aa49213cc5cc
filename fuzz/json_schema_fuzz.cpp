// libFuzzer entry for JSON Schema to GBNF (engine/json_schema.h): arbitrary
// bytes as a schema. Not JSON, or a SchemaError, is the accepted answer; any
// other exception escaping is a finding. A converted schema's grammar must
// parse (engine/grammar.h), except where it exceeds the engine's size caps
// (a schema may legitimately ask for more than the engine builds).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/grammar.h"
#include "engine/json_schema.h"
#include "fuzz/finding.h"

namespace {

using ptxlm::fuzz::finding;

}  // namespace

std::string ptxlm_fuzz_one(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    nlohmann::ordered_json schema;
    try {
        schema = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception&) {
        return "not JSON";
    }
    std::string gbnf;
    try {
        gbnf = ptxlm::json_schema_to_gbnf(schema);
    } catch (const ptxlm::SchemaError& e) {
        return std::string("refused: ") + e.what();
    }
    try {
        const auto g = ptxlm::grammar::Grammar::parse(gbnf);
        return "ok: " + std::to_string(g->n_rules()) + " rules, " + std::to_string(g->n_elements()) + " elements";
    } catch (const ptxlm::grammar::GrammarError& e) {
        const std::string m = e.what();
        if (m.find(" over ") != std::string::npos)  // "over the limit of", "expands to over", "nested over"
            return "over the grammar engine's caps: " + m;
        finding("converted grammar does not parse: " + m + "\n" + gbnf);
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    (void)ptxlm_fuzz_one(data, size);
    return 0;
}
