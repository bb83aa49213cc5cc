// `ptxlm ptx -m MODEL --out DIR [--arch sm_XX] [-c N] [--schedule S] [--gpu-contiguous-kv]`: writes
// every kernel the model's decode chain needs as DIR/<kernel>.ptx (with
// --schedule persistent: the one persistent decoder), the text the GPU path
// loads, and lists them. No device is needed.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>

#include "engine/cuda/decode_plan.h"
#include "tools/ptxlm/commands.h"
#include "tools/ptxlm/engine_args.h"

namespace ptxlm::cli {

namespace {

struct Args {
    std::string model, out, arch = "sm_90", schedule = "graph", gpu_path = "default";
    uint32_t n_ctx = 4096;
    uint32_t sms = kernels::kH100SxmSms;
    bool contiguous_kv = false;
};

int run(const Args& a) {
    const ptx::Target target = [&] {
        try {
            return ptx::Target::parse(a.arch);
        } catch (const std::exception& e) {
            throw std::invalid_argument("--arch " + a.arch + ": " + e.what());
        }
    }();
    if (target.sm < 80 || target.sm > 90) throw std::invalid_argument("--arch " + a.arch + ": the GPU path targets sm_80 to sm_90");
    const std::string path = a.model.empty() ? default_model_path() : a.model;
    const Model m = Model::load(path);
    const bool q8 = cuda::quantized_gemvs(parse_gpu_path(a.gpu_path));
    const bool paged = !a.contiguous_kv;
    const cuda::DecodePlan plan = cuda::decode_plan(m, a.n_ctx, q8, a.sms, paged, cuda::gemv_warps(m, parse_schedule(a.schedule)));
    const std::vector<ptx::GeneratedKernel> ks =
        a.schedule == "persistent"
            ? std::vector<ptx::GeneratedKernel>{kernels::persistent_kernel(cuda::decode_op_kinds(plan), target,
                                                                           cuda::state_layout(paged)).kernel}
            : cuda::decode_kernels(plan, target);
    std::error_code ec;
    std::filesystem::create_directories(a.out, ec);
    if (ec) throw std::invalid_argument("--out " + a.out + ": " + ec.message());
    for (const ptx::GeneratedKernel& g : ks) {
        const std::filesystem::path f = std::filesystem::path(a.out) / (g.name + ".ptx");
        std::ofstream o(f, std::ios::binary);
        o << g.ptx;
        if (!o.flush()) throw std::runtime_error("cannot write " + f.string());
        std::printf("%-56s grid %6u x %4u threads, %6u B dynamic shared\n", f.filename().c_str(), g.geometry.grid.x *
                    g.geometry.grid.y, g.geometry.block.x, g.geometry.shared_bytes);
    }
    std::fprintf(stderr, "ptx: %zu kernels for %s (%s, %u SMs, %s schedule, context %u) in %s\n", ks.size(), path.c_str(),
                 target.name().c_str(), a.sms, a.schedule.c_str(), a.n_ctx, a.out.c_str());
    return 0;
}

}  // namespace

Runner add_ptx(CLI::App& app) {
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("ptx", "write the PTX of every kernel a model's decode chain needs");
    sub->add_option("-m,--model", a->model, "GGUF model file (default: " + default_model_path() + ")");
    sub->add_option("--out", a->out, "folder for the .ptx files")->required();
    sub->add_option("--arch", a->arch, "target: sm_80, sm_86, sm_89, sm_90 (default sm_90)");
    sub->add_option("-c,--ctx-size", a->n_ctx, "context the attention kernels are generated for (default 4096)")
        ->check(CLI::Range(1u, 1u << 24));
    sub->add_option("--sms", a->sms, "SMs of the device the GEMV grids are sized for (default 132, an H100 SXM's)")
        ->check(CLI::Range(1u, 1024u));
    sub->add_option("--schedule", a->schedule,
                    "chain or graph (the same kernels; default graph), or persistent (one kernel with every op inline)")
        ->check(CLI::IsMember({"chain", "graph", "persistent"}));
    sub->add_option("--gpu-path", a->gpu_path,
                    "quantized (8-bit GEMV inputs, the default) or reference (f32 inputs)")
        ->check(CLI::IsMember({"default", "quantized", "reference"}));
    add_contiguous_kv_flag(*sub, a->contiguous_kv, "write");
    return [a] { return run(*a); };
}

}  // namespace ptxlm::cli
