// `ptxlm chat [-m MODEL] [--system TEXT]`: interactive multi-turn chat.
//
// Line editing and history through libedit when stdin is a terminal; piped
// input is read one turn per line. A line ending in a backslash continues on
// the next. Ctrl-C stops the reply being generated (a second Ctrl-C at the
// prompt, or end of input, leaves). The KV cache is kept across turns: each
// turn evaluates only the tokens the cached conversation does not already
// hold.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <editline/readline.h>

#include <CLI/CLI.hpp>

#include "engine/chat_prompt.h"
#include "tools/ptxlm/commands.h"
#include "tools/ptxlm/engine_args.h"
#include "tools/ptxlm/sampling_args.h"

namespace ptxlm::cli {

namespace {

std::atomic<bool> g_interrupt{false};

void on_sigint(int) { g_interrupt.store(true); }

struct Args {
    EngineArgs engine;
    SamplingArgs sampling;
    std::string system;
    TemplateChoice chat_template;
    bool verbose = false;
};

class Input {
public:
    Input() : tty_(isatty(STDIN_FILENO)) {}
    bool tty() const { return tty_; }

    // One message (continuation lines joined); nullopt at end of input.
    std::optional<std::string> read() {
        std::string msg;
        for (bool first = true;; first = false) {
            std::optional<std::string> line = read_line(first ? "> " : ". ");
            if (!line) {
                if (msg.empty()) return std::nullopt;
                return msg;
            }
            if (!line->empty() && line->back() == '\\') {
                msg += line->substr(0, line->size() - 1) + "\n";
                continue;
            }
            msg += *line;
            if (tty_ && !msg.empty()) add_history(msg.c_str());
            return msg;
        }
    }

private:
    std::optional<std::string> read_line(const char* prompt) {
        if (!tty_) {
            std::string line;
            if (!std::getline(std::cin, line)) return std::nullopt;
            if (!line.empty() && line.back() == '\r') line.pop_back();
            return line;
        }
        for (;;) {
            g_interrupt.store(false);
            char* raw = readline(prompt);
            if (!raw) {
                // Ctrl-C at the prompt abandons the line; Ctrl-D ends the chat.
                if (g_interrupt.exchange(false)) { std::printf("\n"); continue; }
                std::printf("\n");
                return std::nullopt;
            }
            std::string line(raw);
            std::free(raw);
            return line;
        }
    }

    bool tty_;
};

int run(Args& a) {
    GenerateOptions gen = generate_options(a.sampling);
    Engine e = open_engine(a.engine);
    const Tokenizer& tok = *e.tokenizer;
    const ChatTemplate tmpl = model_chat_template(*e.model, a.chat_template);
    Session session(*e.backend, tok);

    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;   // no SA_RESTART: a read at the prompt returns
    sigaction(SIGINT, &sa, nullptr);

    Input in;
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    if (in.tty())
        std::fprintf(stderr, "ptxlm chat: template %s. Enter sends, a trailing \\ continues the line, "
                             "Ctrl-C stops a reply, /reset clears the conversation, /exit or Ctrl-D leaves.\n",
                     tmpl.name().c_str());
    while (std::optional<std::string> line = in.read()) {
        if (*line == "/exit" || *line == "/quit") break;
        if (*line == "/reset") {
            msgs.resize(a.system.empty() ? 0 : 1);
            session.reset();
            std::fprintf(stderr, "(conversation cleared)\n");
            continue;
        }
        if (line->empty()) continue;
        msgs.push_back({"user", *line});
        std::vector<TokenId> prompt = chat_prompt_tokens(tok, tmpl, msgs, true);
        try {
            session.prefill(prompt);
        } catch (const ContextFullError&) {
            msgs.pop_back();
            std::fprintf(stderr,
                         "(the conversation would need %zu tokens and the context holds %u: /reset to start over, "
                         "or restart with a larger -c)\n",
                         prompt.size(), session.n_ctx());
            continue;
        }
        g_interrupt.store(false);
        Generation g = session.generate(gen, [](std::string_view text) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
        }, &g_interrupt);
        std::printf("\n");
        std::fflush(stdout);
        msgs.push_back({"assistant", g.text});
        if (g.finish == FinishReason::Cancelled) std::fprintf(stderr, "(stopped)\n");
        if (g.finish == FinishReason::ContextFull)
            std::fprintf(stderr, "(the context of %u tokens is full: /reset to start over, or restart with a larger -c)\n",
                         session.n_ctx());
        if (a.verbose)
            std::fprintf(stderr, "(prompt %u new + %u cached tokens, %.1f tok/s; %u generated, %.1f tok/s)\n",
                         g.timings.prompt_tokens, g.timings.prompt_reused, g.timings.prompt_tps(), g.timings.generated,
                         g.timings.generate_tps());
    }
    return 0;
}

}  // namespace

Runner add_chat(CLI::App& app) {
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("chat", "interactive chat with a model (the default model without -m)");
    add_engine_options(*sub, a->engine, DefaultModel::Chat);
    add_sampling_options(*sub, a->sampling);
    sub->add_option("--system", a->system, "system prompt");
    add_template_options(*sub, a->chat_template);
    sub->add_flag("-v,--verbose", a->verbose, "print token counts and speeds after each reply");
    return [a] { return run(*a); };
}

}  // namespace ptxlm::cli
