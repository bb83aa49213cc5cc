// `ptxlm serve [-m MODEL] [--port 8080]`: the OpenAI-compatible HTTP server
// (server/). Prints "listening on http://HOST:PORT" on stdout once bound,
// loads the model in the background, serves until SIGINT or SIGTERM.
#include <cstdlib>
#include <filesystem>

#include <CLI/CLI.hpp>

#include "engine/chat_prompt.h"
#include "server/server.h"
#include "server/utility.h"
#include "tools/ptxlm/commands.h"
#include "tools/ptxlm/engine_args.h"
#include "tools/ptxlm/sampling_args.h"

namespace ptxlm::cli {

namespace {

struct Args {
    EngineArgs engine;
    server::ServerOptions server;
    TemplateChoice chat_template;
    const CLI::Option* batch_tokens = nullptr;   // to tell a given --batch-tokens from the default
};

int run(Args& a) {
    server::ServerOptions opt = a.server;
    server::EngineOptions& e = opt.engine;
    e.model_path = a.engine.model.empty() ? default_model_path(DefaultModel::Chat) : a.engine.model;
    if (a.engine.model.empty() && !std::filesystem::exists(e.model_path))
        throw ModelError("the default model " + e.model_path + " is missing: run models/fetch (./run.sh does), or pass -m MODEL");
    if (!std::filesystem::exists(e.model_path)) throw ModelError(e.model_path + ": no such file");
    e.device = parse_device(a.engine.device);
    e.backend = engine_backend_options(a.engine);
    // The shared pool's options mean nothing to one slot: refused, not ignored.
    const bool batched = e.parallel > 1;
    if (!batched && e.kv_size != 0)
        throw std::invalid_argument("--kv-size sizes the KV pool that --parallel slots share; with --parallel 1 there "
                                    "is no pool: -c sizes the one KV cache");
    if (!batched && a.batch_tokens->count() > 0)
        throw std::invalid_argument("--batch-tokens sizes the batched steps of --parallel slots; with --parallel 1 a "
                                    "prompt is evaluated in steps of the backend's own size");
    // A family name or a file that cannot serve is an error at start, not
    // on the first chat request.
    if (!a.chat_template.name.empty() || !a.chat_template.file.empty())
        ChatTemplate::for_model(std::nullopt, "", a.chat_template);
    e.chat_template = a.chat_template;
    if (opt.api_key.empty())
        if (const char* k = std::getenv("PTXLM_API_KEY"); k && *k) opt.api_key = k;
    for (const std::string& o : opt.cors_origins) {
        server::check_cors_origin(o);
        if (o == "*" && opt.cors_origins.size() > 1)
            throw std::invalid_argument("--cors-origin '*' allows every origin: give it alone, not with other origins");
    }
    validate(opt.defaults.sampling);
    return server::run_server(opt);
}

}  // namespace

Runner add_serve(CLI::App& app) {
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat and completions, streamed)");
    add_engine_options(*sub, a->engine, DefaultModel::Chat);
    server::ServerOptions& o = a->server;
    sub->add_option("--host", o.host, "address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)");
    sub->add_option("--port", o.port, "TCP port (default 8080; 0 picks a free one, printed on stdout)")
        ->check(CLI::Range(0, 65535));
    sub->add_option("--api-key", o.api_key,
                    "require 'Authorization: Bearer KEY' on completions, /metrics, /tokenize, /detokenize, "
                    "/apply-template and /props (default: $PTXLM_API_KEY; "
                    "/health, /v1/models and / stay open)");
    sub->add_option("--cors-origin", o.cors_origins,
                    "allow browser pages from ORIGIN (http://localhost:3000; repeatable; '*' for any) to call the "
                    "API: CORS headers and preflight answers (default: none)")
        ->type_name("ORIGIN");
    sub->add_option("--parallel", o.engine.parallel,
                    "requests decoded together (default 1; above 1 the slots share one KV pool and one copy of "
                    "the weights and are evaluated in one batched step per token, on the CPU or the GPU)")
        ->check(CLI::Range(1, 64));
    a->batch_tokens = sub->add_option("--batch-tokens", o.engine.batch_tokens,
                    "--parallel above 1: tokens per batched step while streams are generating, every running "
                    "stream's next token first, then prompt chunks (default 16; a step of prompts alone takes 64 "
                    "on the CPU; at most 16 on the GPU)")
        ->check(CLI::Range(1, 64));
    sub->add_option("--kv-size", o.engine.kv_size,
                    "--parallel above 1: positions of the KV pool the slots share, at least -c (default "
                    "--parallel x -c); a stream that finds no page left waits, its tokens recomputed when it resumes")
        ->check(CLI::Range(uint64_t(1), uint64_t(1) << 32));
    sub->add_option("--queue", o.engine.queue, "requests that may wait for a slot; more get 503 (default 16)")
        ->check(CLI::Range(0, 4096));
    sub->add_option("--max-body", o.max_body, "largest request body in bytes; larger get 413 (default 4 MiB)")
        ->check(CLI::Range(size_t(1024), size_t(1) << 30));
    add_template_options(*sub, a->chat_template);
    // What a request gets for the sampling fields it leaves out: OpenAI's defaults.
    SamplerParams& p = o.defaults.sampling;
    sub->add_option("--temp", p.temperature, "default temperature (default 1, as OpenAI's API)");
    sub->add_option("--top-k", p.top_k, "default top-k; 0 disables (default 0)");
    sub->add_option("--top-p", p.top_p, "default top-p; 1 disables (default 1)");
    sub->add_option("--min-p", p.min_p, "default min-p; 0 disables (default 0)");
    sub->add_option("--repeat-penalty", p.repeat_penalty, "default repetition penalty; 1 disables (default 1)");
    sub->add_option("--repeat-last-n", p.penalty_last_n, "tokens the penalties look back over (default 64)");
    sub->add_option("-n,--max-tokens", o.defaults.max_tokens,
                    "default max_tokens (default: until an end token or a full context)")
        ->check(CLI::Range(-1, 1 << 30));
    return [a] { return run(*a); };
}

}  // namespace ptxlm::cli
