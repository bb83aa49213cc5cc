// `ptxlm logits -m MODEL (--tokens IDS | -p TEXT)`: the logits the engine
// computes at each position of a token sequence, as JSON (teacher forcing:
// the row after feeding token i predicts token i+1). For checking the engine
// against other implementations: per position the top-K (id, logit) pairs and
// the log-sum-exp of the row, and with --full every logit.
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/cpu/cpu_backend.h"
#include "engine/sampler.h"
#include "tools/ptxlm/commands.h"
#include "tools/ptxlm/engine_args.h"

namespace ptxlm::cli {

namespace {

struct Args {
    EngineArgs engine;
    std::string tokens, prompt;
    int top = 20;
    bool full = false;
    bool like_llamacpp = false;
};

std::vector<TokenId> parse_ids(const std::string& s) {
    std::vector<TokenId> ids;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        size_t used = 0;
        long v = -1;
        try { v = std::stol(item, &used); } catch (const std::exception&) { used = 0; }
        if (used != item.size() || v < 0 || v > INT32_MAX)
            throw std::invalid_argument("--tokens: '" + item + "' is not a token id");
        ids.push_back(static_cast<TokenId>(v));
    }
    return ids;
}

int run(const Args& a) {
    if (a.tokens.empty() == a.prompt.empty()) throw std::invalid_argument("give exactly one of --tokens and -p/--prompt");
    Engine e = open_engine(a.engine);
    if (a.like_llamacpp) {
        auto* cpu = dynamic_cast<cpu::CpuBackend*>(e.backend.get());
        if (!cpu) throw std::invalid_argument("--like-llamacpp applies to the CPU backend only");
        cpu->set_input_rounding(cpu::InputRounding::LikeLlamaCpp);
    }
    const std::vector<TokenId> ids =
        a.tokens.empty() ? e.tokenizer->encode(a.prompt, e.tokenizer->add_bos(), true) : parse_ids(a.tokens);
    if (ids.empty()) throw std::invalid_argument("no tokens to evaluate");
    if (ids.size() > e.backend->n_ctx())
        throw std::invalid_argument(std::to_string(ids.size()) + " tokens do not fit the context of " +
                                    std::to_string(e.backend->n_ctx()));
    const uint32_t nv = e.backend->n_vocab();
    std::vector<float> logits(nv);
    std::vector<uint32_t> order(nv);
    nlohmann::json rows = nlohmann::json::array();
    for (uint32_t pos = 0; pos < ids.size(); ++pos) {
        e.backend->eval(ids[pos], pos, logits.data());
        const int k = std::min<int>(a.top, int(nv));
        std::iota(order.begin(), order.end(), 0u);
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](uint32_t x, uint32_t y) { return logits[x] > logits[y] || (logits[x] == logits[y] && x < y); });
        nlohmann::json top = nlohmann::json::array();
        for (int i = 0; i < k; ++i) top.push_back({order[i], logits[order[i]]});
        nlohmann::json row = {{"top", top}, {"lse", log_sum_exp(logits)}};
        if (a.full) row["logits"] = logits;
        rows.push_back(std::move(row));
    }
    nlohmann::json j = {{"model", e.model->file.path()}, {"tokens", ids}, {"positions", rows}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
}

}  // namespace

Runner add_logits(CLI::App& app) {
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("logits", "the logits at each position of a token sequence, as JSON (for cross-checks)");
    add_engine_options(*sub, a->engine);
    sub->add_option("--tokens", a->tokens, "comma-separated token ids, evaluated as given");
    sub->add_option("-p,--prompt", a->prompt, "text to tokenize (BOS as the model adds it; special tokens parsed)");
    sub->add_option("--top", a->top, "pairs per position (default 20)")->check(CLI::Range(1, 1000));
    sub->add_flag("--full", a->full, "also print every logit of every position");
    sub->add_flag("--like-llamacpp", a->like_llamacpp,
                  "round matrix-vector inputs as llama.cpp's CPU backend does (a diagnostic)");
    return [a] { return run(*a); };
}

}  // namespace ptxlm::cli
