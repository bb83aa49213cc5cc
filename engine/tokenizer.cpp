#include "engine/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <queue>

#include "engine/grammar.h"
#include "engine/hparams.h"
#include "engine/utf8.h"

namespace ptxlm {

namespace {

enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// Tokens whose output is their vocabulary text as written (control and
// unknown ones only when specials are rendered). Unused tokens and types
// outside the enum give nothing, as in llama.cpp.
bool renders_as_text(int32_t type) { return type == kUnknown || type == kControl || type == kUserDefined; }

// ---- byte-level BPE's byte <-> unicode map ---------------------------------


struct ByteMap {
    std::string to_unicode[256];                      // byte -> its printable character, as UTF-8
    std::unordered_map<std::string, uint8_t> to_byte;  // and back
    ByteMap() {
        uint32_t n = 0;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            to_unicode[b] = utf8_encode(self ? b : 0x100 + n++);
            to_byte[to_unicode[b]] = uint8_t(b);
        }
    }
};
const ByteMap& byte_map() {
    static const ByteMap m;
    return m;
}

size_t utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;   // a stray continuation or invalid byte: one on its own
}

// ---- pre-tokenizer regexes by tokenizer.ggml.pre ----------------------------

const char* const kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Mistral's tekken (llama.cpp's form of the tokenizer.json regex): a word is
// an optional non-letter, then letters that are not a-z followed by letters
// that are not A-Z (or the reverse); digits one by one; "/" ends a punctuation
// run like a newline.
const char* const kTekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// o200k (llama.cpp's "gpt-4o": Phi-4-mini, Llama 4), in llama.cpp's form:
// tekken's case-split words, each with an optional English contraction
// after it, and digits in runs of up to three.
const char* const kGpt4o =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// llama.cpp's fallback for vocabularies converted without a pre-tokenizer
// name: punctuation runs first, then GPT-2's regex, then digit runs cut into
// threes. Only chosen when the file says "default"; a missing key is an error.
const char* const kDefaultPunct = R"([\p{P}\$\+<=>\^~\|]+)";

struct PreSpec {
    const char* name;
    std::vector<const char*> regexes;   // applied in turn, each splitting the previous fragments
    bool ignore_merges;                 // a word that is a vocab token is emitted whole
    bool add_bos;                       // tokenizer.ggml.add_bos_token when the key is absent (as llama.cpp)
};
const std::vector<PreSpec>& pre_specs() {
    static const std::vector<PreSpec> specs = {
        {"default", {kDefaultPunct, kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false, false},
        {"gpt-2", {kGpt2}, false, false},       {"mpt", {kGpt2}, false, false},
        {"olmo", {kGpt2}, false, false},        {"phi-2", {kGpt2}, false, false},
        {"smollm", {R"(\p{N})", kGpt2}, false, false},
        {"starcoder", {R"(\p{N})", kGpt2}, false, false},
        {"refact", {R"(\p{N})", kGpt2}, false, false},
        {"llama3", {kLlama3}, true, true},      {"llama-v3", {kLlama3}, true, true},
        {"llama-bpe", {kLlama3}, true, true},
        {"qwen2", {kQwen2}, false, false},      {"deepseek-r1-qwen", {kQwen2}, false, false},
        {"tekken", {kTekken}, true, true},
        // Phi-4 (cl100k): llama3's regex without its whole-word lookup or BOS.
        {"dbrx", {kLlama3}, false, false},
        {"gpt-4o", {kGpt4o}, false, false},
    };
    return specs;
}

// Gemma 4's tokenizer (tokenizer.ggml.model "gemma4", llama.cpp's
// LLAMA_VOCAB_PRE_TYPE_GEMMA4 whatever tokenizer.ggml.pre says): BPE in
// SentencePiece's spelling. Spaces become U+2581, the text is cut into runs
// of newlines and runs of anything else only, the merges run on raw UTF-8
// characters (no byte-to-unicode map), bytes without a token of their own
// fall back to <0xXX> tokens, and BOS is always added.
const PreSpec& gemma4_spec() {
    static const PreSpec spec{"gemma4", {"[^\\n]+|[\\n]+"}, false, true};
    return spec;
}

class Regex {
public:
    explicit Regex(const char* pattern) {
        int err = 0;
        PCRE2_SIZE off = 0;
        code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
        if (!code_) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            throw std::logic_error(std::string("pre-tokenizer regex does not compile: ") + reinterpret_cast<char*>(msg));
        }
        pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);   // optional speed-up; the interpreter is the fallback
    }
    ~Regex() { pcre2_code_free(code_); }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Splits s into pieces: every match, and the unmatched text between matches.
    void split(std::string_view s, std::vector<std::string_view>& out) const {
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
        size_t pos = 0, gap = 0;
        while (pos <= s.size()) {
            int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, 0, md, nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                pcre2_match_data_free(md);
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                throw std::runtime_error(std::string("pre-tokenizer regex failed: ") + reinterpret_cast<char*>(msg));
            }
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            const size_t b = ov[0], e = ov[1];
            if (e == b) {   // an empty match: move on by one character
                pos = b + (b < s.size() ? utf8_len(static_cast<unsigned char>(s[b])) : 1);
                continue;
            }
            if (b > gap) out.push_back(s.substr(gap, b - gap));
            out.push_back(s.substr(b, e - b));
            gap = pos = e;
        }
        if (gap < s.size()) out.push_back(s.substr(gap));
        pcre2_match_data_free(md);
    }

private:
    pcre2_code* code_ = nullptr;
};

// ---- protobuf wire format, for the in-memory SentencePiece model -----------

struct Proto {
    std::string b;
    void varint(uint64_t v) {
        while (v >= 0x80) { b += char((v & 0x7F) | 0x80); v >>= 7; }
        b += char(v);
    }
    void key(uint32_t field, uint32_t wire) { varint((uint64_t(field) << 3) | wire); }
    void u(uint32_t field, uint64_t v) { key(field, 0); varint(v); }
    void i32(uint32_t field, int32_t v) { key(field, 0); varint(uint64_t(int64_t(v))); }
    void f32(uint32_t field, float v) {
        key(field, 5);
        char c[4];
        std::memcpy(c, &v, 4);
        b.append(c, 4);
    }
    void bytes(uint32_t field, std::string_view s) { key(field, 2); varint(s.size()); b.append(s); }
};

}  // namespace

struct Tokenizer::Impl {
    // SentencePiece
    std::unique_ptr<sentencepiece::SentencePieceProcessor> spm;
    // BPE
    std::vector<std::unique_ptr<Regex>> regexes;
    bool ignore_merges = false;
    bool spm_bpe = false;   // Gemma 4's SentencePiece-style BPE (gemma4_spec)
    std::unordered_map<std::string, int32_t> merge_rank;   // "left right" -> rank
    TokenId byte_token[256] = {};   // -1: the vocabulary has no token for the byte
    // Both: the output bytes of each token (control tokens: their text).
    StringTable pieces;
};

std::vector<std::string> Tokenizer::supported_pre() {
    std::vector<std::string> v;
    for (const PreSpec& p : pre_specs()) v.push_back(p.name);
    return v;
}

Tokenizer Tokenizer::from_gguf(const gguf::File& f) {
    Tokenizer t;
    t.filter_ = std::make_shared<FilterSlot>();
    const std::string where = f.path() + ": ";
    auto model = f.get_string("tokenizer.ggml.model");
    if (!model) throw ModelError(where + "required key 'tokenizer.ggml.model' is missing");
    t.model_ = std::string(*model);
    if (t.model_ != "llama" && t.model_ != "gpt2" && t.model_ != "gemma4")
        throw ModelError(where + "tokenizer.ggml.model '" + t.model_ +
                         "' is not supported (supported: llama (SentencePiece), gpt2 (byte-level BPE), gemma4 "
                         "(SentencePiece-style BPE))");
    t.pre_ = std::string(f.get_string("tokenizer.ggml.pre").value_or(""));
    auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    if (!tokens || tokens->empty()) throw ModelError(where + "required key 'tokenizer.ggml.tokens' is missing or empty");
    if (tokens->size() > size_t(INT32_MAX)) throw ModelError(where + "tokenizer.ggml.tokens has too many entries");
    const size_t n = tokens->size();
    size_t bytes = 0;
    for (std::string_view s : *tokens) bytes += s.size();
    t.tokens_.reserve(n, bytes);
    for (std::string_view s : *tokens) t.tokens_.push_back(s);
    t.types_.assign(n, kNormal);
    if (auto types = f.get_int_array("tokenizer.ggml.token_type")) {
        if (types->size() != n)
            throw ModelError(where + "tokenizer.ggml.token_type has " + std::to_string(types->size()) +
                             " entries, tokenizer.ggml.tokens " + std::to_string(n));
        for (size_t i = 0; i < n; ++i) t.types_[i] = static_cast<int32_t>((*types)[i]);
    }
    std::vector<float> scores(n, 0.0f);
    if (auto s = f.get_f32_array("tokenizer.ggml.scores")) {
        if (s->size() != n)
            throw ModelError(where + "tokenizer.ggml.scores has " + std::to_string(s->size()) +
                             " entries, tokenizer.ggml.tokens " + std::to_string(n));
        scores = *s;
    }
    t.tokens_.build_index();
    auto id_key = [&](const char* key) -> std::optional<TokenId> {
        auto v = f.get_int(key);
        if (!v || *v == -1) return std::nullopt;
        if (*v < 0 || uint64_t(*v) >= n)
            throw ModelError(where + key + " = " + std::to_string(*v) + " is outside the vocabulary of " +
                             std::to_string(n) + " tokens");
        return static_cast<TokenId>(*v);
    };
    t.bos_ = id_key("tokenizer.ggml.bos_token_id");
    t.eos_ = id_key("tokenizer.ggml.eos_token_id");
    t.eot_ = id_key("tokenizer.ggml.eot_token_id");
    const std::optional<TokenId> unk = id_key("tokenizer.ggml.unknown_token_id");
    // End of generation and the token types, as llama-vocab.cpp decides them:
    // the texts it takes for end-of-generation tokens are control tokens
    // whatever type the file gives them ("control-looking token ... its type
    // will be overridden"), and so are the fill-in-the-middle names of each
    // role the file gives no id for (where a vocabulary has two names of one
    // role, llama.cpp overrides only the first its hash map yields; this
    // overrides both). A control token is never produced from user text nor
    // printed without render_special.
    t.eog_.assign(n, false);
    for (const char* s : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                          "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                          "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                          "<｜end▁of▁sentence｜>", "[e~["})
        if (auto id = t.find(s)) {
            t.types_[*id] = kControl;
            t.eog_[*id] = true;
        }
    struct FimRole { const char* key; std::initializer_list<const char*> names; bool eog = false; };
    const FimRole fim[] = {
        {"tokenizer.ggml.fim_pre_token_id",
         {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}},
        {"tokenizer.ggml.fim_suf_token_id",
         {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}},
        {"tokenizer.ggml.fim_mid_token_id",
         {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"}},
        {"tokenizer.ggml.fim_pad_token_id", {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
        // The repository and file separators end generation too.
        {"tokenizer.ggml.fim_rep_token_id", {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}, true},
        {"tokenizer.ggml.fim_sep_token_id", {"<|file_sep|>"}, true},
    };
    for (const FimRole& r : fim) {
        if (auto id = id_key(r.key)) {
            if (r.eog) t.eog_[*id] = true;
            continue;
        }
        for (const char* s : r.names)
            if (auto id = t.find(s)) {
                t.types_[*id] = kControl;
                if (r.eog) t.eog_[*id] = true;
            }
    }
    // gpt-oss's channel tokens are always rendered.
    for (const char* s : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
        if (auto id = t.find(s)) t.types_[*id] = kUserDefined;
    for (auto id : {t.eos_, t.eot_, id_key("tokenizer.ggml.eom_token_id")})
        if (id) t.eog_[*id] = true;
    auto eog_text = [&](const char* s) -> std::optional<TokenId> {
        auto id = t.find(s);
        return id && t.eog_[*id] ? id : std::nullopt;
    };
    // o200k_harmony and solar-open: <|end|> ends a message, not generation.
    const bool call = eog_text("<|call|>") || eog_text("<|calls|>");
    if (auto end = eog_text("<|end|>"); end && call && (eog_text("<|return|>") || eog_text("<|flush|>"))) {
        t.eog_[*end] = false;
        t.types_[*end] = kUserDefined;
    }
    // Gemma 4 (and PLaMo): </s> is a normal token.
    if (auto s = eog_text("</s>"); s && (eog_text("<|tool_response>") || eog_text("<|plamo:eos|>"))) {
        t.eog_[*s] = false;
        t.types_[*s] = kNormal;
    }
    const bool spm = t.model_ == "llama", spm_bpe = t.model_ == "gemma4";
    const PreSpec* spec = nullptr;
    if (spm_bpe) {
        spec = &gemma4_spec();
        t.pre_ = spec->name;   // llama.cpp's choice for this tokenizer model
    } else if (!spm) {
        const auto& specs = pre_specs();
        auto it = std::find_if(specs.begin(), specs.end(), [&](const PreSpec& p) { return t.pre_ == p.name; });
        if (it == specs.end()) {
            std::string list;
            for (const std::string& p : supported_pre()) list += (list.empty() ? "" : ", ") + p;
            throw ModelError(where + (f.get_string("tokenizer.ggml.pre")
                                          ? "tokenizer.ggml.pre '" + t.pre_ + "' is not supported"
                                          : std::string("required key 'tokenizer.ggml.pre' is missing")) +
                             " (supported: " + list + ")");
        }
        spec = &*it;
    }
    t.add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm || spec->add_bos);
    if (spm_bpe) t.add_bos_ = true;   // llama.cpp overrides a false add_bos_token for Gemma 4
    t.add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
    if (t.add_bos_ && !t.bos_) throw ModelError(where + "tokenizer.ggml.add_bos_token is set but there is no bos_token_id");

    // Special tokens, longest text first, in llama.cpp's matching order: the
    // same ids in the same order through the same std::sort (libstdc++'s, not
    // stable), as the order among equal lengths decides a split where one
    // token's strip attribute removes another's text.
    for (size_t i = 0; i < n; ++i)
        if (t.types_[i] == kControl || t.types_[i] == kUserDefined || t.types_[i] == kUnknown)
            t.specials_.push_back(static_cast<TokenId>(i));
    std::sort(t.specials_.begin(), t.specials_.end(),
              [&](TokenId a, TokenId b) { return t.tokens_[a].size() > t.tokens_[b].size(); });
    std::erase_if(t.specials_, [&](TokenId id) { return t.tokens_[id].empty(); });
    // llama.cpp's per-model token attributes (llama-vocab.cpp, "set
    // attributes by model/tokenizer/architecture name"): a general.name that
    // contains "phi-3" or "phi3", lower-cased, gives every special token
    // RSTRIP, and </s> too, then takes it from <unk>, <s> and <|endoftext|>.
    // (Its other rules, LSTRIP on <mask> / [MASK], are for BERT-family
    // architectures ptxlm does not run.)
    t.rstrip_.assign(n, false);
    std::string name(f.get_string("general.name").value_or(""));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
        for (TokenId id : t.specials_) t.rstrip_[id] = true;
        if (auto id = t.find("</s>")) t.rstrip_[*id] = true;
        for (const char* s : {"<unk>", "<s>", "<|endoftext|>"})
            if (auto id = t.find(s)) t.rstrip_[*id] = false;
    }

    auto impl = std::make_shared<Impl>();
    if (spm) {
        Proto m;
        for (size_t i = 0; i < n; ++i) {
            int32_t type = t.types_[i];
            if (unk && TokenId(i) == *unk) type = kUnknown;
            else if (type == kUnknown || type < kNormal || type > kByte) type = kControl;
            Proto p;
            p.bytes(1, t.tokens_[i].empty() ? std::string("<empty_") + std::to_string(i) + ">" : t.tokens_[i]);
            p.f32(2, scores[i]);
            p.u(3, static_cast<uint64_t>(type));
            m.bytes(1, p.b);
        }
        if (!unk) throw ModelError(where + "a SentencePiece vocabulary needs tokenizer.ggml.unknown_token_id");
        Proto trainer;
        trainer.u(3, 2);   // BPE
        trainer.u(4, n);
        // byte_fallback: sentencepiece insists on all 256 <0xXX> pieces for it;
        // a vocabulary without them encodes unknown characters as <unk>.
        const size_t n_byte = size_t(std::count(t.types_.begin(), t.types_.end(), int32_t(kByte)));
        trainer.u(35, n_byte == 256 ? 1 : 0);
        trainer.i32(40, *unk);
        trainer.i32(41, t.bos_ ? *t.bos_ : -1);
        trainer.i32(42, t.eos_ ? *t.eos_ : -1);
        trainer.i32(43, -1);
        m.bytes(2, trainer.b);
        Proto norm;
        norm.bytes(1, "identity");
        norm.u(3, 0);      // add_dummy_prefix: done here, per fragment, as llama.cpp does
        norm.u(4, 0);      // remove_extra_whitespaces
        norm.u(5, 1);      // escape_whitespaces: ' ' -> U+2581
        m.bytes(3, norm.b);
        impl->spm = std::make_unique<sentencepiece::SentencePieceProcessor>();
        auto st = impl->spm->LoadFromSerializedProto(m.b);
        if (!st.ok()) throw ModelError(where + "the SentencePiece vocabulary does not load: " + st.ToString());
        std::string out;
        for (size_t i = 0; i < n; ++i) {
            const std::string_view s = t.tokens_[i];
            out.clear();
            if (t.types_[i] == kByte && s.size() == 6 && s.substr(0, 3) == "<0x") {
                out = char(std::stoi(std::string(s.substr(3, 2)), nullptr, 16));
            } else if (t.types_[i] == kNormal) {
                for (size_t k = 0; k < s.size();) {
                    if (s.substr(k, 3) == "\xE2\x96\x81") { out += ' '; k += 3; }
                    else out += s[k++];
                }
            } else if (renders_as_text(t.types_[i])) {
                out = s;
            }
            impl->pieces.push_back(out);
        }
    } else {
        for (const char* r : spec->regexes) impl->regexes.push_back(std::make_unique<Regex>(r));
        impl->ignore_merges = spec->ignore_merges;
        impl->spm_bpe = spm_bpe;
        auto merges = f.get_string_array("tokenizer.ggml.merges");
        if (!merges) throw ModelError(where + "required key 'tokenizer.ggml.merges' is missing");
        for (size_t r = 0; r < merges->size(); ++r) impl->merge_rank.emplace(std::string((*merges)[r]), int32_t(r));
        const ByteMap& bm = byte_map();
        for (int b = 0; b < 256; ++b) {
            // A vocabulary may lack tokens for bytes its training text never had.
            char hex[8];
            std::snprintf(hex, sizeof hex, "<0x%02X>", unsigned(b));
            impl->byte_token[b] = t.find(spm_bpe ? std::string(hex) : bm.to_unicode[b]).value_or(-1);
        }
        std::string out;
        for (size_t i = 0; i < n; ++i) {
            const std::string_view s = t.tokens_[i];
            out.clear();
            if (t.types_[i] != kNormal && t.types_[i] != kByte) {
                if (renders_as_text(t.types_[i])) out = s;
                impl->pieces.push_back(out);
                continue;
            }
            if (spm_bpe) {   // llama.cpp: <0xXX> byte tokens are their byte, U+2581 a space
                if (t.types_[i] == kByte && s.size() == 6 && s.substr(0, 3) == "<0x")
                    out = char(std::stoi(std::string(s.substr(3, 2)), nullptr, 16));
                else
                    for (size_t k = 0; k < s.size();) {
                        if (s.substr(k, 3) == "\xE2\x96\x81") { out += ' '; k += 3; }
                        else out += s[k++];
                    }
                impl->pieces.push_back(out);
                continue;
            }
            for (size_t k = 0; k < s.size();) {
                const size_t len = std::min(utf8_len(static_cast<unsigned char>(s[k])), s.size() - k);
                auto it = bm.to_byte.find(std::string(s.substr(k, len)));
                if (it != bm.to_byte.end()) out += char(it->second);
                else out.append(s.substr(k, len));
                k += len;
            }
            impl->pieces.push_back(out);
        }
    }
    t.impl_ = std::move(impl);
    return t;
}

std::optional<TokenId> Tokenizer::find(std::string_view text) const {
    const std::optional<uint32_t> id = tokens_.find(text);
    if (!id) return std::nullopt;
    return static_cast<TokenId>(*id);
}

bool Tokenizer::is_eog(TokenId id) const { return id >= 0 && size_t(id) < eog_.size() && eog_[id]; }
bool Tokenizer::is_control(TokenId id) const { return id >= 0 && id < n_vocab() && types_[id] == kControl; }
bool Tokenizer::is_special(TokenId id) const {
    if (id < 0 || id >= n_vocab()) return false;
    const int32_t ty = types_[id];
    return ty == kControl || ty == kUserDefined || ty == kUnknown;
}

bool Tokenizer::is_format_token(TokenId id) const {
    if (id < 0 || id >= n_vocab() || types_[id] != kControl) return false;
    static constexpr std::string_view kFormat[] = {"<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]",
                                                   "[CALL_ID]",   "<|python_tag|>", "<think>",    "</think>",
                                                   "[THINK]",     "[/THINK]"};
    const std::string_view t = tokens_[size_t(id)];
    for (std::string_view f : kFormat)
        if (t == f) return true;
    return false;
}

std::string Tokenizer::piece(TokenId id, bool render_special) const {
    if (id < 0 || id >= n_vocab()) return {};
    if ((types_[id] == kControl || types_[id] == kUnknown) && !render_special && !is_format_token(id)) return {};
    return std::string(impl_->pieces[id]);
}

struct Tokenizer::FilterSlot {
    std::once_flag once;
    std::unique_ptr<grammar::TokenFilter> filter;
};

const grammar::TokenFilter& Tokenizer::grammar_filter() const {
    std::call_once(filter_->once, [this] {
        std::vector<std::string> bytes(static_cast<size_t>(n_vocab()));
        std::vector<int32_t> ends;
        for (TokenId id = 0; id < n_vocab(); ++id) {
            if (is_eog(id)) ends.push_back(id);
            else bytes[size_t(id)] = piece(id);
        }
        filter_->filter = std::make_unique<grammar::TokenFilter>(std::move(bytes), std::move(ends));
    });
    return *filter_->filter;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool render_special) const {
    std::string s;
    for (TokenId id : ids) s += piece(id, render_special);
    return s;
}

namespace {

[[noreturn]] void throw_unrepresentable(uint8_t byte) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", unsigned(byte));
    throw std::invalid_argument(std::string("the text contains byte ") + hex +
                                ", which this model's vocabulary cannot represent");
}

}  // namespace

void Tokenizer::encode_text(std::string_view text, bool prev_special, std::vector<TokenId>& out) const {
    const Impl& im = *impl_;
    if (im.spm) {
        std::string s;
        if (add_space_prefix_ && prev_special) s = " ";
        s.append(text);
        std::vector<int> ids;
        if (!im.spm->Encode(s, &ids).ok()) throw std::runtime_error("SentencePiece could not encode the text");
        out.insert(out.end(), ids.begin(), ids.end());
        return;
    }
    // Byte-level BPE: the regexes cut the text into words, each merged on its own.
    std::string escaped;
    if (im.spm_bpe) {   // Gemma 4: spaces spelled U+2581 first
        for (char c : text) {
            if (c == ' ') escaped += "\xE2\x96\x81";
            else escaped += c;
        }
        text = escaped;
    }
    std::vector<std::string_view> words{text}, next;
    for (const auto& re : im.regexes) {
        next.clear();
        for (std::string_view w : words) re->split(w, next);
        words.swap(next);
    }
    const ByteMap& bm = byte_map();
    struct Sym { std::string text; int prev, next; bool alive; };
    for (std::string_view w : words) {
        std::vector<Sym> sym;
        if (im.spm_bpe) {
            // Gemma 4: a run of newlines that is a token is taken whole
            // (llama.cpp's fix for it); else the word's UTF-8 characters.
            if (w.find_first_not_of('\n') == std::string_view::npos)
                if (auto id = find(w)) { out.push_back(*id); continue; }
            for (size_t k = 0; k < w.size();) {
                const size_t len = std::min(utf8_len(static_cast<unsigned char>(w[k])), w.size() - k);
                const int i = int(sym.size());
                sym.push_back({std::string(w.substr(k, len)), i - 1, i + 1, true});
                k += len;
            }
        } else {
            std::string mapped;
            for (unsigned char c : w) mapped += bm.to_unicode[c];
            if (im.ignore_merges) {
                if (auto id = find(mapped)) { out.push_back(*id); continue; }
            }
            for (unsigned char c : w) {
                const int i = int(sym.size());
                sym.push_back({bm.to_unicode[c], i - 1, i + 1, true});
            }
        }
        if (sym.empty()) continue;
        sym.back().next = -1;
        // Lowest rank first, leftmost among equal ranks.
        struct Pair { int32_t rank; int left; size_t llen, rlen; };
        auto cmp = [](const Pair& a, const Pair& b) { return a.rank != b.rank ? a.rank > b.rank : a.left > b.left; };
        std::priority_queue<Pair, std::vector<Pair>, decltype(cmp)> q(cmp);
        auto try_pair = [&](int l) {
            if (l < 0 || sym[l].next < 0) return;
            const Sym& a = sym[l];
            const Sym& b = sym[a.next];
            auto it = im.merge_rank.find(a.text + " " + b.text);
            if (it != im.merge_rank.end()) q.push({it->second, l, a.text.size(), b.text.size()});
        };
        for (int i = 0; i + 1 < int(sym.size()); ++i) try_pair(i);
        while (!q.empty()) {
            const Pair p = q.top();
            q.pop();
            Sym& a = sym[p.left];
            // Stale: a side has merged since the pair was queued.
            if (!a.alive || a.next < 0 || a.text.size() != p.llen || sym[a.next].text.size() != p.rlen) continue;
            Sym& b = sym[a.next];
            a.text += b.text;
            b.alive = false;
            a.next = b.next;
            if (a.next >= 0) sym[a.next].prev = p.left;
            try_pair(a.prev);
            try_pair(p.left);
        }
        for (int i = 0; i >= 0; i = sym[i].next) {
            if (auto id = find(sym[i].text)) {
                out.push_back(*id);
                continue;
            }
            // Not in the vocabulary: its bytes, one token each.
            const std::string& s = sym[i].text;
            if (im.spm_bpe) {   // raw bytes, each its <0xXX> token
                for (unsigned char c : s) {
                    if (im.byte_token[c] < 0) throw_unrepresentable(c);
                    out.push_back(im.byte_token[c]);
                }
                continue;
            }
            for (size_t k = 0; k < s.size();) {
                const size_t len = std::min(utf8_len(static_cast<unsigned char>(s[k])), s.size() - k);
                auto it = bm.to_byte.find(s.substr(k, len));
                // Symbols are built from mapped bytes only, so every character maps back.
                if (it == bm.to_byte.end()) throw std::logic_error("byte-level BPE symbol with an unmapped character");
                const TokenId bt = im.byte_token[it->second];
                if (bt < 0) throw_unrepresentable(it->second);
                out.push_back(bt);
                k += len;
            }
        }
    }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    // Fragments: raw text or a special token, in order.
    struct Frag { std::string_view text; TokenId id; };   // id < 0: raw text
    std::vector<Frag> frags;
    if (!text.empty()) frags.push_back({text, -1});
    std::vector<Frag> next;
    for (TokenId sid : specials_) {
        if (!parse_special && types_[sid] != kUserDefined) continue;
        const std::string_view s = tokens_[sid];
        bool any = false;
        for (const Frag& f : frags)
            if (f.id < 0 && f.text.find(s) != std::string_view::npos) { any = true; break; }
        if (!any) continue;
        next.clear();
        for (const Frag& f : frags) {
            if (f.id >= 0) { next.push_back(f); continue; }
            std::string_view rest = f.text;
            for (size_t at; (at = rest.find(s)) != std::string_view::npos;) {
                if (at > 0) next.push_back({rest.substr(0, at), -1});
                next.push_back({{}, sid});
                rest = rest.substr(at + s.size());
                if (rstrip_[sid])   // C's isspace, as llama.cpp's partition
                    while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front()))) rest.remove_prefix(1);
            }
            if (!rest.empty()) next.push_back({rest, -1});
        }
        frags.swap(next);
    }
    std::vector<TokenId> out;
    if (add_bos && bos_) out.push_back(*bos_);
    bool prev_special = true;
    for (const Frag& f : frags) {
        if (f.id >= 0) {
            out.push_back(f.id);
            prev_special = true;
        } else {
            encode_text(f.text, prev_special, out);
            prev_special = false;
        }
    }
    return out;
}

size_t utf8_complete_prefix(std::string_view s) {
    // Look back at most 3 bytes for the start of an unfinished character.
    const size_t n = s.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const unsigned char c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;   // a continuation byte: keep looking
        const size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

namespace {

// The character at s[i]: its length and whether it is well-formed. An
// ill-formed one is the maximal prefix of a possible character (so a cut
// character counts once, as Unicode's replacement practice asks).
std::pair<size_t, bool> utf8_char_at(std::string_view s, size_t i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) return {1, true};
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;   // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return {1, false};
    size_t k = 1;
    if (i + 1 < s.size()) {
        const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
        if (c1 >= lo && c1 <= hi) {
            k = 2;
            while (k < n && i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80) ++k;
        }
    }
    return {k, k == n};
}

}  // namespace

std::string utf8_sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const auto [n, ok] = utf8_char_at(s, i);
        if (ok) out.append(s.substr(i, n));
        else out += "\xEF\xBF\xBD";
        i += n;
    }
    return out;
}

bool utf8_valid(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const auto [n, ok] = utf8_char_at(s, i);
        if (!ok) return false;
        i += n;
    }
    return true;
}

std::string StreamDecoder::push(TokenId id) {
    pending_ += t_.piece(id, special_);
    const size_t k = utf8_complete_prefix(pending_);
    std::string out = utf8_sanitize(std::string_view(pending_).substr(0, k));
    pending_.erase(0, k);
    return out;
}

std::string StreamDecoder::flush() {
    // An unfinished character at the end: its bytes can no longer complete.
    std::string out = utf8_sanitize(pending_);
    pending_.clear();
    return out;
}

}  // namespace ptxlm
