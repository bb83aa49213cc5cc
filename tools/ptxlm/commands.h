// Subcommands of the ptxlm executable. Each registers its options on the CLI
// and returns the process exit code when run (0 ok, 2 bad input, 1 failure).
#pragma once

#include <functional>

namespace CLI { class App; }

namespace ptxlm::cli {

using Runner = std::function<int()>;

Runner add_inspect(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_perplexity(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_ptx(CLI::App& app);
Runner add_selftest(CLI::App& app);
Runner add_profile(CLI::App& app);
Runner add_serve(CLI::App& app);

}  // namespace ptxlm::cli
