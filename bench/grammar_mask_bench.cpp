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
// Token bytes come straight from the GGUF vocabulary (no ptxlm_engine, so
// this builds with the grammar library and the GGUF reader alone):
// byte-level BPE pieces through GPT-2's byte-to-unicode table, SentencePiece
// pieces with U+2581 as a space and <0xHH> as single bytes; control tokens
// are empty (never allowed); EOS (and EOT when present) are the end tokens.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/grammar.h"
#include "gguf/gguf.h"

namespace gguf = ptxlm::gguf;

namespace {

using Clock = std::chrono::steady_clock;

const char* kJsonObject = R"g(root ::= "{" ws "\"name\"" ws ":" ws string "," ws "\"age\"" ws ":" ws integer "," ws "\"role\"" ws ":" ws role "," ws "\"items\"" ws ":" ws items "}"
items ::= "[" ws ( item ( "," ws item )* )? "]" ws
item ::= "{" ws "\"id\"" ws ":" ws string "," ws "\"label\"" ws ":" ws string "}" ws
role ::= ( "\"admin\"" | "\"user\"" | "\"guest\"" ) ws
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"" ws
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ws
ws ::= [ \t\n]{0,8}
)g";

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

uint32_t scalar_u32(const gguf::File& f, const char* key, uint32_t fallback) {
    const gguf::KeyValue* kv = f.find(key);
    if (!kv || kv->is_array() || kv->raw.size() < 4) return fallback;
    uint32_t v;
    std::memcpy(&v, kv->raw.data(), 4);
    return v;
}

// Token i's bytes, and the end tokens.
struct Vocab {
    std::vector<std::string> bytes;
    std::vector<int32_t> end;
};

Vocab load_vocab(const std::string& path) {
    const gguf::File f = gguf::File::open(path);
    const gguf::KeyValue* toks = f.find("tokenizer.ggml.tokens");
    const gguf::KeyValue* types = f.find("tokenizer.ggml.token_type");
    const gguf::KeyValue* model = f.find("tokenizer.ggml.model");
    if (!toks || !model || model->strings.empty()) throw std::runtime_error(path + ": no tokenizer vocabulary");
    const bool bpe = model->strings[0] == "gpt2";
    // GPT-2: bytes map to code points; printable Latin-1 to themselves, the rest to 256 + n.
    std::map<uint32_t, uint8_t> unbyte;
    for (int b = 0, n = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        unbyte[printable ? uint32_t(b) : uint32_t(256 + n++)] = static_cast<uint8_t>(b);
    }
    Vocab v;
    v.bytes.resize(toks->strings.size());
    for (size_t i = 0; i < toks->strings.size(); ++i) {
        int32_t type = 1;
        if (types && types->raw.size() >= (i + 1) * 4) std::memcpy(&type, types->raw.data() + i * 4, 4);
        const std::string_view s = toks->strings[i];
        std::string out;
        if (type == 3 || type == 5) {
            // control or unused: no bytes
        } else if (type == 6 && s.size() == 6 && s.substr(0, 3) == "<0x") {
            out.push_back(static_cast<char>(std::stoi(std::string(s.substr(3, 2)), nullptr, 16)));
        } else if (bpe && type != 4) {
            for (size_t k = 0; k < s.size();) {   // decode UTF-8, map back to bytes
                const auto c = static_cast<uint8_t>(s[k]);
                int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
                uint32_t cp = n == 1 ? c : c & (0x7F >> n);
                for (int j = 1; j < n && k + j < s.size(); ++j) cp = (cp << 6) | (static_cast<uint8_t>(s[k + j]) & 0x3F);
                k += static_cast<size_t>(n);
                auto it = unbyte.find(cp);
                if (it != unbyte.end()) out.push_back(static_cast<char>(it->second));
            }
        } else {
            for (size_t k = 0; k < s.size();) {
                if (s.substr(k, 3) == "\xE2\x96\x81") out.push_back(' '), k += 3;
                else out.push_back(s[k++]);
            }
        }
        v.bytes[i] = std::move(out);
    }
    for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
        const uint32_t id = scalar_u32(f, key, UINT32_MAX);
        if (id < v.bytes.size() && std::find(v.end.begin(), v.end.end(), int32_t(id)) == v.end.end())
            v.end.push_back(static_cast<int32_t>(id));
    }
    for (int32_t id : v.end) v.bytes[static_cast<size_t>(id)].clear();
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
    const std::pair<const char*, const char*> grammars[] = {
        {"json-object", kJsonObject}, {"json-value", kJsonValue}, {"arith", kArith}};
    for (const std::string& path : models) {
        const Vocab v = load_vocab(path);
        auto t0 = Clock::now();
        TokenFilter filter(v.bytes, v.end);
        const double build_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        std::printf("%s: %zu tokens, %zu end tokens, filter build %.1f ms\n", path.c_str(), v.bytes.size(),
                    v.end.size(), build_ms);
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
