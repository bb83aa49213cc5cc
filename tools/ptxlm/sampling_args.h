// Sampling and generation options shared by run and chat.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/session.h"

namespace CLI { class App; }

namespace ptxlm::cli {

struct SamplingArgs {
    SamplerParams params;
    bool seed_given = false;
    int32_t n_predict = -1;
    std::vector<std::string> stop;
    bool ignore_eos = false;
    std::string grammar_file, json_schema_file;
};

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty, --seed, -n, --stop, --ignore-eos,
// --grammar-file, --json-schema.
void add_sampling_options(CLI::App& app, SamplingArgs& args);

// --chat-template NAME and --chat-template-file F (one or the other).
void add_template_options(CLI::App& app, TemplateChoice& choice);

// The options checked (std::invalid_argument naming the flag) and a seed
// drawn when none was given.
GenerateOptions generate_options(SamplingArgs& args);

}  // namespace ptxlm::cli
