#include "engine/backend.h"

#include <algorithm>
#include <fstream>
#include <vector>
#include <stdexcept>

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/driver.h"
#include "engine/sampler.h"

namespace ptxlm {

const char* kv_type_name(KvType t) { return t == KvType::F16 ? "f16" : "f32"; }

std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) != 0) continue;
        const size_t colon = line.find(':');
        if (colon == std::string::npos) break;
        const size_t b = line.find_first_not_of(" \t", colon + 1);
        if (b != std::string::npos) return line.substr(b);
    }
    return "unknown CPU";
}

Schedule parse_schedule(const std::string& s) {
    if (s == "default") return Schedule::Default;
    if (s == "chain") return Schedule::Chain;
    if (s == "graph") return Schedule::Graph;
    if (s == "persistent") return Schedule::Persistent;
    throw std::invalid_argument("--schedule: '" + s + "' is not a schedule (choose chain, graph or persistent)");
}

CpuArithmetic parse_cpu_path(const std::string& s) {
    if (s == "default") return CpuArithmetic::Default;
    if (s == "quantized") return CpuArithmetic::Quantized;
    if (s == "reference") return CpuArithmetic::Reference;
    throw std::invalid_argument("--cpu-path: '" + s + "' is not a CPU path (choose quantized or reference)");
}

GpuArithmetic parse_gpu_path(const std::string& s) {
    if (s == "default") return GpuArithmetic::Default;
    if (s == "quantized") return GpuArithmetic::Quantized;
    if (s == "reference") return GpuArithmetic::Reference;
    throw std::invalid_argument("--gpu-path: '" + s + "' is not a GPU path (choose quantized or reference)");
}

const char* schedule_name(Schedule s) {
    return s == Schedule::Chain ? "chain" : s == Schedule::Persistent ? "persistent" : "graph";
}

std::unique_ptr<Backend::GreedyStream> Backend::start_greedy(TokenId, uint32_t, uint32_t, std::span<const TokenId>) {
    return nullptr;
}

TokenId Backend::eval_argmax(TokenId token, uint32_t pos) {
    std::vector<float> logits(n_vocab());
    eval(token, pos, logits.data());
    return TokenId(argmax(logits));
}

DeviceKind parse_device(const std::string& s) {
    if (s == "auto") return DeviceKind::Auto;
    if (s == "cpu") return DeviceKind::Cpu;
    if (s == "cuda") return DeviceKind::Cuda;
    throw std::invalid_argument("--device: '" + s + "' is not a device (choose cpu, cuda or auto)");
}

uint32_t choose_context(const Model& m, uint32_t requested, uint32_t kv_bytes_per_el, std::string* note) {
    const uint32_t trained = m.hp.n_ctx_train ? m.hp.n_ctx_train : 4096;
    const uint32_t want = requested ? requested : trained;
    const std::optional<uint64_t> avail = available_memory();
    const MemoryPlan plan = plan_memory(m, want, kv_bytes_per_el);
    // The weights are mapped from the file; they need page cache, not anonymous
    // memory, but a machine that cannot hold them would thrash: count them.
    if (!avail || plan.total() <= *avail) {
        if (note) *note = "context " + std::to_string(want) + " tokens (KV cache " + format_bytes(plan.kv_cache) + ")";
        return want;
    }
    const MemoryPlan at0 = plan_memory(m, 0, kv_bytes_per_el);
    const uint64_t per_token = plan_memory(m, 1, kv_bytes_per_el).total() - at0.total();
    const uint64_t fits = *avail > at0.total() ? (*avail - at0.total()) / per_token : 0;
    const std::string numbers = "needs " + format_bytes(plan.total()) + " (weights " + format_bytes(plan.weights) +
                                ", KV cache " + format_bytes(plan.kv_cache) + ", activations " +
                                format_bytes(plan.activations) + "), " + format_bytes(*avail) + " available";
    if (requested || fits < 256)
        throw ModelError("the model with a context of " + std::to_string(want) + " tokens " + numbers +
                         (fits >= 256 ? "; at most -c " + std::to_string(fits) + " fits" : "; the model does not fit"));
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(fits, want)) / 256 * 256;
    if (note)
        *note = "context " + std::to_string(n) + " tokens, capped from the trained " + std::to_string(want) +
                " by memory (" + numbers + ")";
    return n;
}

std::unique_ptr<Backend> make_backend(const Model& m, DeviceKind device, const BackendOptions& opt, std::string* note) {
    std::string why;
    if (opt.cpu_path != CpuArithmetic::Default || !opt.cpu_isa.empty()) {   // asks for the CPU
        const char* flag = opt.cpu_isa.empty() ? "--cpu-path" : "--cpu-isa";
        if (device == DeviceKind::Cuda)
            throw std::invalid_argument(std::string(flag) + " applies to the CPU, not to --device cuda");
        if (!opt.cpu_isa.empty() && opt.cpu_path == CpuArithmetic::Reference)
            throw std::invalid_argument("--cpu-isa chooses the quantized path's kernels; --cpu-path reference has none");
        device = DeviceKind::Cpu;
    }
    if (device == DeviceKind::Cuda || device == DeviceKind::Auto) {
        std::shared_ptr<const cuda::Driver> drv;
        try {
            drv = cuda::Driver::load();
        } catch (const std::exception& e) {
            if (device == DeviceKind::Cuda) throw ModelError(std::string("--device cuda: no CUDA device found: ") + e.what());
            why = "no CUDA device: using the CPU";
        }
        if (drv) {
            try {
                if (opt.kv_type != KvType::F16) throw ModelError("the GPU path keeps an f16 KV cache (--kv-type f16)");
                std::string ctx_note;
                auto b = std::make_unique<cuda::CudaBackend>(m, drv, opt.n_ctx, opt.schedule, opt.gpu_path, &ctx_note,
                                                             cuda::GpuTuning{opt.gpu_pdl, opt.gpu_prefetch, !opt.gpu_contiguous_kv});
                if (note)
                    *note = b->description() + "; context " + std::to_string(b->n_ctx()) + " tokens" +
                            (ctx_note.empty() ? "" : " (" + ctx_note + ")");
                return b;
            } catch (const std::exception& e) {
                if (device == DeviceKind::Cuda) throw;
                why = std::string("the GPU path cannot run this model (") + e.what() + "): using the CPU";
            }
        }
    }
    if (opt.schedule != Schedule::Default)
        throw std::invalid_argument("--schedule applies to the GPU path; the CPU runs without one" +
                                    (why.empty() ? std::string() : " (" + why + ")"));
    if (opt.gpu_pdl)
        throw std::invalid_argument("--gpu-pdl applies to the GPU path; the CPU launches no kernels" +
                                    (why.empty() ? std::string() : " (" + why + ")"));
    if (opt.gpu_prefetch)
        throw std::invalid_argument("--gpu-prefetch applies to the GPU path; the CPU launches no kernels" +
                                    (why.empty() ? std::string() : " (" + why + ")"));
    if (opt.gpu_contiguous_kv)
        throw std::invalid_argument("--gpu-contiguous-kv applies to the GPU path; the CPU keeps its own KV cache" +
                                    (why.empty() ? std::string() : " (" + why + ")"));
    if (opt.gpu_path != GpuArithmetic::Default)
        throw std::invalid_argument("--gpu-path applies to the GPU path; the CPU has --cpu-path" +
                                    (why.empty() ? std::string() : " (" + why + ")"));
    const uint32_t kv_el = opt.kv_type == KvType::F16 ? 2 : 4;
    std::string ctx_note;
    const uint32_t n_ctx = choose_context(m, opt.n_ctx, kv_el, &ctx_note);
    auto b = opt.cpu_pool ? std::make_unique<cpu::CpuBackend>(m, n_ctx, opt.kv_type, opt.cpu_pool)
                          : std::make_unique<cpu::CpuBackend>(m, n_ctx, opt.kv_type, opt.threads);
    if (opt.cpu_path == CpuArithmetic::Reference) b->set_path(cpu::CpuPath::Reference);
    if (!opt.cpu_isa.empty()) {
        try {
            b->set_isa(cpu::parse_isa(opt.cpu_isa));
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument(std::string("--cpu-isa ") + opt.cpu_isa + ": " + e.what());
        }
    }
    b->prepare();
    if (note) *note = (why.empty() ? "" : why + "; ") + b->description() + "; " + ctx_note;
    return b;
}

}  // namespace ptxlm
