// packed_kernel_bench: each packed decode kernel (engine/cpu/repack.h) on
// one core, from L2 and from memory, beside a plain read of the same bytes
// (bench/packed-kernels runs it).
//
//   packed_kernel_bench [--isa NAME] [--types Q4_1,Q8_0,...] [--cols N]
//                       [--inputs 1,2,4] [--l2-kib K] [--mem-mib M] [--reps R] [--json]
//                       [--chunk-kib C | --interleave]
//
// --chunk-kib C: the memory pass (kernel and read alike) in chunks of C KiB
// of whole groups in a shuffled order, short streams as a decode's per-thread
// shares are; --interleave: the kernel's memory pass takes 4 groups from the
// first half, then 4 from the second, in turn (matmul_glu's gate and up).
//
// Per type a random matrix of `cols` columns (576, SmolLM2's width, rounded
// up to the type's block: 768 for the 256-value types) is quantized (gguf's
// quantizers), repeated to fill K KiB (L2-resident) and M MiB (far larger
// than the last-level cache), and packed for the Isa as the engine packs it
// (pack_weight). One timed pass calls the kernel on every row group in
// order with 1, 2 or 4 inputs (quantize_input's blocks), as a decode (1) or
// a batched step does; the read pass sums the same packed bytes with the
// read ceiling's AVX2 loop. Best of R passes each, alternating. From L2 the
// kernel's rate is what its instructions allow; from memory, how much of
// the read stream it keeps: a kernel whose L2 rate is not well above the
// memory one cannot stream at the roofline on that core.
//
// Pin it (taskset -c N): the figures are one core's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cpu/ceilings.h"
#include "engine/cpu/qdot.h"
#include "engine/cpu/repack.h"
#include "engine/model.h"
#include "gguf/quant.h"

namespace cpu = ptxlm::cpu;
namespace gguf = ptxlm::gguf;

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}

uint64_t number(const char* flag, const std::string& v) {
    size_t used = 0;
    unsigned long long n = 0;
    try {
        n = std::stoull(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != v.size() || n == 0) throw std::invalid_argument(std::string(flag) + ": '" + v + "' is not a positive number");
    return n;
}

struct Options {
    cpu::Isa isa = cpu::best_isa();
    std::vector<gguf::GgmlType> types;
    uint64_t cols = 576;
    std::vector<int> inputs{1, 2, 4};
    uint64_t l2_bytes = 512 << 10, mem_bytes = uint64_t(256) << 20;
    int reps = 9;
    uint64_t chunk_bytes = 0;   // 0: the memory pass is one stream
    bool interleave = false;    // the memory pass as matmul_glu's: 4 groups of each half in turn
    bool json = false;
};

Options parse(int argc, char** argv) {
    Options o;
    std::string types;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--json") {
            o.json = true;
            continue;
        }
        if (a == "--interleave") {
            o.interleave = true;
            continue;
        }
        if (i + 1 >= argc) throw std::invalid_argument(a + ": needs a value (or is not an option; see the comment at the top)");
        const std::string v = argv[++i];
        if (a == "--isa") o.isa = cpu::parse_isa(v);
        else if (a == "--types") types = v;
        else if (a == "--cols") o.cols = number("--cols", v);
        else if (a == "--l2-kib") o.l2_bytes = number("--l2-kib", v) << 10;
        else if (a == "--mem-mib") o.mem_bytes = number("--mem-mib", v) << 20;
        else if (a == "--chunk-kib") o.chunk_bytes = number("--chunk-kib", v) << 10;
        else if (a == "--reps") o.reps = int(std::min<uint64_t>(number("--reps", v), 1000));
        else if (a == "--inputs") {
            o.inputs.clear();
            for (const std::string& n : split(v)) {
                const uint64_t k = number("--inputs", n);
                if (k > uint64_t(cpu::kQDotMaxInputs))
                    throw std::invalid_argument("--inputs: at most " + std::to_string(cpu::kQDotMaxInputs) + " a pass");
                o.inputs.push_back(int(k));
            }
        } else throw std::invalid_argument("unknown option " + a);
    }
    const auto runnable = cpu::runnable_isas();
    if (std::find(runnable.begin(), runnable.end(), o.isa) == runnable.end())
        throw std::invalid_argument(std::string("--isa: ") + cpu::isa_name(o.isa) + " does not run on this CPU");
    for (const std::string& t : split(types.empty() ? "Q4_0,Q4_1,Q5_0,Q5_1,Q8_0,IQ4_NL,Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,IQ4_XS" : types)) {
        const gguf::TypeTraits* tt = gguf::find_type_by_name(t);
        if (!tt) throw std::invalid_argument("--types: '" + t + "' is not a ggml type");
        if (!tt->quantize_row) throw std::invalid_argument("--types: " + t + " has no quantizer here");
        if (!cpu::packed_fn(o.isa, tt->type))
            throw std::invalid_argument("--types: " + t + " has no packed kernel on " + cpu::isa_name(o.isa));
        o.types.push_back(tt->type);
    }
    return o;
}

// A packed matrix of about `bytes`, its rows a quantized random block of
// rows repeated, and the Weight it came from (whose bytes it owns).
struct Matrix {
    std::vector<uint8_t> file;
    cpu::PackedWeight packed;
};

// `cols` a multiple of the type's block (cols_for).
Matrix make_matrix(gguf::GgmlType type, cpu::Isa isa, uint64_t cols, uint64_t bytes, std::mt19937& rng) {
    const gguf::TypeTraits& tt = gguf::type_traits(type);
    const uint64_t row_bytes = *gguf::row_bytes(tt, cols);
    const uint64_t group = row_bytes * cpu::kPackRows;
    const uint64_t groups = std::max<uint64_t>(1, bytes / group), rows = groups * cpu::kPackRows;
    constexpr uint64_t kDistinct = 64;   // rows quantized; the rest repeat them
    std::vector<uint8_t> distinct(kDistinct * row_bytes);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(cols);
    for (uint64_t r = 0; r < kDistinct; ++r) {
        for (float& v : x) v = normal(rng);
        tt.quantize_row(x.data(), distinct.data() + r * row_bytes, int64_t(cols));
    }
    Matrix m;
    m.file.resize(rows * row_bytes);
    for (uint64_t r = 0; r < rows; ++r)
        std::memcpy(m.file.data() + r * row_bytes, distinct.data() + (r % kDistinct) * row_bytes, row_bytes);
    ptxlm::Weight w;
    w.type = type;
    w.cols = cols;
    w.rows = rows;
    w.row_bytes = row_bytes;
    w.data = m.file.data();
    m.packed = cpu::pack_weight(w, isa);
    if (!m.packed) throw std::logic_error(std::string(tt.name) + ": pack_weight packed nothing");
    m.file = {};   // the packed copy is all the passes read
    return m;
}

// --cols rounded up to the type's block (256 values for the K-quants and IQ4_XS).
uint64_t cols_for(gguf::GgmlType type, uint64_t cols) {
    const uint64_t b = gguf::type_traits(type).block_elems;
    return (cols + b - 1) / b * b;
}

struct Result {
    std::string type, where;
    int inputs;
    uint64_t cols;
    double kernel_gbs, read_gbs;
};

}  // namespace

int main(int argc, char** argv) try {
    const Options o = parse(argc, argv);
    std::mt19937 rng(7);
    std::vector<Result> results;
    if (!o.json)
        std::printf("packed kernels on %s, one core; GB/s of packed weights, best of %d\n\n"
                    "| type | columns | from | inputs | kernel GB/s | read GB/s | kernel / read |\n"
                    "| --- | ---: | --- | ---: | ---: | ---: | ---: |\n",
                    cpu::isa_name(o.isa), o.reps);
    for (const gguf::GgmlType type : o.types) {
        const char* name = gguf::type_traits(type).name;
        const uint64_t cols = cols_for(type, o.cols);
        // Inputs quantized as the engine quantizes a step's.
        std::vector<cpu::QuantizedInput> q(size_t(cpu::kQDotMaxInputs));
        std::vector<const void*> xs;
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> x(cols);
        for (auto& in : q) {
            for (float& v : x) v = normal(rng);
            cpu::quantize_input(x.data(), cols, type, in, o.isa);
            xs.push_back(in.blocks());
        }
        for (const auto& [where, bytes] : {std::pair{"L2", o.l2_bytes}, {"memory", o.mem_bytes}}) {
            const bool from_memory = std::string(where) == "memory";
            const Matrix m = make_matrix(type, o.isa, cols, bytes, rng);
            const cpu::PackedWeight& p = m.packed;
            const uint64_t total = p.groups * p.group_bytes, stride = p.groups * cpu::kPackRows;
            // A pass over L2 repeats until it has read about as much as one over memory, so both time alike.
            const uint64_t repeat = std::max<uint64_t>(1, o.mem_bytes / total);
            std::vector<float> out(stride * uint64_t(cpu::kQDotMaxInputs));
            // Chunks of whole groups in a shuffled order (the memory pass only).
            const uint64_t per = o.chunk_bytes && from_memory
                                     ? std::max<uint64_t>(1, o.chunk_bytes / p.group_bytes) : p.groups;
            std::vector<uint64_t> starts;
            for (uint64_t g = 0; g < p.groups; g += per) starts.push_back(g);
            std::shuffle(starts.begin(), starts.end(), rng);
            for (const int nx : o.inputs) {
                double kernel = 1e30, read = 1e30;
                uint64_t sink = 0;
                for (int r = 0; r < o.reps; ++r) {
                    const auto t0 = Clock::now();
                    if (o.interleave && from_memory) {
                        const uint64_t half = p.groups / 2;
                        for (uint64_t i = 0; i + 4 <= half; i += 4) {
                            for (uint64_t g = i; g < i + 4; ++g)
                                p.fn(p.group(g), xs.data(), nx, cols, out.data() + g * cpu::kPackRows, stride);
                            for (uint64_t g = half + i; g < half + i + 4; ++g)
                                p.fn(p.group(g), xs.data(), nx, cols, out.data() + g * cpu::kPackRows, stride);
                        }
                    } else {
                        for (uint64_t k = 0; k < repeat; ++k)
                            for (const uint64_t s : starts)
                                for (uint64_t g = s; g < std::min(p.groups, s + per); ++g)
                                    p.fn(p.group(g), xs.data(), nx, cols, out.data() + g * cpu::kPackRows, stride);
                    }
                    const auto t1 = Clock::now();
                    for (uint64_t k = 0; k < repeat; ++k)
                        for (const uint64_t s : starts) {
                            const uint64_t e = std::min(p.groups, s + per);
                            sink += cpu::detail::read_sum_avx2(p.group(s), (e - s) * p.group_bytes / 128 * 128);
                        }
                    const auto t2 = Clock::now();
                    kernel = std::min(kernel, std::chrono::duration<double>(t1 - t0).count());
                    read = std::min(read, std::chrono::duration<double>(t2 - t1).count());
                }
                if (sink == 1 && out[0] == 1.5f) std::fputs("", stderr);   // keeps both passes
                const double gb = double(total) * double(repeat) / 1e9;
                results.push_back({name, where, nx, cols, gb / kernel, double(total / 128 * 128) * double(repeat) / 1e9 / read});
                const Result& res = results.back();
                if (!o.json)
                    std::printf("| %s | %llu | %s | %d | %.1f | %.1f | %.2f |\n", name, (unsigned long long)cols, where, nx,
                                res.kernel_gbs, res.read_gbs,
                                res.kernel_gbs / res.read_gbs);
                std::fflush(stdout);
            }
        }
    }
    if (o.json) {
        std::printf("[");
        for (size_t i = 0; i < results.size(); ++i) {
            const Result& r = results[i];
            std::printf("%s\n  {\"isa\": \"%s\", \"type\": \"%s\", \"from\": \"%s\", \"inputs\": %d, \"cols\": %llu, "
                        "\"kernel_gbs\": %.3f, \"read_gbs\": %.3f}",
                        i ? "," : "", cpu::isa_name(o.isa), r.type.c_str(), r.where.c_str(), r.inputs,
                        (unsigned long long)r.cols, r.kernel_gbs, r.read_gbs);
        }
        std::printf("\n]\n");
    }
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "packed_kernel_bench: %s\n", e.what());
    return 1;
}
