// `ptxlm run -m MODEL -p PROMPT`: one completion, streamed to stdout, with a
// timing line on stderr; `--json` prints one object instead.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/chat_prompt.h"
#include "tools/ptxlm/commands.h"
#include "tools/ptxlm/engine_args.h"
#include "tools/ptxlm/sampling_args.h"

namespace ptxlm::cli {

namespace {

struct Args {
    EngineArgs engine;
    SamplingArgs sampling;
    std::string prompt, prompt_file, system;
    TemplateChoice chat_template;
    bool chat = false, special = false, json = false;
};

nlohmann::json timings_json(const Timings& t) {
    return {{"prompt_tokens", t.prompt_tokens}, {"prompt_ms", t.prompt_ms}, {"prompt_per_second", t.prompt_tps()},
            {"generated_tokens", t.generated},  {"generate_ms", t.generate_ms}, {"generate_per_second", t.generate_tps()}};
}

int run(Args& a) {
    if (!a.prompt_file.empty()) {
        std::ifstream in(a.prompt_file, std::ios::binary);
        if (!in) throw std::invalid_argument("-f " + a.prompt_file + ": cannot open the file");
        std::stringstream ss;
        ss << in.rdbuf();
        a.prompt = ss.str();
    }
    if (!a.chat && (!a.system.empty() || !a.chat_template.name.empty() || !a.chat_template.file.empty()))
        throw std::invalid_argument("--system, --chat-template and --chat-template-file need --chat");
    GenerateOptions gen = generate_options(a.sampling);
    Engine e = open_engine(a.engine);
    const Tokenizer& tok = *e.tokenizer;

    std::vector<TokenId> prompt;
    if (a.chat) {
        const ChatTemplate tmpl = model_chat_template(*e.model, a.chat_template);
        std::vector<ChatMessage> msgs;
        if (!a.system.empty()) msgs.push_back({"system", a.system});
        msgs.push_back({"user", a.prompt});
        prompt = chat_prompt_tokens(tok, tmpl, msgs, true);
    } else {
        prompt = tok.encode(a.prompt, tok.add_bos(), a.special);
    }
    if (prompt.empty()) throw std::invalid_argument("-p: the prompt is empty");

    Session s(*e.backend, tok);
    s.prefill(prompt);
    Generation g = s.generate(gen, [&](std::string_view text) {
        if (!a.json) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
        }
    });
    const Timings& t = g.timings;
    if (a.json) {
        nlohmann::json j = {{"model", e.model->file.path()},
                            {"prompt_tokens", prompt},
                            {"tokens", g.tokens},
                            {"text", g.text},
                            {"finish_reason", finish_reason_name(g.finish)},
                            {"seed", gen.sampling.seed},
                            {"timings", timings_json(t)}};
        // Generated text may end inside a UTF-8 character: replace, never fail.
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
        std::printf("\n");
        std::fprintf(stderr, "prompt: %u tokens, %.1f tok/s | generated: %u tokens, %.1f tok/s | %s | seed %llu\n",
                     t.prompt_tokens, t.prompt_tps(), t.generated, t.generate_tps(), finish_reason_name(g.finish),
                     static_cast<unsigned long long>(gen.sampling.seed));
    }
    return 0;
}

}  // namespace

Runner add_run(CLI::App& app) {
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("run", "complete a prompt, streaming the text to stdout");
    add_engine_options(*sub, a->engine);
    add_sampling_options(*sub, a->sampling);
    auto* p = sub->add_option("-p,--prompt", a->prompt, "the prompt");
    auto* f = sub->add_option("-f,--file", a->prompt_file, "read the prompt from a file");
    p->excludes(f);
    sub->add_flag("--chat", a->chat, "wrap the prompt in the model's chat template as a user turn");
    sub->add_option("--system", a->system, "system prompt (with --chat)");
    add_template_options(*sub, a->chat_template);
    sub->add_flag("--special", a->special, "recognise control tokens written in the prompt (e.g. <|im_start|>)");
    sub->add_flag("--json", a->json, "print one JSON object (prompt and generated ids, text, finish reason, timings)");
    sub->callback([sub] {
        if (sub->count("--prompt") + sub->count("--file") == 0) throw CLI::RequiredError("-p/--prompt or -f/--file");
    });
    return [a] { return run(*a); };
}

}  // namespace ptxlm::cli
