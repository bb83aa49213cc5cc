// Tokenizers against llama.cpp's (tests/golden/tokenizer_*.json, recorded by
// bench/golden-tokenizer), on vocab-only GGUF files extracted at test time
// from the real models (some with tokenizer.ggml.pre or add_space_prefix
// replaced, to cover more pre-tokenizers) and from ptxlm-synth's model: only
// general.architecture and the tokenizer.* keys, no tensors. Also: round trips, streaming detokenization, special tokens in
// user text, robustness to invalid UTF-8, and the errors for unsupported
// vocabularies.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "engine/hparams.h"
#include "engine/tokenizer.h"
#include "gguf/writer.h"
#include "tests/gguf_meta.h"
#include "models/synth/synth.h"

using namespace ptxlm;
using nlohmann::json;

namespace {

using testing_util::to_meta;

// general.architecture and tokenizer.* of `model`, nothing else; `pre`
// replaces tokenizer.ggml.pre when not empty, and kNoPre leaves it out;
// space_prefix (0 or 1) replaces tokenizer.ggml.add_space_prefix;
// general_name, when given, is written as general.name; the token whose text
// is rename.first, when given, becomes rename.second.
using Rename = std::pair<const char*, const char*>;
constexpr const char* kNoPre = "\x01none";
std::string vocab_only(const std::string& model, const std::string& pre, const std::string& name, int space_prefix = -1,
                       const char* general_name = nullptr, Rename rename = {}) {
    const gguf::File f = gguf::File::open(model);
    gguf::Writer w;
    for (const gguf::KeyValue& kv : f.metadata()) {
        if (kv.key != "general.architecture" && kv.key.rfind("tokenizer.", 0) != 0) continue;
        if (kv.key == "tokenizer.ggml.pre" && pre == kNoPre) continue;
        if (kv.key == "tokenizer.ggml.add_space_prefix" && space_prefix >= 0) continue;
        if (kv.key == "tokenizer.ggml.pre" && !pre.empty()) {
            w.set_string(kv.key, pre);
            continue;
        }
        gguf::MetaValue v = to_meta(kv);
        if (kv.key == "tokenizer.ggml.tokens" && rename.first)
            for (std::string& t : std::get<gguf::MetaArray>(v).strings)
                if (t == rename.first) t = rename.second;
        w.set(kv.key, std::move(v));
    }
    if (general_name) w.set_string("general.name", general_name);
    const auto path = std::filesystem::temp_directory_path() /
                      ("ptxlm_vocab_" + name + "_" + std::to_string(::getpid()) + ".gguf");
    if (space_prefix >= 0) w.set_bool("tokenizer.ggml.add_space_prefix", space_prefix == 1);
    w.write(path.string());
    return path.string();
}

struct Golden {
    const char* name;
    const char* model;
    const char* pre;        // override, or ""
    int space_prefix = -1;  // add_space_prefix override (0, 1), or -1
    const char* general_name = nullptr;   // general.name, or none
    Rename rename{};                      // a token renamed (old text, new text), or none
};
const Golden kGolden[] = {
    {"gemma3-270m", "gemma-3-270m-q4_k_m.gguf", ""},
    {"gemma3-space-prefix", "gemma-3-270m-q4_k_m.gguf", "", 1},
    // Named as a Phi-3 file: llama.cpp's RSTRIP on its special tokens.
    {"gemma3-as-phi3", "gemma-3-270m-q4_k_m.gguf", "", -1, "Phi3 (Gemma 3 vocabulary relabelled)",
     {"<unused0>", "<|endoftext|>"}},
    {"smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf", ""},
    {"smollm2-as-llama3", "SmolLM2-135M-Instruct.Q4_1.gguf", "llama-bpe"},
    {"smollm2-as-qwen2", "SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2"},
    {"smollm2-as-gpt2", "SmolLM2-135M-Instruct.Q4_1.gguf", "gpt-2"},
    {"smollm2-as-default", "SmolLM2-135M-Instruct.Q4_1.gguf", "default"},
    {"smollm2-as-tekken", "SmolLM2-135M-Instruct.Q4_1.gguf", "tekken"},
    {"smollm2-as-dbrx", "SmolLM2-135M-Instruct.Q4_1.gguf", "dbrx"},
    {"smollm2-as-gpt-4o", "SmolLM2-135M-Instruct.Q4_1.gguf", "gpt-4o"},
    {"synth-tiny", "synth:llama:tiny", ""},   // ptxlm-synth's 768-token vocabulary, generated here
    // The vocab-only files of llama.cpp's tokenizer tests (models/fetch
    // --test-data): Gemma 4's SentencePiece-style BPE (tokenizer.ggml.model
    // "gemma4"), Llama 3's 128k and Qwen2/Qwen3's 151k byte-level BPEs with
    // their own pre-tokenizers, Phi-3's SentencePiece.
    {"gemma4", "ggml-vocab-gemma-4.gguf", ""},
    {"llama-bpe", "ggml-vocab-llama-bpe.gguf", ""},
    {"qwen2", "ggml-vocab-qwen2.gguf", ""},
    {"phi-3", "ggml-vocab-phi-3.gguf", ""},
};

// The model file of a golden case: a real model, or a synthetic one written now.
std::string model_path(const Golden& g, const std::string& tmp_name) {
    if (std::string_view(g.model) != "synth:llama:tiny") return std::string(PTXLM_MODELS_DIR) + "/" + g.model;
    const auto bytes = synth::model_bytes(synth::preset(synth::Arch::Llama, synth::Size::Tiny));
    const auto path = std::filesystem::temp_directory_path() /
                      ("ptxlm_synth_" + tmp_name + "_" + std::to_string(::getpid()) + ".gguf");
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return path.string();
}

class TokenizerGolden : public ::testing::TestWithParam<Golden> {
protected:
    void SetUp() override {
        const std::string model = model_path(GetParam(), GetParam().name);
        ASSERT_TRUE(std::filesystem::exists(model)) << model << " is absent: run models/fetch --test-data";
        path_ = vocab_only(model, GetParam().pre, GetParam().name, GetParam().space_prefix, GetParam().general_name,
                           GetParam().rename);
        if (model.rfind(PTXLM_MODELS_DIR, 0) != 0) std::filesystem::remove(model);
    }
    void TearDown() override {
        if (!path_.empty()) std::filesystem::remove(path_);
    }
    std::string path_;
};

TEST_P(TokenizerGolden, EqualsLlamaCpp) {
    std::ifstream in(std::string(PTXLM_SOURCE_DIR) + "/tests/golden/tokenizer_" + GetParam().name + ".json");
    ASSERT_TRUE(in) << "golden file missing";
    const json g = json::parse(in);
    const gguf::File f = gguf::File::open(path_);
    ASSERT_EQ(f.tensors().size(), 0u);   // the tokenizer needs nothing else
    const Tokenizer tok = Tokenizer::from_gguf(f);
    size_t n = 0;
    for (const json& c : g["cases"]) {
        const std::string text = c["text"];
        const bool special = c["parse_special"];
        const bool bos = c["add_bos"];
        const std::vector<TokenId> want = c["ids"].get<std::vector<TokenId>>();
        EXPECT_EQ(tok.encode(text, bos, special), want)
            << "text: " << text << " (parse_special " << special << ", add_bos " << bos << ")";
        // Detokenization of llama.cpp's ids, piece by piece as llama_token_to_piece gives them.
        EXPECT_EQ(tok.decode(want), c["decode"].get<std::string>()) << "text: " << text;
        EXPECT_EQ(tok.decode(want, true), c["decode_special"].get<std::string>()) << "text: " << text;
        ++n;
    }
    EXPECT_GE(n, 80u);
}

// The tokens llama.cpp ends generation at and treats as control tokens
// (never produced from user text, not printed by default), over the whole
// vocabulary: the file's types with llama.cpp's overrides by text.
TEST_P(TokenizerGolden, EndOfGenerationAndControlTokensEqualLlamaCpp) {
    std::ifstream in(std::string(PTXLM_SOURCE_DIR) + "/tests/golden/tokenizer_" + GetParam().name + ".json");
    ASSERT_TRUE(in) << "golden file missing";
    const json g = json::parse(in);
    ASSERT_TRUE(g.contains("eog") && g.contains("control")) << "re-record with bench/golden-tokenizer";
    const Tokenizer tok = Tokenizer::from_gguf(gguf::File::open(path_));
    std::vector<TokenId> eog, control;
    for (TokenId id = 0; id < tok.n_vocab(); ++id) {
        if (tok.is_eog(id)) eog.push_back(id);
        if (tok.is_control(id)) control.push_back(id);
    }
    EXPECT_EQ(eog, g["eog"].get<std::vector<TokenId>>());
    EXPECT_EQ(control, g["control"].get<std::vector<TokenId>>());
    EXPECT_FALSE(eog.empty());
}

TEST_P(TokenizerGolden, DecodeInvertsEncode) {
    const Tokenizer tok = Tokenizer::from_gguf(gguf::File::open(path_));
    for (const char* s : {"Hello world", "  two  spaces ", "Café 日本語 🎉\n\n\tend", "x\ny", "1234567"}) {
        const bool prefix = tok.add_space_prefix();   // gemma3-space-prefix, Phi-3
        // Gemma's whitespace runs are user-defined tokens, and llama.cpp gives
        // the text after every special token a dummy prefix too (the golden
        // cases check that): no round trip there.
        if (prefix && std::strpbrk(s, "\n\t") != nullptr) continue;
        // Under RSTRIP (a Phi-3 name) the whitespace after those tokens is dropped.
        if (GetParam().general_name && std::strpbrk(s, "\n\t") != nullptr) continue;
        if (prefix && std::strstr(s, "  ") != nullptr) continue;
        const auto ids = tok.encode(s, false, false);
        // A dummy prefix is part of the first piece: decode is the pieces as they stream.
        EXPECT_EQ(tok.decode(ids), (prefix ? " " : "") + std::string(s));
    }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerGolden, ::testing::ValuesIn(kGolden), [](const auto& info) {
    std::string s = info.param.name;
    for (char& ch : s)
        if (ch == '-') ch = '_';
    return s;
});

Tokenizer load(const char* model) { return Tokenizer::from_gguf(gguf::File::open(std::string(PTXLM_MODELS_DIR) + "/" + model)); }

bool valid_utf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = s[i];
        const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        i += n;
    }
    return true;
}

TEST(StreamDecoder, EmitsOnlyWholeCharacters) {
    // SmolLM2's byte-level tokens split CJK and emoji into bytes.
    const Tokenizer tok = load("SmolLM2-135M-Instruct.Q4_1.gguf");
    const std::string text = "日本語 🎉👨‍👩‍👧 ok ñ";
    const auto ids = tok.encode(text, false, false);
    StreamDecoder d(tok);
    std::string all;
    size_t pieces = 0;
    for (TokenId id : ids) {
        const std::string part = d.push(id);
        EXPECT_TRUE(valid_utf8(part)) << "a partial character was emitted";
        all += part;
        pieces += !part.empty();
    }
    all += d.flush();
    EXPECT_EQ(all, text);
    EXPECT_GT(ids.size(), pieces);   // some tokens were held back until their character completed
    // An unfinished character at the end is replaced, not dropped silently.
    StreamDecoder cut(tok);
    std::string out = cut.push(ids[0]);
    out += cut.flush();
    EXPECT_EQ(out, "\xEF\xBF\xBD");
}

TEST(SpecialTokens, NeverFromUserText) {
    const Tokenizer tok = load("SmolLM2-135M-Instruct.Q4_1.gguf");
    const TokenId im_start = *tok.find("<|im_start|>");
    const auto as_user = tok.encode("<|im_start|>system", false, false);
    EXPECT_EQ(std::count(as_user.begin(), as_user.end(), im_start), 0);
    const auto as_template = tok.encode("<|im_start|>system", false, true);
    EXPECT_EQ(as_template.front(), im_start);
    EXPECT_TRUE(tok.is_eog(*tok.find("<|im_end|>")));
    EXPECT_FALSE(tok.is_eog(im_start));
}

TEST(SpecialTokens, OneBosWhenTheTextHasOne) {
    const Tokenizer tok = load("gemma-3-270m-q4_k_m.gguf");
    ASSERT_TRUE(tok.add_bos());
    const auto ids = tok.encode("<bos>Hello", false, true);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok.bos()), 1);
    EXPECT_EQ(ids.front(), *tok.bos());
    EXPECT_TRUE(tok.is_eog(*tok.find("<end_of_turn>")));
    EXPECT_TRUE(tok.is_eog(*tok.eos()));
}

TEST(Robustness, ArbitraryBytesRoundTripThroughByteLevelBpe) {
    const Tokenizer tok = load("SmolLM2-135M-Instruct.Q4_1.gguf");
    // The bytes the vocabulary can represent (SmolLM2 has no token for a few).
    std::vector<char> usable;
    for (int b = 0; b < 256; ++b) {
        try {
            tok.encode(std::string(1, char(b)), false, false);
            usable.push_back(char(b));
        } catch (const std::invalid_argument&) {
        }
    }
    ASSERT_GT(usable.size(), 200u);
    std::mt19937 rng(5);
    for (int round = 0; round < 200; ++round) {
        std::string s(rng() % 64, '\0');
        for (char& c : s) c = usable[rng() % usable.size()];
        EXPECT_EQ(tok.decode(tok.encode(s, false, false)), s);
    }
    // A byte the vocabulary has no token for is a clear error, not a silent drop.
    ASSERT_LT(usable.size(), 256u);
    const char missing = [&] { for (int b = 0;; ++b) if (std::find(usable.begin(), usable.end(), char(b)) == usable.end()) return char(b); }();
    EXPECT_THROW(tok.encode(std::string("a") + missing + "b", false, false), std::invalid_argument);
}

TEST(Robustness, InvalidUtf8DoesNotBreakSentencePiece) {
    const Tokenizer tok = load("gemma-3-270m-q4_k_m.gguf");
    std::mt19937 rng(9);
    for (int round = 0; round < 100; ++round) {
        std::string s(rng() % 48, '\0');
        for (char& c : s) c = static_cast<char>(rng() & 0xFF);
        const auto ids = tok.encode(s, true, true);
        for (TokenId id : ids) ASSERT_TRUE(id >= 0 && id < tok.n_vocab());
    }
}

// A long mixed text round-trips. Its time is printed, not asserted: speed is
// a benchmark's business, and a bound in seconds would depend on the machine
// (a quadratic tokenizer still fails here, by the ctest TIMEOUT).
TEST(LongText, TwentyKilobytesRoundTrip) {
    std::string text;
    for (int i = 0; text.size() < 20000; ++i)
        text += "Paragraph " + std::to_string(i) + ": the quick brown fox, café 日本語 🎉, x = f(y) * 12345;\n";
    for (const char* model : {"SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"}) {
        const Tokenizer tok = load(model);
        const auto t0 = std::chrono::steady_clock::now();
        const auto ids = tok.encode(text, false, false);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_EQ(tok.decode(ids), text);
        EXPECT_GT(ids.size(), text.size() / 8) << model;
        std::printf("%s: %zu bytes -> %zu tokens in %.1f ms\n", model, text.size(), ids.size(), s * 1e3);
    }
}

TEST(Errors, UnsupportedVocabulariesAreNamed) {
    const std::string model = std::string(PTXLM_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
    const std::string path = vocab_only(model, "no-such-pre", "badpre");
    try {
        Tokenizer::from_gguf(gguf::File::open(path));
        ADD_FAILURE() << "no error";
    } catch (const ModelError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("tokenizer.ggml.pre 'no-such-pre' is not supported"), std::string::npos) << m;
        EXPECT_NE(m.find("smollm"), std::string::npos) << m;
    }
    std::filesystem::remove(path);
    // A missing pre-tokenizer name is an error too, never a silent default.
    const std::string nopre = vocab_only(model, kNoPre, "nopre");
    try {
        Tokenizer::from_gguf(gguf::File::open(nopre));
        ADD_FAILURE() << "no error";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("'tokenizer.ggml.pre' is missing"), std::string::npos) << e.what();
    }
    std::filesystem::remove(nopre);
    gguf::Writer w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "wordpiece");
    w.set_strings("tokenizer.ggml.tokens", {"a", "b"});
    const auto bytes = w.serialize();
    try {
        Tokenizer::from_gguf(gguf::File::parse(bytes, "wp.gguf"));
        ADD_FAILURE() << "no error";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model 'wordpiece' is not supported"), std::string::npos)
            << e.what();
    }
}

TEST(Defaults, AddBosFollowsLlamaCppWhenTheKeyIsAbsent) {
    // A three-token byte-level vocabulary: "a" + "b" merge into "ab".
    auto make = [](const char* model, const char* pre) {
        gguf::Writer w;
        w.set_string("general.architecture", "llama");
        w.set_string("tokenizer.ggml.model", model);
        w.set_string("tokenizer.ggml.pre", pre);
        w.set_strings("tokenizer.ggml.tokens", {"a", "b", "ab", "<s>", "<unk>"});
        w.set_i32s("tokenizer.ggml.token_type", {1, 1, 1, 3, 2});
        w.set_f32s("tokenizer.ggml.scores", {-1, -2, -0.5, 0, 0});
        w.set_strings("tokenizer.ggml.merges", {"a b"});
        w.set_u32("tokenizer.ggml.bos_token_id", 3);
        w.set_u32("tokenizer.ggml.unknown_token_id", 4);
        return Tokenizer::from_gguf(gguf::File::parse(w.serialize(), "tiny.gguf"));
    };
    EXPECT_FALSE(make("gpt2", "gpt-2").add_bos());
    EXPECT_TRUE(make("gpt2", "llama-bpe").add_bos());   // llama.cpp's llama3 pre-tokenizers add BOS
    EXPECT_TRUE(make("llama", "").add_bos());           // and SentencePiece vocabularies do
    const Tokenizer t = make("gpt2", "llama-bpe");
    EXPECT_EQ(t.encode("abab", true, false), (std::vector<TokenId>{3, 2, 2}));
    EXPECT_EQ(t.decode(std::vector<TokenId>{3, 2, 0}), "aba");
    EXPECT_EQ(t.decode(std::vector<TokenId>{3, 2, 0}, true), "<s>aba");
}

TEST(Utf8, CompletePrefix) {
    EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
    EXPECT_EQ(utf8_complete_prefix("ab\xE6\x97"), 2u);         // 日 missing its last byte
    EXPECT_EQ(utf8_complete_prefix("ab\xE6\x97\xA5"), 5u);
    EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x8E"), 0u);       // 🎉 cut
    EXPECT_EQ(utf8_complete_prefix("a\x80"), 2u);              // a stray continuation byte will never complete
    const std::string bad = "\xEF\xBF\xBD";
    EXPECT_EQ(utf8_sanitize("ok 日本"), "ok 日本");
    EXPECT_EQ(utf8_sanitize("a\xE6\x97" "b"), "a" + bad + "b");      // a cut character: one replacement
    EXPECT_EQ(utf8_sanitize("\xC0\xAF"), bad + bad);                 // overlong
    EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), bad + bad + bad);      // a surrogate
    EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), bad + bad + bad + bad);   // above U+10FFFF
    EXPECT_TRUE(utf8_valid("🎉"));
    EXPECT_FALSE(utf8_valid("\xF0\x9F\x8E"));
}

}  // namespace

// The vocabulary's storage (engine/string_table.h): index, text and lookup
// over many strings, the first of equal strings found, absent text and
// indices reported.
TEST(StringTable, FindsEveryStringAndOnlyThose) {
    ptxlm::StringTable t;
    std::vector<std::string> all;
    std::mt19937 rng(9);
    for (int i = 0; i < 5000; ++i) {
        std::string s(rng() % 9, '\0');
        for (char& c : s) c = char('a' + rng() % 4);   // short strings over 4 letters: many duplicates
        all.push_back(s);
        t.push_back(s);
    }
    t.build_index();
    ASSERT_EQ(all.size(), t.size());
    for (size_t i = 0; i < all.size(); ++i) {
        EXPECT_EQ(all[i], t[i]);
        const size_t first = size_t(std::find(all.begin(), all.end(), all[i]) - all.begin());
        ASSERT_EQ(std::optional<uint32_t>(uint32_t(first)), t.find(all[i])) << all[i];
    }
    EXPECT_FALSE(t.find("abcdefghij").has_value());
    EXPECT_FALSE(t.find("e").has_value());
    EXPECT_THROW(t.at(all.size()), std::out_of_range);
    ptxlm::StringTable empty;
    empty.build_index();
    EXPECT_FALSE(empty.find("").has_value());
}
