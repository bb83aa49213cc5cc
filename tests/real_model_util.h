// The prompt the GPU tests run on a real model: the file from
// PTXLM_MODELS_DIR (models/fetch, run by ./run.sh, puts it there) and
// "The capital of France is" in its own tokens, BOS as the model asks.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/tokenizer.h"

namespace ptxlm::testing_util {

struct RealPrompt {
    Model model;
    std::vector<TokenId> ids;
};

// Throws naming the file when it is missing (the test fails; it never skips).
inline RealPrompt real_model_prompt(const char* file) {
    const std::string path = std::string(PTXLM_MODELS_DIR) + "/" + file;
    if (!std::filesystem::exists(path))
        throw std::runtime_error(path + " is missing: models/fetch (run by ./run.sh) puts it there");
    RealPrompt r{Model::load(path), {}};
    const Tokenizer tok = Tokenizer::from_gguf(r.model.file);
    r.ids = tok.encode("The capital of France is", tok.add_bos(), false);
    return r;
}

}  // namespace ptxlm::testing_util
