// Options shared by the subcommands that run a model (run, chat, perplexity,
// logits), and opening the engine they describe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

namespace CLI { class App; }
namespace ptxlm::cuda { class Driver; }

namespace ptxlm::cli {

// The model a subcommand opens without -m: the general default (gemma-3-270m
// Q4_K_M, a base model: what bench, run and the tools measure) or the chat
// default (SmolLM2-135M-Instruct, instruction-tuned: it answers questions;
// chat and serve).
enum class DefaultModel { General, Chat };

struct EngineArgs {
    std::string model;            // empty: the default model
    DefaultModel default_model = DefaultModel::General;
    uint32_t n_ctx = 0;           // 0: the model's, capped by memory
    int threads = 0;              // 0: all cores this process may use
    std::string device = "auto";
    std::string kv_type = "f16";
    std::string schedule = "default";   // GPU: chain, graph or persistent (default graph)
    std::string cpu_path = "default";   // CPU: quantized or reference (default quantized)
    std::string cpu_isa;                // CPU quantized path: the SIMD kernels (default the best here)
    std::string gpu_path = "default";   // GPU: quantized or reference (default quantized)
    bool gpu_pdl = false;               // GPU: programmatic dependent launch of the chain's ops
    bool gpu_prefetch = false;          // GPU: GEMVs prefetch their first weight rows into L2
    bool gpu_contiguous_kv = false;     // GPU: the contiguous KV cache and its attention kernel, not pages
};

// Registers -m/--model (its default: `which`), -c/--ctx-size, -t/--threads, --device, --kv-type, --schedule,
// --cpu-path, --cpu-isa, --gpu-path.
void add_engine_options(CLI::App& app, EngineArgs& args, DefaultModel which = DefaultModel::General);

// Registers --gpu-contiguous-kv (run, chat, serve and bench through
// add_engine_options; selftest, profile and ptx with their own Args), its help
// beginning with `verb` ("GPU: run", "check", "time", "write").
void add_contiguous_kv_flag(CLI::App& app, bool& flag, const std::string& verb);

struct Engine {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Backend> backend;
};

// The backend options the engine flags give.
BackendOptions engine_backend_options(const EngineArgs& args);

// Loads the model, its tokenizer and the backend; says on stderr what runs
// where (device, threads, context). Throws with one clear message.
Engine open_engine(const EngineArgs& args);

// The CUDA driver for a subcommand that needs a GPU (selftest, profile):
// without one, a ModelError "<what>: no CUDA device found: <why>".
std::shared_ptr<const cuda::Driver> load_gpu_driver(const std::string& what);

// $PTXLM_MODEL if set, else the default model of that kind fetched by models/fetch.
std::string default_model_path(DefaultModel which = DefaultModel::General);

}  // namespace ptxlm::cli
