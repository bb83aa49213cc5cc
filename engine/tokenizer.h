// Tokenizers built from a GGUF file's tokenizer.* keys (and general.name,
// for llama.cpp's per-model token attributes).
//
// `tokenizer.ggml.model = llama`: SentencePiece (Gemma 3, Llama 2). The
// sentencepiece library runs a model we build in memory from the file's
// pieces, scores and types (BPE, byte fallback, identity normalizer).
// `tokenizer.ggml.model = gpt2`: byte-level BPE (SmolLM2, Llama 3, Qwen2):
// the pre-tokenizer regexes `tokenizer.ggml.pre` names (PCRE2, Unicode
// properties), then merges by rank.
//
// Special tokens follow llama.cpp: user-defined tokens are always matched in
// text; control tokens only when the caller says the text is template text
// (parse_special). Text pieces between them are tokenized on their own.
// Where llama.cpp gives special tokens the strip attributes (files whose
// general.name names Phi-3: every special token but <unk>, <s> and
// <|endoftext|>, plus </s>), the whitespace after such a token (rstrip) is
// dropped from the text that follows it, as llama.cpp's partition drops it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/string_table.h"
#include "gguf/gguf.h"

namespace ptxlm {

namespace grammar { class TokenFilter; }

using TokenId = int32_t;

class Tokenizer {
public:
    // Throws ModelError naming the key or value at fault (an unknown
    // tokenizer.ggml.model or .pre lists the supported ones).
    static Tokenizer from_gguf(const gguf::File& f);

    // Supported tokenizer.ggml.pre values of gpt2 vocabularies.
    static std::vector<std::string> supported_pre();

    // add_bos: put BOS first. parse_special: control tokens written in the
    // text become their ids (template text); otherwise they stay text.
    std::vector<TokenId> encode(std::string_view text, bool add_bos, bool parse_special) const;

    // The bytes token `id` contributes to output. Control tokens give ""
    // unless render_special, except the ones that mark tool calls and
    // reasoning in an answer ([TOOL_CALLS], [ARGS], <tool_call>, <think>,
    // ...: see is_format_token), which the answer's parser must see.
    std::string piece(TokenId id, bool render_special = false) const;
    // A control token that marks a tool call or a reasoning block in answers.
    bool is_format_token(TokenId id) const;
    std::string decode(std::span<const TokenId> ids, bool render_special = false) const;

    int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
    std::optional<TokenId> bos() const { return bos_; }
    std::optional<TokenId> eos() const { return eos_; }
    std::optional<TokenId> eot() const { return eot_; }
    bool add_bos() const { return add_bos_; }
    // SentencePiece's dummy prefix: a space before the text (and, as
    // llama.cpp does, after each special token).
    bool add_space_prefix() const { return add_space_prefix_; }
    // End of generation: EOS, EOT, and the end-of-turn control tokens models use.
    bool is_eog(TokenId id) const;
    bool is_control(TokenId id) const;
    // Control, user-defined or unknown: matched as a whole in template text.
    bool is_special(TokenId id) const;
    std::optional<TokenId> find(std::string_view text) const;
    std::string_view text(TokenId id) const { return tokens_.at(static_cast<size_t>(id)); }
    const std::string& model() const { return model_; }
    const std::string& pre() const { return pre_; }

    // The grammar filter of this vocabulary (engine/grammar.h): each token's
    // piece, control tokens other than format tokens never allowed, the
    // end-of-generation tokens as its end tokens. Built on first use (tens
    // to hundreds of ms), then shared by every copy of this tokenizer.
    const grammar::TokenFilter& grammar_filter() const;

    struct Impl;   // the model-specific half (SentencePiece or BPE)

private:
    Tokenizer() = default;
    void encode_text(std::string_view text, bool prev_special, std::vector<TokenId>& out) const;

    std::string model_, pre_;
    StringTable tokens_;   // indexed: find()
    std::vector<int32_t> types_;
    std::vector<TokenId> specials_;        // longest text first
    std::vector<bool> rstrip_;             // per token: drop the whitespace after it (llama.cpp's RSTRIP)
    std::vector<bool> eog_;
    std::optional<TokenId> bos_, eos_, eot_;
    bool add_bos_ = false;
    bool add_space_prefix_ = false;
    std::shared_ptr<const Impl> impl_;
    struct FilterSlot;
    std::shared_ptr<FilterSlot> filter_;
};

// Streaming detokenization: push ids, get back only complete, valid UTF-8
// characters (a byte sequence that can never become a character, as models
// sometimes produce, comes out as U+FFFD); flush() returns what remains
// (an unfinished character as U+FFFD).
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& t, bool render_special = false) : t_(t), special_(render_special) {}
    std::string push(TokenId id);
    std::string flush();

private:
    const Tokenizer& t_;
    bool special_;
    std::string pending_;
};

// Length of the longest prefix of s that is whole UTF-8 characters, leaving
// out at most 3 trailing bytes of a character that may still be completed.
// Invalid bytes count as whole (they will never be completed).
size_t utf8_complete_prefix(std::string_view s);

// s with every byte that is not part of a well-formed UTF-8 character
// (RFC 3629: no overlongs, surrogates or code points above U+10FFFF)
// replaced by U+FFFD.
std::string utf8_sanitize(std::string_view s);
bool utf8_valid(std::string_view s);

}  // namespace ptxlm
