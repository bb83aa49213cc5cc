// `ptxlm selftest [-m MODEL] [-c N] [--seed S] [--gpu-contiguous-kv] [--json]`: every kernel the
// model's GPU decode chain needs, on the device, against the CPU reference
// (engine/cuda/selftest.h). Prints a table as results arrive; exit 1 when a
// kernel is outside its tolerance.
#include <cstdio>
#include <random>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/cuda/selftest.h"
#include "tools/ptxlm/commands.h"
#include "tools/ptxlm/engine_args.h"

namespace ptxlm::cli {

namespace {

struct Args {
    std::string model, device = "cuda", gpu_path = "quantized";
    uint32_t n_ctx = 256;
    uint32_t seed = 1;
    bool json = false;
    bool contiguous_kv = false;
};

int run(const Args& a) {
    const std::string path = a.model.empty() ? default_model_path() : a.model;
    const Model m = Model::load(path);
    const std::shared_ptr<const cuda::Driver> drv = load_gpu_driver("selftest runs the GPU kernels");
    if (!a.json) {
        std::printf("| kernel | op | max error | tolerance | result |\n| --- | --- | ---: | ---: | --- |\n");
        std::fflush(stdout);
    }
    const std::vector<cuda::SelftestResult> rs =
        cuda::run_selftest(m, drv, a.n_ctx, a.seed, [&](const cuda::SelftestResult& r) {
            if (a.json) return;
            std::printf("| %s | %s | %.3g | %.3g | %s |\n", r.kernel.c_str(), r.what.c_str(), r.max_error, r.tolerance,
                        r.pass ? "pass" : "FAIL");
            std::fflush(stdout);
        }, a.gpu_path != "reference", !a.contiguous_kv);
    size_t failed = 0;
    nlohmann::json j = nlohmann::json::array();
    for (const cuda::SelftestResult& r : rs) {
        failed += !r.pass;
        j.push_back({{"kernel", r.kernel}, {"op", r.what}, {"max_error", r.max_error}, {"tolerance", r.tolerance},
                     {"pass", r.pass}});
    }
    if (a.json) std::printf("%s\n", nlohmann::json{{"model", path}, {"n_ctx", a.n_ctx}, {"seed", a.seed}, {"gpu_path", a.gpu_path}, {"paged_kv", !a.contiguous_kv}, {"kernels", j}}.dump(2).c_str());
    std::fprintf(stderr, "selftest: %zu kernels, %zu outside their tolerance (%s, context %u, seed %u)\n", rs.size(),
                 failed, path.c_str(), a.n_ctx, a.seed);
    return failed ? 1 : 0;
}

}  // namespace

Runner add_selftest(CLI::App& app) {
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("selftest", "check every GPU kernel a model needs against the CPU");
    sub->add_option("-m,--model", a->model, "GGUF model file (default: " + default_model_path() + ")");
    sub->add_option("--device", a->device, "cuda (the kernels run on the GPU)")->check(CLI::IsMember({"cuda"}));
    sub->add_option("-c,--ctx-size", a->n_ctx, "context the attention kernels are checked at (default 256)")
        ->check(CLI::Range(1u, 1u << 20));
    sub->add_option("--seed", a->seed, "seed of the random activations (default 1)");
    sub->add_option("--gpu-path", a->gpu_path,
                    "quantized (the default path's 8-bit-input GEMVs, against the CPU quantized path) or reference "
                    "(f32 inputs, against the CPU reference)")
        ->check(CLI::IsMember({"quantized", "reference"}));
    add_contiguous_kv_flag(*sub, a->contiguous_kv, "check");
    sub->add_flag("--json", a->json, "print one JSON object");
    return [a] { return run(*a); };
}

}  // namespace ptxlm::cli
