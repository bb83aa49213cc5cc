// libFuzzer entry for the tokenizers: arbitrary bytes as user text and as
// template text, through the byte-level BPE tokenizer of the synthetic
// vocabulary and (when PTXLM_FUZZ_SPM names a GGUF file) a SentencePiece
// one. Every id must be in range; byte-level BPE must give the bytes back;
// streaming detokenization must emit only valid UTF-8 and add up to the
// decode with invalid bytes replaced. An std::invalid_argument (a byte the vocabulary cannot
// represent) is an accepted answer; anything else escaping is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "engine/tokenizer.h"
#include "fuzz/finding.h"
#include "models/synth/synth.h"

namespace {

struct Vocabs {
    std::vector<uint8_t> synth_bytes;
    std::unique_ptr<ptxlm::gguf::File> synth_file, spm_file;
    std::unique_ptr<ptxlm::Tokenizer> bpe, spm;
    Vocabs() {
        ptxlm::synth::Spec spec = ptxlm::synth::preset(ptxlm::synth::Arch::Llama, ptxlm::synth::Size::Tiny);
        synth_bytes = ptxlm::synth::model_bytes(spec);
        synth_file = std::make_unique<ptxlm::gguf::File>(ptxlm::gguf::File::parse(synth_bytes, "synth"));
        bpe = std::make_unique<ptxlm::Tokenizer>(ptxlm::Tokenizer::from_gguf(*synth_file));
        if (const char* p = std::getenv("PTXLM_FUZZ_SPM"); p && *p) {
            spm_file = std::make_unique<ptxlm::gguf::File>(ptxlm::gguf::File::open(p));
            spm = std::make_unique<ptxlm::Tokenizer>(ptxlm::Tokenizer::from_gguf(*spm_file));
        }
    }
};

using ptxlm::fuzz::finding;

void exercise(const ptxlm::Tokenizer& t, std::string_view text, bool special, bool round_trip) {
    std::vector<ptxlm::TokenId> ids;
    try {
        ids = t.encode(text, true, special);
    } catch (const std::invalid_argument&) {
        return;
    }
    for (ptxlm::TokenId id : ids)
        if (id < 0 || id >= t.n_vocab()) finding("token id out of range");
    const std::string whole = t.decode(ids, special);
    if (round_trip && !special && t.decode(std::span(ids).subspan(t.add_bos() ? 1 : 0)) != text)
        finding("byte-level BPE did not give the bytes back");
    ptxlm::StreamDecoder d(t, special);
    std::string streamed;
    for (ptxlm::TokenId id : ids) {
        const std::string part = d.push(id);
        if (!ptxlm::utf8_valid(part)) finding("streamed text is not valid UTF-8");
        streamed += part;
    }
    streamed += d.flush();
    if (streamed != ptxlm::utf8_sanitize(whole)) finding("streamed text differs from the sanitized decode");
}

}  // namespace

std::string ptxlm_fuzz_one(const uint8_t* data, size_t size) {
    static const Vocabs v;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    exercise(*v.bpe, text, false, true);
    exercise(*v.bpe, text, true, false);
    if (v.spm) {
        exercise(*v.spm, text, false, false);
        exercise(*v.spm, text, true, false);
    }
    return "ok";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    (void)ptxlm_fuzz_one(data, size);
    return 0;
}
