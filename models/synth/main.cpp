// ptxlm-synth: writes a synthetic GGUF test model.
//   ptxlm-synth --arch llama|qwen2|gemma3|qwen3|llama3|mistral3|phi3|phi4mini|gemma4 --size tiny|small|medium|wide4096|llama3-8b-slice|llama3.2-1b-slice|llama3-8b|gemma4-e2b [--seed N] --out FILE
//   ptxlm-synth --list
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "models/synth/synth.h"

namespace {

using namespace ptxlm::synth;

int usage_error(const std::string& msg) {
    std::fprintf(stderr, "ptxlm-synth: %s (see --help)\n", msg.c_str());
    return 2;
}

void print_list() {
    std::printf("%-8s %-9s %6s %6s %5s %4s %4s %6s %6s %5s %11s\n", "arch", "size", "n_embd", "layers", "heads",
                "kv", "hd", "n_ff", "vocab", "ctx", "params");
    std::vector<Size> sizes = all_sizes();
    sizes.push_back(Size::Gemma4E2B);
    for (Size z : sizes) {
        std::vector<Arch> archs = z == Size::Gemma4E2B ? std::vector<Arch>{} : all_archs();
        if (z == Size::Tiny || z == Size::Small || z == Size::Gemma4E2B) archs.push_back(Arch::Gemma4);   // gemma4: these three only
        for (Arch a : archs) {
            const Spec s = preset(a, z);
            std::printf("%-8s %-9s %6u %6u %5u %4u %4u %6u %6u %5u %11llu\n", arch_name(a), size_name(z), s.n_embd,
                        s.n_layer, s.n_head, s.n_head_kv, s.head_dim, s.n_ff, s.n_vocab, s.n_ctx,
                        (unsigned long long)param_count(s));
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"ptxlm-synth: write a synthetic GGUF test model (deterministic, Q4_K_M typed)"};
    std::string arch_s, size_s, out;
    uint64_t seed = kDefaultSeed;
    unsigned threads = 0;
    bool list = false;
    app.add_option("--arch", arch_s, "llama, qwen2, gemma3, qwen3, llama3 (llama with Llama 3.x RoPE and tokenizer), mistral3, phi3 (Phi-3/Phi-4: fused QKV and gate/up, LongRoPE), phi4mini (phi3 with Phi-4-mini's partial rotary: 3/4 of each head) or gemma4 (Gemma 4 dense: tiny and small)");
    app.add_option("--size", size_s, "tiny, small, medium, wide4096, llama3-8b-slice, llama3.2-1b-slice, llama3-8b or gemma4-e2b (gemma4 only; see --list)");
    app.add_option("--seed", seed, "seed of the weights (default 1)");
    app.add_option("--out", out, "the GGUF file to write");
    app.add_option("--threads", threads, "worker threads (default: all cores; the output does not depend on it)");
    std::string types_s = "q4_k_m";
    app.add_option("--types", types_s, "the weights' quantization mix: q4_k_m (default), q5_k_m, q3_k_m, q2_k, iq4_xs, or f16 / bf16 (16-bit matrices)");
    app.add_flag("--list", list, "print the presets and their shapes");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }

    if (list) {
        print_list();
        return 0;
    }
    if (arch_s.empty() || size_s.empty() || out.empty()) return usage_error("--arch, --size and --out are required");
    const auto arch = parse_arch(arch_s);
    if (!arch) return usage_error("unknown --arch '" + arch_s + "' (llama, qwen2, gemma3, qwen3, llama3, mistral3, phi3, phi4mini or gemma4)");
    const auto size = parse_size(size_s);
    if (!size) return usage_error("unknown --size '" + size_s + "' (tiny, small, medium, wide4096, llama3-8b-slice, llama3.2-1b-slice or llama3-8b)");

    try {
        Spec spec = preset(*arch, *size, seed);
        const auto mix = parse_type_mix(types_s);
        if (!mix) return usage_error("unknown --types '" + types_s + "' (q4_k_m, q5_k_m, q3_k_m, q2_k, iq4_xs, f16 or bf16)");
        spec.types = *mix;
        const uint64_t params = param_count(spec);
        const bool verbose = params > 50'000'000;   // seconds or more: show progress
        const auto t0 = std::chrono::steady_clock::now();
        Options opt;
        opt.threads = threads;
        if (verbose) {
            opt.progress = [](size_t i, size_t n, const TensorSpec& t) {
                std::fprintf(stderr, "ptxlm-synth: [%3zu/%zu] %s\n", i + 1, n, t.name.c_str());
            };
        }
        write_model(spec, out, opt);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "ptxlm-synth: wrote %s (%s, %llu params, seed %llu) in %.2f s\n", out.c_str(),
                     spec.name().c_str(), (unsigned long long)params, (unsigned long long)seed, secs);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ptxlm-synth: %s\n", e.what());
        return 1;
    }
    return 0;
}
