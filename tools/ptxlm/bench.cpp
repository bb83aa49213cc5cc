// `ptxlm bench -m MODEL`: throughput measured the way llama-bench measures
// it, so the two compare row for row (bench/compare runs both).
//
// Tests: prompt processing `ppN` (N prompt tokens evaluated in batches of the
// backend's max_batch, logits of the prompt's last token only, as a chat
// prompt needs and as llama-bench asks for with its default n_batch of 2048)
// and token generation `tgN` (N tokens evaluated one
// at a time with their logits), each at KV depth D (D tokens already in the
// cache; filling it is not timed). Tokens are pseudo-random ids from a fixed
// seed; speed does not depend on them. Each test runs once untimed to warm up
// (a batch, or one token), then `-r` timed repetitions: tokens/s is the mean
// and sample standard deviation of the repetitions' rates.
//
// Each row also reports the bytes a token reads from memory (pass_traffic and
// kv_read_bytes: weights once per pass, the LM head once per test pass that
// makes logits, the visible KV cache per token), the bandwidth that implies, and its
// share of the machine's peak: on the CPU a memory-copy rate measured at start
// with the same thread count (bytes read + bytes written, as STREAM counts).
// On the CPU it also measures, at start, the two ceilings decode meets
// (engine/cpu/ceilings.h): a read-only stream's bandwidth and the int8
// multiply-add rate of the selected Isa's dot products, and reports each
// test's share of both (the multiply-adds a token's matrix products take).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <fstream>

#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/cpu/batcher.h"
#include "engine/cpu/ceilings.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/model.h"
#include "engine/projection.h"
#include "gguf/quant.h"
#include "tools/ptxlm/commands.h"
#include "tools/ptxlm/counted.h"
#include "tools/ptxlm/engine_args.h"

namespace ptxlm::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
    EngineArgs engine;
    std::string prompt = "512", gen = "128", depth = "0", parallel = "1";
    uint32_t reps = 5;
    std::string output = "md";
    std::string project;   // counted mode's GPU (emu only); default h100-sxm
};

// "512", "128,256", "0-1024+256" (step), "64-512*2" (factor): llama-bench's
// list and range forms. Throws std::invalid_argument naming the flag.
std::vector<uint32_t> parse_sizes(const std::string& flag, const std::string& text) {
    constexpr uint64_t kMax = 1u << 22;
    auto bad = [&](const std::string& why) {
        return std::invalid_argument(flag + " '" + text + "': " + why);
    };
    auto number = [&](const std::string& s) -> uint64_t {
        if (s.empty() || s.size() > 8 || s.find_first_not_of("0123456789") != std::string::npos)
            throw bad("'" + s + "' is not a non-negative whole number");
        const uint64_t v = std::stoull(s);
        if (v > kMax) throw bad(s + " is larger than " + std::to_string(kMax));
        return v;
    };
    std::vector<uint32_t> out;
    size_t start = 0;
    while (start <= text.size()) {
        size_t comma = text.find(',', start);
        if (comma == std::string::npos) comma = text.size();
        const std::string item = text.substr(start, comma - start);
        const size_t dash = item.find('-');
        if (dash == std::string::npos) {
            out.push_back(uint32_t(number(item)));
        } else {
            const size_t op = item.find_first_of("+*", dash);
            const uint64_t first = number(item.substr(0, dash));
            const uint64_t last = number(item.substr(dash + 1, op == std::string::npos ? std::string::npos : op - dash - 1));
            const uint64_t step = op == std::string::npos ? 1 : number(item.substr(op + 1));
            const bool mul = op != std::string::npos && item[op] == '*';
            if (last < first) throw bad("a range must not run backwards");
            if (mul ? step < 2 || first == 0 : step == 0) throw bad(mul ? "a factor needs a start above 0 and a factor of at least 2" : "a step must be at least 1");
            for (uint64_t v = first; v <= last; v = mul ? v * step : v + step) {
                out.push_back(uint32_t(v));
                if (out.size() > 256) throw bad("more than 256 values");
            }
        }
        if (out.size() > 256) throw bad("more than 256 values");
        start = comma + 1;
    }
    return out;
}

struct Test {
    uint32_t n_prompt = 0, n_gen = 0, depth = 0;
    uint32_t parallel = 1;   // tg: sequences generating together (cpu::Batcher), each n_gen tokens
    uint32_t tokens() const { return n_prompt + n_gen; }
    std::string name() const {
        std::string s = n_prompt ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
        if (parallel > 1) s += " x" + std::to_string(parallel);
        if (depth) s += " @ d" + std::to_string(depth);
        return s;
    }
};

struct MeanSd {
    double mean = 0, sd = 0;
};
MeanSd mean_sd(const std::vector<double>& v) {
    MeanSd r;
    for (double x : v) r.mean += x;
    r.mean /= double(v.size());
    if (v.size() > 1) {
        double ss = 0;
        for (double x : v) ss += (x - r.mean) * (x - r.mean);
        r.sd = std::sqrt(ss / double(v.size() - 1));
    }
    return r;
}

// What bench measures of the CPU before it starts (0: not measured).
struct CpuCeilings {
    double memcpy_gbs = 0;
    cpu::ReadRate read;
    cpu::Int8Rate int8;
};

// A probe buffer far beyond the last-level cache: 4x the largest cache
// sysfs lists for cpu0 (a Xeon VM's 480 MiB L3 holds most of a fixed
// 512 MiB), and never under `floor`; what goes past `floor` is capped at a
// quarter of available_memory().
uint64_t beyond_cache(uint64_t floor) {
    uint64_t llc = 0;
    for (int i = 0; i < 8; ++i) {
        std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
        uint64_t v = 0;
        std::string unit;
        if (!(f >> v)) break;
        f >> unit;
        v <<= unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : 0;
        llc = std::max(llc, v);
    }
    uint64_t bytes = std::max(floor, 4 * llc);
    if (const std::optional<uint64_t> avail = available_memory()) bytes = std::min(bytes, std::max(floor, *avail / 4));
    return bytes & ~uint64_t((1 << 20) - 1);
}

// The ceilings in a child process, so their buffers do
// not count in this process's peak resident memory (VmHWM, which
// bench/compare reports). Call before any thread starts. `isa`: the Isa
// whose int8 rate to measure (none for Scalar).
CpuCeilings measure_cpu(int threads, cpu::Isa isa) {
    CpuCeilings c;
    int fd[2];
    if (pipe(fd) != 0) return c;
    const pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return c;
    }
    if (pid == 0) {
        close(fd[0]);
        // Each measurement on its own: one that fails stays 0 (not
        // measured) and the others are kept.
        CpuCeilings v;
        // The copy's two buffers together as large as the read's one.
        const uint64_t probe = beyond_cache(uint64_t(512) << 20);
        try {
            v.memcpy_gbs = cpu::measure_copy(threads, probe / 2).gbs;
        } catch (const std::exception&) {
        }
        try {
            v.read = cpu::measure_read(threads, probe);
        } catch (const std::exception&) {
        }
        try {
            if (isa != cpu::Isa::Scalar) v.int8 = cpu::measure_int8(isa, threads);
        } catch (const std::exception&) {
        }
        const ssize_t w = write(fd[1], &v, sizeof v);
        _exit(w == ssize_t(sizeof v) ? 0 : 1);
    }
    close(fd[1]);
    CpuCeilings v;
    const ssize_t r = read(fd[0], &v, sizeof v);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return r == ssize_t(sizeof v) && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? v : c;
}

// This process's peak resident memory (VmHWM), 0 when unknown.
uint64_t peak_rss_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    return 0;
}

// Drives the backend through the tests, keeping track of how much of the
// cache holds the fixed token sequence so depth is filled only when needed.
class TestDriver {
public:
    TestDriver(Backend& b, uint32_t n_tokens) : b_(b), logits_(b.n_vocab()) {
        std::mt19937 rng(1234);
        seq_.resize(n_tokens);
        for (TokenId& t : seq_) t = TokenId(rng() % b.n_vocab());
    }

    // Evaluates seq[pos, pos + n) at pos: in batches with the last token's
    // logits (prompt), or one by one with logits (generation). Returns the
    // tokens evaluated.
    uint64_t eval(uint32_t pos, uint32_t n, bool one_by_one) {
        const uint32_t step = one_by_one ? 1 : b_.max_batch();
        uint64_t done = 0;
        for (uint32_t i = 0; i < n; i += step) {
            const uint32_t k = std::min(step, n - i);
            const bool logits = one_by_one || i + k == n;
            b_.eval_batch({seq_.data() + pos + i, k}, pos + i, logits ? logits_.data() : nullptr, logits ? 1 : 0);
            done += k;
        }
        valid_ = pos + n;
        return done;
    }

    // Makes positions [0, depth) hold seq[0, depth); untimed. With a host
    // fill (emu: evaluating thousands of tokens there takes hours), the cache
    // gets its values by a copy instead.
    void fill(uint32_t depth) {
        if (valid_ >= depth) return;
        if (host_fill_) {
            host_fill_(valid_, depth);
            valid_ = depth;
        } else {
            eval(valid_, depth - valid_, false);
        }
    }
    void set_host_fill(std::function<void(uint32_t, uint32_t)> f) { host_fill_ = std::move(f); }

private:
    Backend& b_;
    std::function<void(uint32_t, uint32_t)> host_fill_;
    std::vector<TokenId> seq_;
    std::vector<float> logits_;
    uint32_t valid_ = 0;
};

struct Row {
    Test test;
    std::vector<double> samples_ns, samples_ts;
    uint64_t n_tokens = 0;      // tokens evaluated per timed repetition
    double bytes_per_token = 0;
    double macs_per_token = 0;
};

// Bytes read per token for a test: every pass reads the weights (a pass of
// parallel sequences once for all of them); each generated token and the
// prompt's last make logits; each token reads one embedding row and its
// visible KV cache.
double bytes_per_token(const Model& m, const Test& t, uint32_t max_batch, uint32_t kv_el) {
    const PassTraffic p = pass_traffic(m);
    const uint32_t n = t.tokens();
    const uint64_t passes = t.n_prompt ? (n + max_batch - 1) / max_batch : n;
    const uint64_t with_logits = t.n_prompt ? 1 : uint64_t(n) * t.parallel;
    double total = double(passes) * double(p.weights) + double(with_logits) * double(p.lm_head);
    for (uint32_t i = 0; i < n; ++i) total += double(p.embd_row + kv_read_bytes(m, t.depth + i, kv_el)) * t.parallel;
    return total / (double(n) * t.parallel);
}

// Multiply-adds per token of a test's matrix products: the layers' for
// every token, the LM head's for each token that makes logits.
double macs_per_token(const Model& m, const Test& t) {
    const PassTraffic p = pass_traffic(m);
    const uint64_t n = t.tokens(), with_logits = t.n_prompt ? 1 : n;
    return (double(n) * double(p.weight_macs) + double(with_logits) * double(p.lm_head_macs)) / double(n);
}

// tg with `t.parallel` sequences generating together on a cpu::Batcher over
// the backend `make` builds (contexts of n_ctx): each fills its cache to the
// test's depth (untimed), then every step evaluates one token of each, with
// its logits. Returns the tokens per timed repetition and fills the row's
// samples.
uint64_t run_parallel(const Model& m, const cpu::Batcher::MakeBackend& make, uint32_t n_ctx, const Test& t,
                      uint32_t reps, std::vector<double>& ns_out, std::vector<double>& ts_out) {
    cpu::Batcher bat(make, n_ctx, t.parallel);
    const uint32_t nv = m.n_vocab, P = t.parallel;
    std::mt19937 rng(1234);
    std::vector<TokenId> seq(t.depth + t.n_gen + 1);
    for (TokenId& x : seq) x = TokenId(rng() % nv);
    std::vector<std::unique_ptr<Backend>> seqs;
    std::vector<std::vector<TokenId>> own(P);
    std::vector<float> logits(uint64_t(P) * nv);
    for (uint32_t s = 0; s < P; ++s) {
        seqs.push_back(bat.open());
        for (TokenId x : seq) own[s].push_back(TokenId((uint32_t(x) + s) % nv));   // each sequence its own tokens
        for (uint32_t i = 0; i < t.depth; i += cpu::Batcher::kMaxRequest) {
            const uint32_t k = std::min(cpu::Batcher::kMaxRequest, t.depth - i);
            seqs[s]->eval_batch({own[s].data() + i, k}, i, nullptr, 0);
        }
    }
    while (bat.step()) {}
    // One step of n tokens each from the depth on: the warm-up (n = 1), then the timed ones.
    auto generate = [&](uint32_t n) {
        for (uint32_t i = 0; i < n; ++i) {
            for (uint32_t s = 0; s < P; ++s)
                seqs[s]->eval_batch({own[s].data() + t.depth + i, 1}, t.depth + i, logits.data() + uint64_t(s) * nv, 1);
            bat.step();
        }
    };
    generate(1);
    for (uint32_t rep = 0; rep < reps; ++rep) {
        const auto t0 = Clock::now();
        generate(t.n_gen);
        const double ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
        ns_out.push_back(ns);
        ts_out.push_back(double(P) * t.n_gen * 1e9 / ns);
    }
    return uint64_t(P) * t.n_gen;
}

std::string type_mix(const std::map<std::string, uint64_t>& types, uint64_t total) {
    std::vector<std::pair<uint64_t, std::string>> v;
    for (const auto& [name, bytes] : types) v.push_back({bytes, name});
    std::sort(v.rbegin(), v.rend());
    std::string s;
    size_t shown = 0;
    for (const auto& [bytes, name] : v) {
        const double pct = 100.0 * double(bytes) / double(total);
        if (pct < 5 && shown > 0) break;
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%s %.0f%%", shown ? ", " : "", name.c_str(), pct);
        s += buf;
        ++shown;
    }
    if (shown < v.size()) s += ", +" + std::to_string(v.size() - shown);
    return s;
}

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

int run(const Args& a) {
    const bool paged = !a.engine.gpu_contiguous_kv;   // the GPU's KV layout (pages unless asked otherwise)
    if (a.output != "md" && a.output != "json" && a.output != "csv")
        throw std::invalid_argument("-o: '" + a.output + "' is not an output format (md, json or csv)");
    const std::vector<uint32_t> pps = parse_sizes("-p", a.prompt), tgs = parse_sizes("-n", a.gen),
                                depths = parse_sizes("-d", a.depth), pars = parse_sizes("--parallel", a.parallel);
    for (uint32_t p : pars)
        if (p < 1 || p > 64) throw std::invalid_argument("--parallel: " + std::to_string(p) + " is not 1 to 64 sequences");
    std::vector<Test> tests;
    for (uint32_t d : depths) {
        for (uint32_t p : pps)
            if (p) tests.push_back({p, 0, d});
        for (uint32_t par : pars)
            for (uint32_t n : tgs)
                if (n) tests.push_back({0, n, d, par});
    }
    if (tests.empty()) throw std::invalid_argument("-p and -n: every size is 0, so there is nothing to measure");

    std::optional<GpuSpec> gpu;
    if (!a.project.empty() && !(gpu = find_gpu(a.project)))
        throw std::invalid_argument("--project " + a.project + ": not a GPU bench knows (" + gpu_names() + ")");
    if (!gpu) gpu = find_gpu("h100-sxm");
    // Grids are sized for the device's SMs, so emu, if it is the driver,
    // gets the projected GPU's (a value the user set stays, and counting
    // refuses it if it differs); a real driver never reads this.
    setenv("PTXLM_EMU_SMS", std::to_string(gpu->sms).c_str(), 0);
    EngineArgs engine = a.engine;
    uint32_t need = 0;
    for (const Test& t : tests) need = std::max(need, t.depth + t.tokens());
    if (engine.n_ctx == 0) engine.n_ctx = need;
    for (const Test& t : tests)
        if (t.depth + t.tokens() > engine.n_ctx)
            throw std::invalid_argument("-c " + std::to_string(engine.n_ctx) + ": test " + t.name() + " needs a context of " +
                                        std::to_string(t.depth + t.tokens()) + " tokens");
    // The memory-copy figure for the CPU's peak, measured before the engine
    // starts its threads (see memcpy_gbs).
    double peak = 0;
    std::string peak_source;
    CpuCeilings ceil;
    if (engine.device != "cuda") {
        const int threads = engine.threads ? engine.threads : cpu::ThreadPool::default_threads();
        // The Isa the CPU backend will select (the reference path has none).
        const cpu::Isa isa = engine.cpu_path == "reference" ? cpu::Isa::Scalar
                             : engine.cpu_isa.empty()       ? cpu::best_isa()
                                                            : cpu::parse_isa(engine.cpu_isa);
        std::fprintf(stderr, "bench: measuring the CPU (%d threads): memory copy, read bandwidth, int8 rate (%s)\n",
                     threads, cpu::isa_name(isa));
        ceil = measure_cpu(threads, isa);
        peak = ceil.memcpy_gbs;
        if (peak > 0)
            std::fprintf(stderr, "bench: memory copy %.1f GB/s, read %.1f GB/s (%.0f MiB, best of %d), int8 %s\n", peak,
                         ceil.read.gbs, double(ceil.read.bytes) / (1 << 20), ceil.read.reps,
                         ceil.int8.gops > 0 ? (fmt("%.0f G multiply-adds/s", ceil.int8.gops) + " (" +
                                               cpu::isa_name(ceil.int8.isa) + ")").c_str()
                                            : "not measured (no SIMD path)");
        else std::fprintf(stderr, "bench: the CPU measurement failed; no peak bandwidth\n");
        peak_source = "memcpy, " + std::to_string(threads) + " threads, read + write";
    }
    Engine e = open_engine(engine);
    const Model& m = *e.model;
    Backend& b = *e.backend;
    const DeviceInfo dev = b.device_info();
    if (dev.kind != "cpu") {
        peak = dev.peak_gbs;
        peak_source = peak > 0 ? "memory clock x bus width" : "";
    }
    const bool emulated = dev.kind == "cuda" && dev.name.find("emu") != std::string::npos;
    if (emulated)
        std::fprintf(stderr, "bench: %s is emu, the CPU interpreter of the driver: these times say nothing about a GPU\n",
                     dev.name.c_str());
    if (!emulated && !a.project.empty())
        throw std::invalid_argument("--project: counted mode needs emu as the driver (PTXLM_LIBCUDA)");
    // Sequences generating together: a batcher over a backend like `b` with a
    // pool of KV pages (on the GPU a second copy of the weights beside b's;
    // on emu counted, not timed: see below).
    cpu::Batcher::MakeBackend make_parallel;
    const auto batched = std::find_if(tests.begin(), tests.end(), [](const Test& t) { return t.parallel > 1; });
    if (batched != tests.end()) {
        try {
            make_parallel = make_step_backend(m, b, engine_backend_options(a.engine));
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument("--parallel " + std::to_string(batched->parallel) + ": " + e.what());
        }
    }

    // Static description of the model and the machine, shared by every row.
    std::map<std::string, uint64_t> types;
    uint64_t n_params = 0;
    m.for_each_weight([&](const Weight& w) {
        types[gguf::type_name(uint32_t(w.type))] += w.rows * w.row_bytes;
        n_params += w.rows * w.cols;
    });
    const uint64_t size = m.weight_bytes();
    const std::string file = std::filesystem::path(m.file.path()).filename().string();
    const std::string ftype = m.hp.file_type ? file_type_name(m.hp.file_type) : "";
    const std::string device = dev.name + " (" + std::to_string(dev.units) + (dev.kind == "cpu" ? " cores)" : " SMs)");

    auto row_json = [&](const Row& r) {
        const MeanSd ts = mean_sd(r.samples_ts), ns = mean_sd(r.samples_ns);
        nlohmann::json j = {
            {"model_filename", m.file.path()},
            {"model_arch", m.hp.arch},
            {"model_file_type", ftype},
            {"model_types", types},
            {"model_size", size},
            {"model_n_params", n_params},
            {"device", dev.kind},
            {"device_name", dev.name},
            {"device_units", dev.units},
            {"n_threads", dev.threads},
            {"schedule", dev.schedule.empty() ? nlohmann::json(nullptr) : nlohmann::json(dev.schedule)},
            {"cpu_path", dev.cpu_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(dev.cpu_path)},
            {"gpu_path", dev.gpu_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(dev.gpu_path)},
            {"emulated", emulated},
            {"kv_type", dev.kv_type},
            {"n_ctx", b.n_ctx()},
            {"n_batch", b.max_batch()},
            {"test", r.test.name()},
            {"n_prompt", r.test.n_prompt},
            {"n_gen", r.test.n_gen},
            {"n_depth", r.test.depth},
            {"n_parallel", r.test.parallel},
            {"n_tokens", r.n_tokens},
            {"repetitions", r.samples_ts.size()},
            {"samples_ns", r.samples_ns},
            {"samples_ts", r.samples_ts},
            {"avg_ns", ns.mean},
            {"stddev_ns", ns.sd},
            {"avg_ts", ts.mean},
            {"stddev_ts", ts.sd},
            {"ms_per_token", 1000.0 / ts.mean},
            {"bytes_per_token", r.bytes_per_token},
            {"bandwidth_gbs", r.bytes_per_token * ts.mean / 1e9},
            {"peak_gbs", peak > 0 ? nlohmann::json(peak) : nlohmann::json(nullptr)},
            {"peak_source", peak_source},
            {"peak_share", peak > 0 ? nlohmann::json(r.bytes_per_token * ts.mean / 1e9 / peak) : nlohmann::json(nullptr)},
            {"peak_rss_bytes", peak_rss_bytes()},
            {"macs_per_token", r.macs_per_token},
        };
        // The CPU's ceilings (measured at start) and this test's share of each.
        const double bw = r.bytes_per_token * ts.mean / 1e9, gops = r.macs_per_token * ts.mean / 1e9;
        auto or_null = [](bool ok, double v) { return ok ? nlohmann::json(v) : nlohmann::json(nullptr); };
        j["read_gbs"] = or_null(ceil.read.gbs > 0, ceil.read.gbs);
        j["read_share"] = or_null(ceil.read.gbs > 0, bw / ceil.read.gbs);
        j["int8_gops"] = or_null(ceil.int8.gops > 0, ceil.int8.gops);
        j["int8_isa"] = ceil.int8.gops > 0 ? nlohmann::json(cpu::isa_name(ceil.int8.isa)) : nlohmann::json(nullptr);
        j["int8_share"] = or_null(ceil.int8.gops > 0, gops / ceil.int8.gops);
        return j;
    };

    static const char* kCsvFields[] = {"model_filename", "model_arch", "model_file_type", "model_types", "model_size",
                                       "model_n_params", "device", "device_name", "device_units", "n_threads",
                                       "schedule", "cpu_path", "gpu_path", "emulated", "kv_type", "n_ctx", "n_batch", "test", "n_prompt", "n_gen",
                                       "n_depth", "n_parallel", "n_tokens", "repetitions", "samples_ns", "samples_ts", "avg_ns",
                                       "stddev_ns", "avg_ts", "stddev_ts", "ms_per_token", "bytes_per_token",
                                       "bandwidth_gbs", "peak_gbs", "peak_source", "peak_share", "peak_rss_bytes",
                                       "macs_per_token", "read_gbs", "read_share", "int8_gops", "int8_isa", "int8_share"};
    auto csv_cell = [](const nlohmann::json& v) -> std::string {
        std::string s;
        if (v.is_string()) s = v.get<std::string>();
        else if (v.is_null()) s = "";
        else if (v.is_array()) {
            for (const auto& x : v) s += (s.empty() ? "" : ";") + x.dump();
        } else if (v.is_object()) {
            for (const auto& [k, x] : v.items()) s += (s.empty() ? "" : ";") + k + ":" + x.dump();
        } else s = v.dump();
        if (s.find_first_of(",\"\n") == std::string::npos) return s;
        std::string q = "\"";
        for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
        return q + "\"";
    };

    if (a.output == "md") {
        std::printf("| model | types | size | params | device | threads | test | t/s | ms/tok | MB/tok | GB/s | %% of peak "
                    "| %% of read | %% of int8 |\n");
        std::printf("| --- | --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    } else if (a.output == "csv") {
        for (size_t i = 0; i < std::size(kCsvFields); ++i) std::printf("%s%s", i ? "," : "", kCsvFields[i]);
        std::printf("\n");
    }
    std::fflush(stdout);

    const bool tty = isatty(STDERR_FILENO);
    TestDriver runner(b, need);
    if (emulated)
        if (auto* cb = dynamic_cast<cuda::CudaBackend*>(&b))
            runner.set_host_fill([cb](uint32_t from, uint32_t to) { cb->fill_kv_for_count(from, to); });
    nlohmann::json all = nlohmann::json::array();
    std::vector<Test> timed;   // the tests with a row in `all`, in its order
    for (const Test& t : tests) {
        Row r;
        r.test = t;
        r.bytes_per_token = bytes_per_token(m, t, b.max_batch(), dev.kv_bytes_per_el);
        r.macs_per_token = macs_per_token(m, t);
        // On emu, batch steps and (with paged KV) prompt chunks are counted
        // below, not timed.
        if (emulated && (t.parallel > 1 || (t.n_prompt > 0 && paged))) continue;
        if (t.parallel > 1) r.n_tokens = run_parallel(m, make_parallel, b.n_ctx(), t, a.reps, r.samples_ns, r.samples_ts);
        // Warm-up: one batch or one token at the test's depth.
        if (t.parallel == 1) {
            runner.fill(t.depth);
            runner.eval(t.depth, t.n_prompt ? std::min(t.n_prompt, b.max_batch()) : 1, t.n_prompt == 0);
        }
        for (uint32_t rep = 0; rep < a.reps && t.parallel == 1; ++rep) {
            runner.fill(t.depth);
            const auto t0 = Clock::now();
            const uint64_t n = runner.eval(t.depth, t.tokens(), t.n_prompt == 0);
            const double ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
            if (rep == 0) r.n_tokens = n;
            if (n != r.n_tokens) throw std::logic_error("bench: repetitions evaluated different token counts");
            r.samples_ns.push_back(ns);
            r.samples_ts.push_back(double(n) * 1e9 / ns);
            if (tty)
                std::fprintf(stderr, "\rbench: %-16s %u/%u  %.2f tok/s ", t.name().c_str(), rep + 1, a.reps,
                             r.samples_ts.back());
        }
        const nlohmann::json j = row_json(r);
        std::fprintf(stderr, "%sbench: %-16s %.2f ± %.2f tok/s (%u repetition%s)\n", tty ? "\r" : "", t.name().c_str(),
                     j["avg_ts"].get<double>(), j["stddev_ts"].get<double>(), a.reps, a.reps == 1 ? "" : "s");
        if (a.output == "md") {
            const double bw = j["bandwidth_gbs"];
            auto share = [&](const char* key) {
                return j[key].is_null() ? std::string("n/a") : fmt("%.0f%%", 100.0 * j[key].get<double>());
            };
            std::printf("| %s | %s | %s | %.1fM | %s | %d | %s | %.2f ± %.2f | %.2f | %.1f | %.2f | %s | %s | %s |\n",
                        file.c_str(), type_mix(types, size).c_str(), format_bytes(size).c_str(), double(n_params) / 1e6,
                        device.c_str(), dev.threads, t.name().c_str(), j["avg_ts"].get<double>(),
                        j["stddev_ts"].get<double>(), j["ms_per_token"].get<double>(), r.bytes_per_token / 1e6, bw,
                        peak > 0 ? fmt("%.0f%%", 100.0 * bw / peak).c_str() : "n/a", share("read_share").c_str(),
                        share("int8_share").c_str());
        } else if (a.output == "csv") {
            for (size_t i = 0; i < std::size(kCsvFields); ++i)
                std::printf("%s%s", i ? "," : "", csv_cell(j[kCsvFields[i]]).c_str());
            std::printf("\n");
        }
        std::fflush(stdout);
        all.push_back(j);
        timed.push_back(t);
    }
    if (emulated) {
        const Schedule sched = parse_schedule(dev.schedule);
        e.backend.reset();   // releases the context, so the counted one starts fresh
        std::map<uint32_t, nlohmann::json> by_depth;
        const std::vector<Test>& single = timed;
        for (const Test& t : single) by_depth[t.depth];
        for (auto& [depth, c] : by_depth) {
            std::fprintf(stderr, "bench: counting one token at depth %u on emu\n", depth);
            c = counted_token(m, sched, parse_gpu_path(a.engine.gpu_path), *gpu, depth, a.engine.gpu_prefetch, paged);
        }
        for (size_t i = 0; i < all.size(); ++i) all[i]["counted"] = by_depth.at(single[i].depth);
        for (const auto& [depth, c] : by_depth) {
            if (a.output == "md") {
                const nlohmann::json& pj = c["projected"];
                std::printf("\ncounted on emu (1 token at depth %u): %llu launches; unique global bytes %.3f x and L2 sector "
                            "traffic %.3f x the %.1f MB a token must read (weight loads' sector efficiency %.1f%%); %llu "
                            "launches with fewer blocks than %s's %d SMs\n",
                            depth, (unsigned long long)c["launches"].get<uint64_t>(), c["unique_over_weights"].get<double>(),
                            c["requested_over_weights"].get<double>(), c["token_bytes"].get<double>() / 1e6,
                            100 * c["sector_efficiency"].get<double>(),
                            (unsigned long long)c["launches_below_sm_count"].get<uint64_t>(), gpu->name, gpu->sms);
                const nlohmann::json& wr = c["shared_wavefront_ratio"];
                std::printf("shared memory: %llu wavefronts per token against an ideal %llu (%s; emu's bank model, not "
                            "measured)\n",
                            (unsigned long long)c["shared_wavefronts"].get<uint64_t>(),
                            (unsigned long long)c["shared_ideal_wavefronts"].get<uint64_t>(),
                            wr.is_null() ? "no shared accesses" : fmt("%.2f x", wr.get<double>()).c_str());
                if (c.contains("grid_syncs"))
                    std::printf("persistent decoder: %llu ops in one launch; %llu all-to-all waits in the op table (%.2f "
                                "per layer); emu saw %llu all-to-all happens-before points on its %llu blocks (%.2f per "
                                "layer); %llu counter waits, %llu of %llu warp instructions spent spinning\n",
                                (unsigned long long)c["ops"].get<uint64_t>(),
                                (unsigned long long)c["all_to_all_waits"].get<uint64_t>(),
                                c["all_to_all_waits_per_layer"].get<double>(), (unsigned long long)c["grid_syncs"].get<uint64_t>(),
                                (unsigned long long)c["emu_blocks"].get<uint64_t>(), c["grid_syncs_per_layer"].get<double>(),
                                (unsigned long long)c["spin_waits"].get<uint64_t>(),
                                (unsigned long long)c["spin_instructions"].get<uint64_t>(),
                                (unsigned long long)c["warp_instructions"].get<uint64_t>());
                std::string bound;
                for (const nlohmann::json& b : pj["bound_us"])
                    bound += (bound.empty() ? "" : ", ") + b[0].get<std::string>() + fmt(" %.1f", b[1].get<double>());
                std::printf("projected for %s (%s schedule): %.0f tok/s, %.1f us per token = %.1f launch overhead + %.1f "
                            "work (bytes alone at the achievable bandwidth: %.1f); work by the limit binding each kernel: "
                            "%s; %.0f%% of peak bandwidth: %s\n",
                            gpu->description, pj["schedule"].get<std::string>().c_str(), pj["tokens_per_s"].get<double>(),
                            pj["us_per_token"].get<double>(), pj["launch_us"].get<double>(), pj["work_us"].get<double>(),
                            pj["memory_us"].get<double>(), bound.c_str(), 100 * pj["bandwidth_share"].get<double>(),
                            pj["label"].get<std::string>().c_str());
                if (const nlohmann::json& pf = c["projected_prefetch"]; !pf.is_null())
                    std::printf("%s: %.0f tok/s, %.1f us per token (launch starts %.1f us, without it %.1f)\n",
                                a.engine.gpu_prefetch ? "without weight prefetch"
                                                      : "with weight prefetch (--gpu-prefetch)",
                                pf["tokens_per_s"].get<double>(), pf["us_per_token"].get<double>(),
                                pf["start_us"].get<double>(), pj["start_us"].get<double>());
                if (const nlohmann::json& pd = c["projected_pdl"]; !pd.is_null())
                    std::printf("with programmatic dependent launches (--gpu-pdl, %.1f us per launch assumed): %.0f "
                                "tok/s, %.1f us per token\n",
                                kLaunchOverheadUs[int(LaunchMode::GraphPdl)], pd["tokens_per_s"].get<double>(),
                                pd["us_per_token"].get<double>());
                std::printf("\nper kernel (registers from %s; blocks per SM for %s):\n\n%s",
                            c["registers_from"].get<std::string>().c_str(), gpu->name, counted_kernel_table(c).c_str());
            }
        }
        // Sequences generating together (a batch step of one decode token
        // each) and, with paged KV, prompts (a chunk of up to 16 of their
        // tokens at the test's depth: how pp runs), counted.
        for (const Test& t : tests) {
            const bool prompt = t.n_prompt > 0 && paged;
            if (t.parallel == 1 && !prompt) continue;
            if (t.parallel > cuda::CudaBackend::kMaxStep)
                throw std::invalid_argument("--parallel " + std::to_string(t.parallel) + ": counted mode counts one batch "
                                            "step, at most " + std::to_string(cuda::CudaBackend::kMaxStep) + " sequences");
            const uint32_t rows = prompt ? std::min(t.n_prompt, cuda::CudaBackend::kMaxStep) : t.parallel;
            std::fprintf(stderr, "bench: counting one batch step of %u %s tokens at depth %u on emu\n", rows,
                         prompt ? "prompt" : "decode", t.depth);
            const nlohmann::json c = counted_step(m, parse_gpu_path(a.engine.gpu_path), *gpu, t.depth, rows, prompt);
            all.push_back({{"test", t.name()}, {"n_parallel", t.parallel}, {"n_depth", t.depth}, {"counted_step", c}});
            if (a.output != "md") continue;
            const nlohmann::json& pj = c["projected"];
            std::string bound;
            for (const nlohmann::json& b : pj["bound_us"])
                bound += (bound.empty() ? "" : ", ") + b[0].get<std::string>() + fmt(" %.1f", b[1].get<double>());
            std::printf("\ncounted on emu (%s %u %s at depth %u): %llu launches; weight loads %.3f x one pass over the "
                        "weights (%.1f MB)\n"
                        "projected for %s: %.0f tok/s%s, %.1f us per step = %.1f launch overhead + %.1f work per token "
                        "x %u; work per token by the limit binding each kernel: %s; %s\n",
                        prompt ? "a prompt chunk of" : "a batch step of", rows, prompt ? "tokens" : "decode tokens",
                        t.depth, (unsigned long long)c["launches"].get<uint64_t>(), c["weight_passes"].get<double>(),
                        c["weight_bytes_one_pass"].get<double>() / 1e6, gpu->description, pj["tokens_per_s"].get<double>(),
                        prompt ? "" : fmt(" together (%.0f per sequence)", pj["tokens_per_s"].get<double>() / rows).c_str(),
                        pj["us_per_token"].get<double>() * rows, pj["launch_us"].get<double>(), pj["work_us"].get<double>(),
                        rows, bound.c_str(), pj["label"].get<std::string>().c_str());
        }
    }
    if (a.output == "json") std::printf("%s\n", all.dump(2).c_str());
    else if (a.output == "md" && peak > 0) {
        std::printf("\npeak: %.1f GB/s (%s); MB/tok: weights + KV cache read per token\n", peak, peak_source.c_str());
        if (ceil.read.gbs > 0)
            std::printf("read: %.1f GB/s (a read-only stream over %.0f MiB, %d threads, best of %d)\n", ceil.read.gbs,
                        double(ceil.read.bytes) / (1 << 20), ceil.read.threads, ceil.read.reps);
        if (ceil.int8.gops > 0)
            std::printf("int8: %.0f G multiply-adds/s (%s dot products in registers, %d threads); a token's matrix "
                        "products take one per weight\n",
                        ceil.int8.gops, cpu::isa_name(ceil.int8.isa), ceil.int8.threads);
    }
    return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("bench", "tokens per second, as llama-bench measures them");
    add_engine_options(*sub, a->engine);
    sub->add_option("-p,--n-prompt", a->prompt, "prompt sizes: N, a list N,M, or ranges A-B+STEP, A-B*FACTOR (default 512; 0 skips)");
    sub->add_option("-n,--n-gen", a->gen, "generation sizes, as -p (default 128; 0 skips)");
    sub->add_option("-d,--n-depth", a->depth, "KV depths to test at, as -p (default 0)");
    sub->add_option("--parallel", a->parallel,
                    "CPU: sequences generating together, as -p (default 1): each tg test also runs as 'tgN xP', P "
                    "sequences stepped together (one pass reads the weights for all), its t/s the aggregate");
    sub->add_option("-r,--repetitions", a->reps, "timed repetitions per test, after one warm-up (default 5)")
        ->check(CLI::Range(1u, 1000u));
    sub->add_option("-o,--output", a->output, "md (a table), json or csv (default md)");
    sub->add_option("--project", a->project,
                    "counted mode on emu: project the speed for one of " + gpu_names() +
                        " (default h100-sxm; always labelled projected)");
    return [a] { return run(*a); };
}

}  // namespace ptxlm::cli
