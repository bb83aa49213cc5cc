#include "tools/ptxlm/sampling_args.h"

#include <random>

#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "engine/chat_prompt.h"
#include "engine/json_schema.h"
#include "engine/tool_grammar.h"

namespace ptxlm::cli {

void add_sampling_options(CLI::App& app, SamplingArgs& a) {
    SamplerParams& p = a.params;
    app.add_option("-n,--n-predict", a.n_predict, "tokens to generate at most (default: until the end of generation or a full context)")
        ->check(CLI::Range(-1, 1 << 30));
    app.add_option("--temp", p.temperature, "temperature; 0 is greedy (default 0.8)");
    app.add_option("--top-k", p.top_k, "keep the K most likely tokens; 0 disables (default 40)");
    app.add_option("--top-p", p.top_p, "nucleus sampling threshold; 1 disables (default 0.95)");
    app.add_option("--min-p", p.min_p, "drop tokens below this fraction of the best one's probability; 0 disables (default 0.05)");
    app.add_option("--repeat-penalty", p.repeat_penalty, "penalty for repeated tokens; 1 disables (default 1.0)");
    app.add_option("--repeat-last-n", p.penalty_last_n, "tokens the penalties look back over (default 64)");
    app.add_option("--presence-penalty", p.presence_penalty, "subtracted from the logit of every token seen (default 0)");
    app.add_option("--frequency-penalty", p.frequency_penalty, "subtracted once per occurrence of a token seen (default 0)");
    app.add_option("--seed", p.seed, "random seed (default: drawn at start and reported)")->each([&a](const std::string&) { a.seed_given = true; });
    app.add_option("--stop", a.stop, "stop before this text (repeatable)");
    app.add_flag("--ignore-eos", a.ignore_eos, "never stop at an end-of-generation token");
    CLI::Option* g = app.add_option("--grammar-file", a.grammar_file, "the answer follows this GBNF grammar (llama.cpp's syntax)");
    app.add_option("--json-schema", a.json_schema_file, "the answer is JSON valid under this JSON Schema file")->excludes(g);
}

namespace {

std::string read_text(const std::string& flag, const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::invalid_argument(flag + " " + path + ": cannot open the file");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

GenerateOptions generate_options(SamplingArgs& a) {
    if (!a.seed_given) a.params.seed = std::random_device{}();
    validate(a.params);
    for (const auto& s : a.stop)
        if (s.empty()) throw std::invalid_argument("--stop: a stop string must not be empty");
    GenerateOptions o;
    o.max_tokens = a.n_predict;
    o.sampling = a.params;
    o.stop = a.stop;
    o.ignore_eos = a.ignore_eos;
    std::string gbnf;
    std::string flag;
    if (!a.grammar_file.empty()) {
        flag = "--grammar-file " + a.grammar_file;
        gbnf = read_text("--grammar-file", a.grammar_file);
    } else if (!a.json_schema_file.empty()) {
        flag = "--json-schema " + a.json_schema_file;
        const nlohmann::ordered_json schema =
            nlohmann::ordered_json::parse(read_text("--json-schema", a.json_schema_file), nullptr, false);
        if (schema.is_discarded()) throw std::invalid_argument(flag + ": not valid JSON");
        try {
            gbnf = json_schema_to_gbnf(schema);
        } catch (const SchemaError& e) {
            throw std::invalid_argument(flag + ": " + e.what());
        }
    }
    if (!flag.empty()) {
        try {
            o.grammar = make_constraint({gbnf, {}}, tools::Formats{});
        } catch (const grammar::GrammarError& e) {
            throw std::invalid_argument(flag + ": " + e.what());
        }
    }
    return o;
}

void add_template_options(CLI::App& app, TemplateChoice& choice) {
    CLI::Option* name = app.add_option("--chat-template", choice.name,
                                       "a built-in chat template (" + chat_template_names() +
                                           ") instead of the model's own");
    app.add_option("--chat-template-file", choice.file, "a Jinja chat template file instead of the model's own")
        ->excludes(name);
}

}  // namespace ptxlm::cli
