// grammar_mask_bench: the cost of TokenFilter::allowed() per generated token
// on real vocabularies (bench/grammar-mask runs it).
//
//   grammar_mask_bench [--gens N] [--steps N] [--seed S] MODEL.gguf...
//
// For each vocabulary: the filter's build time; then for each grammar (a
// nested JSON object, general JSON values, arithmetic expressions) N
// generations that pick a uniformly random allowed token at every step
// (fixed seed), stopping on an end token, at random once the text can end,
// or after --steps tokens. allowed() is timed at every step; printed:
// p50 / p99 / max, and how often the per-state cache answered.
//
// Token bytes are what the engine's filter uses (Tokenizer::grammar_filter:
// each token's piece, control tokens other than the format tokens empty,
// the end-of-generation tokens as end tokens). The first grammar comes from
// a nested JSON Schema; its compile time (schema to GBNF, parse, the first
// allowed()) is printed as what a request with a new schema pays.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/grammar.h"
#include "engine/json_schema.h"
#include "engine/tokenizer.h"
#include "gguf/gguf.h"

namespace gguf = ptxlm::gguf;

namespace {

using Clock = std::chrono::steady_clock;

// A nested object/array/string schema, as a structured-output request sends it.
const char* kSchema = R"j({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 40},
  "age": {"type": "integer", "minimum": 0, "maximum": 150},
  "role": {"enum": ["admin", "user", "guest"]},
  "items": {"type": "array", "maxItems": 8, "items": {"type": "object",
    "properties": {"id": {"type": "string"}, "label": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["id", "label"], "additionalProperties": false}}},
  "required": ["name", "age", "role", "items"], "additionalProperties": false})j";

const char* kJsonValue = R"g(root ::= value
value ::= object | array | string | number | ( "true" | "false" | "null" ) ws
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}" ws
array ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"" ws
number ::= "-"? ( [0-9] | [1-9] [0-9]{0,15} ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]{1,3} )? ws
ws ::= | " " | "\n" [ \t]{0,20}
)g";

const char* kArith = R"g(root ::= expr
expr ::= term ( ws [-+] ws term )*
term ::= factor ( ws [*/] ws factor )*
factor ::= [0-9]+ | "(" ws expr ws ")" | "-" factor
ws ::= " "?
)g";

// Token i's bytes, and the end tokens.
struct Vocab {
    std::vector<std::string> bytes;
    std::vector<int32_t> end;
};

Vocab load_vocab(const std::string& path) {
    const ptxlm::Tokenizer tok = ptxlm::Tokenizer::from_gguf(gguf::File::open(path));
    Vocab v;
    v.bytes.resize(static_cast<size_t>(tok.n_vocab()));
    for (ptxlm::TokenId id = 0; id < tok.n_vocab(); ++id) {
        if (tok.is_eog(id)) v.end.push_back(id);
        else v.bytes[static_cast<size_t>(id)] = tok.piece(id);
    }
    return v;
}

double pct(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
    using namespace ptxlm::grammar;
    int gens = 20, steps = 200;
    unsigned seed = 42;
    std::vector<std::string> models;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--gens" && i + 1 < argc) gens = std::atoi(argv[++i]);
        else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
        else if (a == "--seed" && i + 1 < argc) seed = static_cast<unsigned>(std::atoi(argv[++i]));
        else models.push_back(a);
    }
    if (models.empty()) {
        std::fprintf(stderr, "usage: grammar_mask_bench [--gens N] [--steps N] [--seed S] MODEL.gguf...\n");
        return 1;
    }
    const std::string schema_gbnf = ptxlm::json_schema_to_gbnf(nlohmann::ordered_json::parse(kSchema));
    const std::pair<const char*, const char*> grammars[] = {
        {"json-schema", schema_gbnf.c_str()}, {"json-value", kJsonValue}, {"arith", kArith}};
    for (const std::string& path : models) {
        const Vocab v = load_vocab(path);
        auto t0 = Clock::now();
        TokenFilter filter(v.bytes, v.end);
        const double build_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        std::printf("%s: %zu tokens, %zu end tokens, filter build %.1f ms, short tokens up to %u bytes\n", path.c_str(),
                    v.bytes.size(), v.end.size(), build_ms, filter.split());
        {
            // A request with a schema never seen: converted, parsed, first step.
            const auto c0 = Clock::now();
            auto g = Grammar::parse(ptxlm::json_schema_to_gbnf(nlohmann::ordered_json::parse(kSchema)));
            std::vector<uint64_t> bits;
            filter.allowed(Matcher(g), bits);
            std::printf("  new schema: to GBNF, parsed and its first allowed() in %.1f ms\n",
                        std::chrono::duration<double, std::milli>(Clock::now() - c0).count());
        }
        for (const auto& [name, src] : grammars) {
            auto g = Grammar::parse(src);
            std::mt19937 rng(seed);
            std::vector<double> times, cold;
            std::vector<uint64_t> bits;
            std::vector<int32_t> ok;
            const auto before = filter.cache_stats();
            size_t bytes_out = 0, max_depth = 0;
            for (int gen = 0; gen < gens; ++gen) {
                Matcher m(g);
                for (int step = 0; step < steps; ++step) {
                    const auto a = Clock::now();
                    filter.allowed(m, bits);
                    const double us = std::chrono::duration<double, std::micro>(Clock::now() - a).count();
                    times.push_back(us);
                    if (gen == 0) cold.push_back(us);
                    ok.clear();
                    for (size_t w = 0; w < bits.size(); ++w)
                        for (uint64_t b = bits[w]; b; b &= b - 1)
                            ok.push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(b))));
                    if (ok.empty()) break;
                    if (m.can_end() && rng() % 8 == 0) break;
                    const int32_t id = ok[rng() % ok.size()];
                    if (std::find(v.end.begin(), v.end.end(), id) != v.end.end()) break;
                    if (!m.accept(v.bytes[static_cast<size_t>(id)])) {
                        std::fprintf(stderr, "BUG: allowed token %d was rejected\n", id);
                        return 1;
                    }
                    bytes_out += v.bytes[static_cast<size_t>(id)].size();
                    const auto st = m.state();
                    for (size_t r = 0; r < st.size(); r += 2 + st[r]) max_depth = std::max<size_t>(max_depth, st[r]);
                }
            }
            const auto after = filter.cache_stats();
            const uint64_t hits = after.hits - before.hits, misses = after.misses - before.misses;
            std::printf("  %-12s %5zu steps (%zu bytes): allowed() p50 %7.1f us  p99 %7.1f us  max %7.1f us"
                        "   first generation p99 %7.1f us; cache hits %.0f%%; deepest stack %zu\n",
                        name, times.size(), bytes_out, pct(times, 0.5), pct(times, 0.99),
                        *std::max_element(times.begin(), times.end()), pct(cold, 0.99),
                        100.0 * static_cast<double>(hits) / static_cast<double>(std::max<uint64_t>(1, hits + misses)), max_depth);
        }
    }
    return 0;
}
