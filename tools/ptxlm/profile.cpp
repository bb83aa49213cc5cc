// `ptxlm profile [-m MODEL] [-c N] [-r REPS] [--bytes N] [--gpu-path P]
// [--gpu-contiguous-kv] [--json]`: what a GPU measures that emu cannot count, for bench/gpu-report:
// the achievable read bandwidth (a generated streaming-read kernel,
// kernels/examples read_stream, best of REPS launches timed with events) and
// each kernel of one token's chain (chain schedule, position 0), timed with
// events around every launch, REPS times (an op's time includes any wait
// for the host's next launch: CudaBackend::time_ops). On emu every time is
// the emulator's: the output says so.
#include <algorithm>
#include <cstdio>
#include <map>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device.h"
#include "engine/cuda/launch.h"
#include "engine/cuda/module.h"
#include "kernels/examples/examples.h"
#include "tools/ptxlm/commands.h"
#include "tools/ptxlm/engine_args.h"

namespace ptxlm::cli {

namespace {

struct Args {
    std::string model, gpu_path = "default";
    uint32_t n_ctx = 256, reps = 20;
    uint64_t bytes = 0;   // 0: 1 GiB on a GPU, 4 MiB on emu
    bool contiguous_kv = false;
    bool json = false;
};

struct Read {
    uint64_t bytes = 0;
    double best_ms = 0;
};

// The streaming read over `bytes`, four blocks of 512 threads per SM.
Read read_bandwidth(std::shared_ptr<const cuda::Driver> drv, uint64_t bytes, uint32_t reps) {
    cuda::Context ctx(std::move(drv));
    const cuda::DeviceInfo& d = ctx.info();
    const ptx::Target t = ptx::Target::parse("sm_" + std::to_string(std::min(d.cc_major * 10 + d.cc_minor, 90)));
    const kernels::ReadStreamShape s{bytes / 16, uint32_t(d.sm_count) * 4, 512};
    const ptx::GeneratedKernel g = kernels::read_stream_kernel(s, t);
    cuda::Stream stream(ctx);
    cuda::DeviceBuffer x(ctx, s.chunks * 16), out(ctx, size_t(s.blocks) * s.block / 32 * 4);
    x.fill_bytes(0x5a);
    cuda::Module mod(ctx, g.ptx);
    const cuda::Function fn = mod.function(g.name);
    ptx::ParamPack args = g.params.pack({ptx::DevPtr{x.ptr()}, ptx::DevPtr{out.ptr()}});
    cuda::Event start(ctx), end(ctx);
    Read r{s.chunks * 16, 0};
    for (uint32_t i = 0; i <= reps; ++i) {   // the first launch warms up
        start.record(stream);
        cuda::launch(fn, g.geometry, stream, args);
        end.record(stream);
        end.synchronize();
        const double ms = cuda::Event::elapsed_ms(start, end);
        if (i == 1 || (i > 1 && ms < r.best_ms)) r.best_ms = ms;
    }
    return r;
}

int run(const Args& a) {
    if (a.bytes && a.bytes < 16 * 1024) throw std::invalid_argument("--bytes " + std::to_string(a.bytes) + ": at least 16384");
    const std::string path = a.model.empty() ? default_model_path() : a.model;
    const Model m = Model::load(path);
    const std::shared_ptr<const cuda::Driver> drv = load_gpu_driver("profile times the GPU's kernels");
    cuda::GpuTuning tuning;
    tuning.paged_kv = !a.contiguous_kv;
    cuda::CudaBackend b(m, drv, a.n_ctx, Schedule::Chain, parse_gpu_path(a.gpu_path), nullptr, tuning);
    const ptxlm::DeviceInfo dev = b.device_info();
    const bool emulated = dev.name.find("emu") != std::string::npos;
    if (emulated)
        std::fprintf(stderr, "profile: %s is emu, the CPU interpreter of the driver: these times say nothing about a GPU\n",
                     dev.name.c_str());
    const uint64_t bytes = a.bytes ? a.bytes : emulated ? (4ull << 20) : (1ull << 30);

    std::fprintf(stderr, "profile: streaming read of %.1f MiB, %u launches\n", double(bytes) / (1 << 20), a.reps);
    const Read r = read_bandwidth(drv, bytes, a.reps);
    const double read_gbs = double(r.bytes) / (r.best_ms * 1e-3) / 1e9;

    std::fprintf(stderr, "profile: one token's %zu kernels, %u times each\n", b.launches().size(), a.reps);
    std::vector<float> logits(b.n_vocab());
    b.eval(0, 0, logits.data());   // warm-up: modules loaded, caches touched
    const std::vector<cuda::CudaBackend::OpTime> times = b.time_ops(0, 0, a.reps);
    const std::vector<cuda::CudaBackend::Launch> launches = b.launches();
    struct Row {
        uint32_t launches = 0;
        double us_sum = 0, us_min = 0;
    };
    std::map<std::string, Row> rows;
    std::vector<std::string> order;   // first appearance in the chain
    double token_us = 0;
    for (size_t i = 0; i < launches.size(); ++i) {
        auto [it, fresh] = rows.try_emplace(launches[i].kernel);
        if (fresh) order.push_back(launches[i].kernel);
        Row& row = it->second;
        row.us_min = row.launches ? std::min(row.us_min, times[i].us_min) : times[i].us_min;
        ++row.launches;
        row.us_sum += times[i].us_mean;
        token_us += times[i].us_mean;
    }
    nlohmann::json kernels = nlohmann::json::array();
    for (const std::string& k : order) {
        const Row& row = rows.at(k);
        kernels.push_back({{"kernel", k}, {"launches", row.launches}, {"us_mean", row.us_sum / row.launches},
                           {"us_min", row.us_min}});
    }
    const nlohmann::json j = {
        {"model", path},
        {"device", dev.name},
        {"device_emulated", emulated},
        {"sm_count", dev.units},
        {"peak_gbs", dev.peak_gbs},
        {"gpu_path", dev.gpu_path},
        {"read", {{"bytes", r.bytes}, {"reps", a.reps}, {"best_ms", r.best_ms}, {"gbs", read_gbs}}},
        {"kernels", kernels},
        {"token_us", token_us}};
    if (a.json) {
        std::printf("%s\n", j.dump(2).c_str());
        return 0;
    }
    std::printf("%s (%d SMs, peak %.0f GB/s)%s\n", dev.name.c_str(), dev.units, dev.peak_gbs,
                emulated ? ": emu, times say nothing about a GPU" : "");
    std::printf("streaming read: %.1f GB/s (%.0f%% of peak), best of %u over %.1f MiB\n\n", read_gbs,
                dev.peak_gbs > 0 ? 100.0 * read_gbs / dev.peak_gbs : 0.0, a.reps, double(r.bytes) / (1 << 20));
    std::printf("| kernel | launches per token | us per launch (mean) | us (least) |\n| --- | ---: | ---: | ---: |\n");
    for (const nlohmann::json& k : kernels)
        std::printf("| %s | %u | %.2f | %.2f |\n", k["kernel"].get<std::string>().c_str(), k["launches"].get<uint32_t>(),
                    k["us_mean"].get<double>(), k["us_min"].get<double>());
    std::printf("\none token: %.1f us from the first launch's event to the last's (waits for the host included)\n",
                token_us);
    return 0;
}

}  // namespace

Runner add_profile(CLI::App& app) {
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("profile", "time the GPU's streaming read and each kernel of a token (events)");
    sub->add_option("-m,--model", a->model, "GGUF model file (default: " + default_model_path() + ")");
    sub->add_option("-c,--ctx-size", a->n_ctx, "context the chain is built for (default 256)")->check(CLI::Range(1u, 1u << 20));
    sub->add_option("-r,--repetitions", a->reps, "timed launches of the read and of each kernel (default 20)")
        ->check(CLI::Range(1u, 100000u));
    sub->add_option("--bytes", a->bytes, "bytes the streaming read covers (default 1 GiB; 4 MiB on emu)");
    sub->add_option("--gpu-path", a->gpu_path, "quantized (8-bit GEMV inputs; the default) or reference (f32 inputs)")
        ->check(CLI::IsMember({"default", "quantized", "reference"}));
    add_contiguous_kv_flag(*sub, a->contiguous_kv, "time");
    sub->add_flag("--json", a->json, "print one JSON object");
    return [a] { return run(*a); };
}

}  // namespace ptxlm::cli
