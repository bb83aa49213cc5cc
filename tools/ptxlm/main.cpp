// ptxlm: a single-stream LLM decode engine. Dispatches to the subcommands.
#include <cstdio>
#include <exception>
#include <map>

#include <CLI/CLI.hpp>

#include "engine/hparams.h"
#include "engine/session.h"
#include "gguf/gguf.h"
#include "tools/ptxlm/commands.h"

int main(int argc, char** argv) {
    CLI::App app{"ptxlm: LLM decoding with generated PTX kernels (CPU backend where no GPU is present)"};
    app.require_subcommand(1);
    std::map<CLI::App*, ptxlm::cli::Runner> runners;
    auto add = [&](ptxlm::cli::Runner (*adder)(CLI::App&)) {
        size_t before = app.get_subcommands({}).size();
        ptxlm::cli::Runner run = adder(app);
        runners[app.get_subcommands({})[before]] = std::move(run);
    };
    add(ptxlm::cli::add_run);
    add(ptxlm::cli::add_chat);
    add(ptxlm::cli::add_serve);
    add(ptxlm::cli::add_perplexity);
    add(ptxlm::cli::add_inspect);
    add(ptxlm::cli::add_tokenize);
    add(ptxlm::cli::add_logits);
    add(ptxlm::cli::add_bench);
    add(ptxlm::cli::add_ptx);
    add(ptxlm::cli::add_selftest);
    add(ptxlm::cli::add_profile);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }
    for (auto& [sub, run] : runners) {
        if (sub->parsed()) {
            // Exit 2 for input the user can fix (a flag, a file, a prompt too
            // long for the context), 1 for anything else.
            try {
                return run();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "ptxlm %s: %s\n", sub->get_name().c_str(), e.what());
                const bool users_input = dynamic_cast<const std::invalid_argument*>(&e) ||
                                         dynamic_cast<const ptxlm::ModelError*>(&e) ||
                                         dynamic_cast<const ptxlm::ContextFullError*>(&e) ||
                                         dynamic_cast<const ptxlm::gguf::Error*>(&e);
                return users_input ? 2 : 1;
            }
        }
    }
    return 2;
}
