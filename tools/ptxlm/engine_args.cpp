#include "tools/ptxlm/engine_args.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <CLI/CLI.hpp>

#include "engine/cuda/driver.h"

namespace ptxlm::cli {

void add_engine_options(CLI::App& app, EngineArgs& a, DefaultModel which) {
    a.default_model = which;
    app.add_option("-m,--model", a.model, "GGUF model file (default: " + default_model_path(which) + ")");
    app.add_option("-c,--ctx-size", a.n_ctx, "context length in tokens (default: the model's, capped to what memory allows)")
        ->check(CLI::Range(1u, 1u << 24));
    app.add_option("-t,--threads", a.threads, "CPU threads (default: every core this process may use)")
        ->check(CLI::Range(1, 1024));
    app.add_option("--device", a.device, "cpu, cuda or auto (CUDA when a device is usable, else the CPU)")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    app.add_option("--kv-type", a.kv_type, "KV cache element type: f16 or f32")->check(CLI::IsMember({"f16", "f32"}));
    app.add_option("--schedule", a.schedule,
                   "GPU path: graph (the token's kernels replayed as one CUDA graph; the default), chain (plain "
                   "launches) or persistent (one cooperative launch runs whole tokens)")
        ->check(CLI::IsMember({"default", "chain", "graph", "persistent"}));
    app.add_option("--cpu-path", a.cpu_path,
                   "CPU: quantized (8-bit activations, integer dot products on the CPU's SIMD; the default) or "
                   "reference (float32 arithmetic, what every faster path is checked against)")
        ->check(CLI::IsMember({"default", "quantized", "reference"}));
    app.add_option("--gpu-path", a.gpu_path,
                   "GPU: quantized (GEMV inputs quantized to 8 bits as the CPU quantized path does, dp4a on the packed "
                   "weights; the default) or reference (f32 inputs, what "
                   "the CPU reference computes)")
        ->check(CLI::IsMember({"default", "quantized", "reference"}));
    app.add_flag("--gpu-pdl", a.gpu_pdl,
                 "GPU (sm_90), chain and graph schedules: launch each kernel of the token as a programmatic dependent "
                 "launch, so it starts while the one before finishes (each waits with griddepcontrol.wait before it "
                 "reads anything); off by default until a GPU run weighs it");
    app.add_flag("--gpu-prefetch", a.gpu_prefetch,
                 "GPU: each GEMV first prefetches the weight rows its block reads first into L2, so DRAM streams "
                 "while the block stages its input (chain and graph: at the kernel's start, before "
                 "griddepcontrol.wait with --gpu-pdl; persistent: before the op waits for its inputs); off by default "
                 "until a GPU run weighs it");
    add_contiguous_kv_flag(app, a.gpu_contiguous_kv, "GPU: run");
    app.add_option("--cpu-isa", a.cpu_isa,
                   "CPU quantized path: the SIMD kernels, scalar, avx2, avx512 or avx512vnni (default: the best this "
                   "CPU runs; the environment variable PTXLM_CPU_ISA caps it)")
        ->check(CLI::IsMember({"scalar", "avx2", "avx512", "avx512vnni"}));
}

void add_contiguous_kv_flag(CLI::App& app, bool& flag, const std::string& verb) {
    app.add_flag("--gpu-contiguous-kv", flag,
                 verb + " the contiguous KV cache and its attention kernel (head sizes 64, 128 and 256; latency-bound "
                 "at depth) instead of the default: pages of 16 positions, RoPE + the K/V append into a page, then "
                 "paged flash-decoding over a page-table row; for A/B runs");
}

std::shared_ptr<const cuda::Driver> load_gpu_driver(const std::string& what) {
    try {
        return cuda::Driver::load();
    } catch (const std::exception& e) {
        throw ModelError(what + ": no CUDA device found: " + e.what());
    }
}

std::string default_model_path(DefaultModel which) {
    if (const char* env = std::getenv("PTXLM_MODEL"); env && *env) return env;
    return std::string(which == DefaultModel::Chat ? PTXLM_DEFAULT_CHAT_MODEL : PTXLM_DEFAULT_MODEL);
}

BackendOptions engine_backend_options(const EngineArgs& a) {
    BackendOptions opt;
    opt.n_ctx = a.n_ctx;
    opt.threads = a.threads;
    opt.kv_type = a.kv_type == "f32" ? KvType::F32 : KvType::F16;
    opt.schedule = parse_schedule(a.schedule);
    opt.cpu_path = parse_cpu_path(a.cpu_path);
    opt.cpu_isa = a.cpu_isa;
    opt.gpu_path = parse_gpu_path(a.gpu_path);
    opt.gpu_pdl = a.gpu_pdl;
    opt.gpu_prefetch = a.gpu_prefetch;
    opt.gpu_contiguous_kv = a.gpu_contiguous_kv;
    return opt;
}

Engine open_engine(const EngineArgs& a) {
    Engine e;
    const std::string path = a.model.empty() ? default_model_path(a.default_model) : a.model;
    if (a.model.empty() && !std::filesystem::exists(path))
        throw ModelError("the default model " + path + " is missing: run models/fetch (./run.sh does), or pass -m MODEL");
    e.model = std::make_unique<Model>(Model::load(path));
    e.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(e.model->file));
    if (uint32_t(e.tokenizer->n_vocab()) > e.model->n_vocab)
        throw ModelError(path + ": the tokenizer has more tokens than the model has embeddings");
    const BackendOptions opt = engine_backend_options(a);
    std::string note;
    e.backend = make_backend(*e.model, parse_device(a.device), opt, &note);
    std::fprintf(stderr, "ptxlm: %s (%s, %s)\n", path.c_str(), e.model->hp.arch.c_str(),
                 format_bytes(e.model->weight_bytes()).c_str());
    std::fprintf(stderr, "ptxlm: %s\n", note.c_str());
    return e;
}

}  // namespace ptxlm::cli
