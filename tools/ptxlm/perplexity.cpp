// `ptxlm perplexity -m MODEL -f FILE [-c CTX]`: perplexity of a text, scored
// as llama.cpp's perplexity tool scores it, so the two figures compare:
// the text is tokenized whole (with BOS when the vocabulary adds one), cut
// into consecutive chunks of CTX tokens (the tail that does not fill a chunk
// is dropped), each chunk evaluated from an empty cache with its first token
// replaced by BOS when the vocabulary adds one, and only the predictions of
// the second half (positions CTX/2 .. CTX-2 predicting the next token) count.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "tools/ptxlm/commands.h"
#include "tools/ptxlm/engine_args.h"

namespace ptxlm::cli {

namespace {

struct Args {
    EngineArgs engine;
    std::string file;
    int32_t chunks = -1;
    bool json = false;
};

int run(const Args& a) {
    std::ifstream in(a.file, std::ios::binary);
    if (!in) throw std::invalid_argument("-f " + a.file + ": cannot open the file");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    // As llama.cpp reads -f: one trailing newline is dropped.
    if (!text.empty() && text.back() == '\n') text.pop_back();

    EngineArgs engine = a.engine;
    if (engine.n_ctx == 0) engine.n_ctx = 512;   // the chunk length; llama.cpp's perplexity figures are usually quoted at 512
    if (engine.n_ctx < 4) throw std::invalid_argument("-c/--ctx-size must be at least 4 for perplexity");
    Engine e = open_engine(engine);
    const Tokenizer& tok = *e.tokenizer;
    Backend& b = *e.backend;
    const uint32_t n_ctx = engine.n_ctx;

    std::vector<TokenId> tokens = tok.encode(text, tok.add_bos(), false);
    if (tokens.size() < 2ull * n_ctx)
        throw std::invalid_argument("-f " + a.file + ": the text has " + std::to_string(tokens.size()) +
                                    " tokens; perplexity with -c " + std::to_string(n_ctx) + " needs at least " +
                                    std::to_string(2ull * n_ctx));
    uint32_t n_chunk = static_cast<uint32_t>(tokens.size() / n_ctx);
    if (a.chunks > 0) n_chunk = std::min<uint32_t>(n_chunk, a.chunks);
    const uint32_t first = n_ctx / 2;
    const bool bos = tok.add_bos() && tok.bos();
    std::fprintf(stderr, "perplexity: %zu tokens, %u chunks of %u, scoring positions %u..%u of each\n", tokens.size(),
                 n_chunk, n_ctx, first, n_ctx - 2);

    const uint32_t nv = b.n_vocab();
    const uint32_t batch = b.max_batch();
    std::vector<float> logits(uint64_t(batch) * nv);
    std::vector<TokenId> batch_ids(batch);
    double nll = 0, nll2 = 0;
    uint64_t count = 0;
    std::vector<double> running;
    const auto t0 = std::chrono::steady_clock::now();
    for (uint32_t c = 0; c < n_chunk; ++c) {
        const TokenId* chunk = tokens.data() + uint64_t(c) * n_ctx;
        // Positions 0 .. n_ctx-2 are evaluated (the last token is only a target).
        for (uint32_t j0 = 0; j0 + 1 < n_ctx; j0 += batch) {
            const uint32_t n = std::min(batch, n_ctx - 1 - j0);
            for (uint32_t k = 0; k < n; ++k) batch_ids[k] = j0 + k == 0 && bos ? *tok.bos() : chunk[j0 + k];
            // Logits only for the scored positions (>= first) of this batch.
            const uint32_t scored_from = std::max(first, j0);
            const uint32_t n_logits = j0 + n > scored_from ? j0 + n - scored_from : 0;
            b.eval_batch({batch_ids.data(), n}, j0, n_logits ? logits.data() : nullptr, n_logits);
            for (uint32_t k = 0; k < n_logits; ++k) {
                const uint32_t j = scored_from + k;
                const float* row = logits.data() + uint64_t(k) * nv;
                const double lp = double(row[chunk[j + 1]]) - log_sum_exp({row, nv});
                nll -= lp;
                nll2 += lp * lp;
                ++count;
            }
        }
        running.push_back(std::exp(nll / count));
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "[%u/%u] PPL %.4f  (%.1f s, %.1f tok/s)\n", c + 1, n_chunk, running.back(), secs,
                     (c + 1) * double(n_ctx - 1) / secs);
    }
    const double mean = nll / count;
    const double ppl = std::exp(mean);
    const double var = nll2 / count - mean * mean;
    const double err = var > 0 ? std::sqrt(var / double(count - 1)) * ppl : 0.0;
    if (a.json) {
        nlohmann::json j = {{"model", e.model->file.path()}, {"file", a.file}, {"n_ctx", n_ctx},
                            {"tokens", tokens.size()},     {"chunks", n_chunk}, {"scored", count},
                            {"ppl", ppl},                  {"ppl_stderr", err}, {"running", running}};
        const DeviceInfo dev = b.device_info();
        j["device"] = dev.kind;
        j["cpu_path"] = dev.cpu_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(dev.cpu_path);
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        std::printf("PPL = %.4f +/- %.5f  (%u chunks of %u tokens, %llu predictions)\n", ppl, err, n_chunk, n_ctx,
                    static_cast<unsigned long long>(count));
    }
    return 0;
}

}  // namespace

Runner add_perplexity(CLI::App& app) {
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("perplexity", "perplexity of a text file, scored as llama.cpp's perplexity tool does");
    add_engine_options(*sub, a->engine);
    sub->add_option("-f,--file", a->file, "text file to score")->required();
    sub->footer("-c sets the chunk length (default 512).");
    sub->add_option("--chunks", a->chunks, "score at most this many chunks (default: all)")->check(CLI::PositiveNumber);
    sub->add_flag("--json", a->json, "print one JSON object instead of the summary line");
    return [a] { return run(*a); };
}

}  // namespace ptxlm::cli
