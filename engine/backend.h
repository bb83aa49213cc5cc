// The interface both backends implement: evaluate one token at a position
// against the backend's KV cache and, when asked, produce the logits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "engine/model.h"

namespace ptxlm {

using TokenId = int32_t;

enum class KvType { F16, F32 };
const char* kv_type_name(KvType t);

enum class DeviceKind { Auto, Cpu, Cuda };
// "cpu", "cuda", "auto"; throws std::invalid_argument naming --device.
DeviceKind parse_device(const std::string& s);

// How the GPU path issues a token's kernels: `chain` launches them one by
// one (for debugging), `graph` replays them captured once as a CUDA graph.
enum class Schedule { Default, Chain, Graph, Persistent };
// "chain", "graph" or "default"; throws std::invalid_argument naming --schedule.
Schedule parse_schedule(const std::string& s);
const char* schedule_name(Schedule s);

namespace cpu { class ThreadPool; }

// The CPU backend's matrix-vector arithmetic: quantized dot products on the
// CPU's SIMD (the default), or the float32 reference (cpu/matvec.h).
enum class CpuArithmetic { Default, Quantized, Reference };
// "quantized", "reference" or "default"; throws std::invalid_argument naming --cpu-path.
CpuArithmetic parse_cpu_path(const std::string& s);

// The GPU path's GEMV arithmetic: an 8-bit input quantized as the CPU
// quantized path quantizes it, dp4a on the packed weights (the default; what
// decode at the roofline needs), or an f32 input as the CPU reference has
// (engine/cuda/decode_plan.h).
enum class GpuArithmetic { Default, Quantized, Reference };
// "quantized", "reference" or "default"; throws std::invalid_argument naming --gpu-path.
GpuArithmetic parse_gpu_path(const std::string& s);

struct BackendOptions {
    uint32_t n_ctx = 0;         // 0: the model's trained context, capped to what memory allows
    Schedule schedule = Schedule::Default;   // GPU only; Default = Graph
    KvType kv_type = KvType::F16;
    int threads = 0;            // 0: every core this process may use
    // CPU: run on this pool instead of one of its own (`threads` is then
    // ignored). Backends that share a pool must be evaluated from one thread,
    // in turn: the server's slots do, and idle pools would otherwise spin
    // against the busy one.
    std::shared_ptr<cpu::ThreadPool> cpu_pool;
    CpuArithmetic cpu_path = CpuArithmetic::Default;   // CPU only; Default = Quantized
    GpuArithmetic gpu_path = GpuArithmetic::Default;   // GPU only; Default = Quantized
    bool gpu_pdl = false;   // GPU only: launch the chain's ops programmatically (sm_90; off by default)
    bool gpu_prefetch = false;   // GPU only: GEMVs prefetch their first weight rows into L2 (off by default; every schedule)
    bool gpu_contiguous_kv = false;   // GPU only: one contiguous KV cache and its attention kernel, not pages (A/B runs)
    // CPU quantized path: the SIMD kernels by name (scalar, avx2, avx512,
    // avx512vnni); empty: the best this CPU runs (PTXLM_CPU_ISA caps it).
    std::string cpu_isa;
};

// What a backend runs on, for reports (bench, logs).
struct DeviceInfo {
    std::string kind;           // "cpu" or "cuda"
    std::string name;           // CPU model or GPU name
    int units = 0;              // CPU cores this process may use, or GPU SMs
    std::string schedule;       // GPU: "chain" or "graph"; empty on the CPU
    std::string cpu_path;       // CPU: "quantized (<isa>)" or "reference"; empty on a GPU
    std::string gpu_path;       // GPU: "quantized" or "reference"; empty on the CPU
    double peak_gbs = 0;        // GPU: peak DRAM bandwidth from its memory clock and bus width; 0 unknown
    int threads = 0;            // CPU threads the backend uses (0 on a GPU)
    std::string kv_type;        // "f16" or "f32"
    uint32_t kv_bytes_per_el = 2;
};

// The CPU's model name (/proc/cpuinfo), "unknown CPU" when it cannot be read.
std::string cpu_model_name();

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string description() const = 0;   // one line for people: "CPU, 2 threads, KV f16"
    virtual DeviceInfo device_info() const = 0;
    virtual uint32_t n_ctx() const = 0;
    virtual uint32_t n_vocab() const = 0;
    // Evaluates tokens[i] at position pos + i (all < n_ctx()). The cache must
    // hold positions [0, pos); whatever it held at pos and beyond is replaced.
    // Writes the logits of the last n_logits tokens, n_vocab() per token in
    // order, when `logits` is not null. At most max_batch() tokens per call.
    // Batched and one-by-one evaluation give the same logits.
    virtual void eval_batch(std::span<const TokenId> tokens, uint32_t pos, float* logits, uint32_t n_logits) = 0;
    virtual uint32_t max_batch() const = 0;
    // Whether eval_batch only queues the evaluation (a sequence of
    // cpu::Batcher: its logits exist once the batcher's step has run). Such
    // a backend has no eval_argmax or start_greedy; its eval_argmax_into
    // queues too.
    virtual bool queues_evals() const { return false; }
    // A cache shared with other sequences (cpu::Batcher's pool) may hold a
    // longer start of `prompt` than the `keep` positions this one shares
    // with it: the backend then makes its cache hold that start and returns
    // its length; otherwise it returns keep and changes nothing.
    virtual uint32_t reuse_prefix(std::span<const TokenId> prompt, uint32_t keep) {
        (void)prompt;
        return keep;
    }

    void eval(TokenId token, uint32_t pos, float* logits) { eval_batch({&token, 1}, pos, logits, logits ? 1 : 0); }

    // Evaluates one token and returns the id of its largest logit (ties: the
    // lowest id): greedy decoding. The GPU computes it on the device and
    // copies only the id; the default reads all the logits.
    virtual TokenId eval_argmax(TokenId token, uint32_t pos);
    // The same into *out: before it returns, or, for a backend that
    // queues_evals, when the step that evaluates the token runs (a batched
    // sequence on the GPU then copies back only the id as well).
    virtual void eval_argmax_into(TokenId token, uint32_t pos, TokenId* out) { *out = eval_argmax(token, pos); }

    // Greedy decoding run ahead by the device (the persistent decoder feeds
    // each argmax back as the next input and publishes tokens as they
    // exist). next() waits for the token after the last one (the first: the
    // one after `token`, evaluated at `pos`); nullopt once the device
    // stopped (a token of `stop` came out, or max_tokens did). Each token
    // next() returns means the one before it was evaluated into the cache.
    // Destroying the stream stops the device within a token. nullptr: the
    // backend has none (callers use eval_argmax).
    class GreedyStream {
    public:
        virtual ~GreedyStream() = default;
        virtual std::optional<TokenId> next() = 0;
    };
    virtual std::unique_ptr<GreedyStream> start_greedy(TokenId token, uint32_t pos, uint32_t max_tokens,
                                                       std::span<const TokenId> stop);
};

// The context a session gets for `requested` (0 = model default), checked
// against memory: a default larger than memory allows is capped (and `note`
// says so); an explicit request that does not fit throws ModelError with the
// numbers.
uint32_t choose_context(const Model& m, uint32_t requested, uint32_t kv_bytes_per_el, std::string* note);

// Builds the backend `device` names. Auto picks CUDA when a driver loads and
// the GPU path can run the model, else the CPU, and says which and why in
// `note`. Cuda throws ModelError when no device is found or the model cannot
// run there.
std::unique_ptr<Backend> make_backend(const Model& m, DeviceKind device, const BackendOptions& opt, std::string* note);

}  // namespace ptxlm
