// Packed weights (engine/cpu/repack.h), for every type and Isa with a packed
// kernel that this CPU runs:
//   - packing keeps every byte: a group unpacks to the file's rows;
//   - each (row, input) of a packed group equals the scalar qdot of that row
//     (same integer sums per block; only the float order differs);
//   - a group times n_x inputs equals the group times each input alone, bit
//     for bit, for n_x = 1 ..= kQDotMaxInputs;
//   - a corrupted scale of one row changes that row's result and no other
//     (the layout is not vacuous: rows do not mix);
//   - what has no packed kernel, or too few rows, is not packed;
//   - matmul with packed jobs equals matmul without them, for rows that are
//     not a multiple of the group and one or many inputs;
//   - the AVX-512 VNNI kernels (vpdpbusd, vpternlogd; ymm and zmm) equal
//     the AVX2 ones (vpmaddubsw) bit for bit, at the extremes of codes and
//     inputs too;
//   - the gate/up pass that finishes its rows (matmul_glu) equals the two
//     products, the activation and quantize_input bit for bit, and a gate
//     row's changed scales move only its row and block;
//   - a matrix without a packed kernel is copied unchanged into the arena,
//     its runs reported in order; on a synthetic Gemma 4 the CPU backend
//     reads its F32 per-layer projection from that copy (huge-page chunk,
//     the file's bytes) and its logits equal those of the backend that reads the
//     file, bit for bit, while a changed byte of the copy changes them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/elementwise.h"
#include "engine/cpu/matvec.h"
#include "engine/cpu/repack.h"
#include "gguf/f16.h"
#include "models/synth/synth.h"

using namespace ptxlm;
using cpu::Isa;
using gguf::GgmlType;
using ptxlm::Weight;

namespace {

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1,   GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::IQ4_NL, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS,
                           GgmlType::Q2_K,   GgmlType::Q3_K};

bool k_quant(GgmlType t) { return gguf::type_traits(t).block_elems == 256; }

// Where a block's f16 scales are: d (and m, or dmin) first, Q6_K's d last.
std::vector<uint64_t> f16_offsets(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
        case GgmlType::Q6_K: case GgmlType::Q3_K: return {gguf::type_traits(t).block_bytes - 2};
        case GgmlType::Q2_K: return {gguf::type_traits(t).block_bytes - 4, gguf::type_traits(t).block_bytes - 2};
        default: return {0};
    }
}

// Values per row for the tests' sweeps: n32 for the 32-element types, the
// next multiple of 256 for the K-quants.
uint64_t row_values(GgmlType t, uint64_t n32) { return k_quant(t) ? (n32 + 255) / 256 * 256 : n32; }

// rows × n weights: quantized normal floats for even rows, random bytes with
// sane f16 scales for odd ones (every code value, incl. Q8_0's -128; every
// K-quant sub-block scale and min).
std::vector<uint8_t> make_rows(GgmlType t, uint64_t rows, uint64_t n, std::mt19937& rng) {
    const gguf::TypeTraits& tt = gguf::type_traits(t);
    const uint64_t rb = n / tt.block_elems * tt.block_bytes;
    std::vector<uint8_t> out(rows * rb);
    std::normal_distribution<float> g(0.f, 1.f);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    std::vector<float> w(n);
    for (uint64_t r = 0; r < rows; ++r) {
        uint8_t* row = out.data() + r * rb;
        if (r % 2 == 0) {
            for (float& v : w) v = g(rng) + (t == GgmlType::Q4_1 || t == GgmlType::Q5_1 ? 0.3f : 0.f);
            tt.quantize_row(w.data(), row, int64_t(n));
            continue;
        }
        for (uint64_t i = 0; i < rb; ++i) row[i] = uint8_t(byte(rng));
        for (uint64_t b = 0; b < rb; b += tt.block_bytes)
            for (uint64_t off : f16_offsets(t)) {
                const uint16_t h = f32_to_f16(scale(rng));
                std::memcpy(row + b + off, &h, 2);
            }
    }
    return out;
}

std::vector<float> make_input(uint64_t n, bool signs, std::mt19937& rng) {
    std::vector<float> x(n);
    std::normal_distribution<float> g(0.f, 1.f);
    std::bernoulli_distribution coin(0.5);
    for (float& v : x) v = signs ? (coin(rng) ? 1.f : -1.f) : g(rng);
    return x;
}

Weight weight(GgmlType t, uint64_t rows, uint64_t n, const std::vector<uint8_t>& data) {
    Weight w;
    w.type = t;
    w.cols = n;
    w.rows = rows;
    w.row_bytes = n / gguf::type_traits(t).block_elems * gguf::type_traits(t).block_bytes;
    w.data = data.data();
    return w;
}

std::vector<Isa> packing_isas(GgmlType t) {
    std::vector<Isa> out;
    for (Isa isa : cpu::runnable_isas())
        if (cpu::packed_fn(isa, t)) out.push_back(isa);
    return out;
}

// Input value i as the quantized input holds it, d · q.
float input_value(const cpu::QuantizedInput& x, uint64_t i) {
    if (x.layout == cpu::QuantizedInput::Layout::Block256) return x.b256[i / 256].d * float(x.b256[i / 256].qs[i % 256]);
    return x.b32[i / 32].d * float(x.b32[i / 32].qs[i % 32]);
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool runnable(Isa isa) {
    for (Isa i : cpu::runnable_isas())
        if (i == isa) return true;
    return false;
}

// rows × n weights whose every byte is `fill` but the f16 scales (and mins)
// of each block: all codes at one value (0xFF: Q4 15, Q5 31 with every fifth
// bit, IQ4_NL's 113, Q6_K 63 with its int8 scales −1, Q4_K/Q5_K with every
// 6-bit scale and min 63, Q2_K 3 with scales and mins 15, Q3_K 7 with
// multipliers 31; 0x80: Q8_0's -128; 0x00: Q5 0, IQ4_NL's -127).
std::vector<uint8_t> fill_rows(GgmlType t, uint64_t rows, uint64_t n, uint8_t fill) {
    const gguf::TypeTraits& tt = gguf::type_traits(t);
    std::vector<uint8_t> out(rows * n / tt.block_elems * tt.block_bytes, fill);
    const uint16_t h = f32_to_f16(0.0123f);
    for (uint64_t b = 0; b < out.size(); b += tt.block_bytes)
        for (uint64_t off : f16_offsets(t)) std::memcpy(out.data() + b + off, &h, 2);
    return out;
}

}  // namespace

// On an x86-64 CPU with AVX2 (every machine the README names) the packed
// kernels are there to test: an empty sweep must not pass quietly.
TEST(Repack, AvailableWhereExpected) {
    bool avx2 = false;
    for (Isa isa : cpu::runnable_isas()) avx2 |= isa == Isa::Avx2;
    for (GgmlType t : kTypes) EXPECT_EQ(!packing_isas(t).empty(), avx2) << gguf::type_traits(t).name;
    EXPECT_EQ(cpu::packed_fn(Isa::Scalar, GgmlType::Q4_1), nullptr);
    EXPECT_EQ(cpu::packed_fn(Isa::Avx2, GgmlType::F16), nullptr);
    // Avx512 runs the AVX2 kernels, Avx512Vnni its own (the sweeps above and
    // VnniEqualsAvx2BitForBit below test them).
    for (GgmlType t : kTypes) {
        if (runnable(Isa::Avx512)) {
            EXPECT_EQ(cpu::packed_fn(Isa::Avx512, t), cpu::packed_fn(Isa::Avx2, t));
        }
        if (runnable(Isa::Avx512Vnni)) {
            EXPECT_NE(cpu::packed_fn(Isa::Avx512Vnni, t), nullptr) << gguf::type_traits(t).name;
            EXPECT_NE(cpu::packed_fn(Isa::Avx512Vnni, t), cpu::packed_fn(Isa::Avx2, t)) << gguf::type_traits(t).name;
        }
    }
}

// The VNNI kernels sum the same integers as the AVX2 ones (vpdpbusd into
// int32 against vpmaddubsw's int16 pairs, both exact) and share the float
// steps: every output the same bits, for random rows and inputs and for the
// extremes where an int16 bound would break (codes at their maximum, inputs
// all ±127), for 1, 2, 4 and kQDotMaxInputs inputs.
TEST(Repack, VnniEqualsAvx2BitForBit) {
    if (!runnable(Isa::Avx512Vnni)) GTEST_SKIP() << "avx512vnni is not runnable on this CPU (or PTXLM_CPU_ISA caps it)";
    std::mt19937 rng(2611);
    const uint64_t n = 1536;
    std::vector<std::vector<float>> inputs;
    inputs.push_back(std::vector<float>(n, 1.f));    // every q = 127
    inputs.push_back(std::vector<float>(n, -1.f));   // every q = -127
    for (int k = 0; k < 6; ++k) inputs.push_back(make_input(n, k % 2 == 1, rng));
    ASSERT_EQ(inputs.size(), size_t(cpu::kQDotMaxInputs));
    for (GgmlType t : kTypes) {
        std::vector<std::pair<std::string, std::vector<uint8_t>>> weights;
        weights.emplace_back("random", make_rows(t, cpu::kPackRows, n, rng));
        for (uint8_t fill : {uint8_t(0xFF), uint8_t(0x00), uint8_t(0x80), uint8_t(0x7F)})
            weights.emplace_back("fill " + std::to_string(fill), fill_rows(t, cpu::kPackRows, n, fill));
        std::vector<cpu::QuantizedInput> xq(inputs.size());
        std::vector<const void*> xs;
        for (size_t k = 0; k < inputs.size(); ++k) {
            cpu::quantize_input(inputs[k].data(), n, t, xq[k]);
            xs.push_back(xq[k].blocks());
        }
        for (const auto& [name, data] : weights) {
            const Weight w = weight(t, cpu::kPackRows, n, data);
            const cpu::PackedWeight a = cpu::pack_weight(w, Isa::Avx2), v = cpu::pack_weight(w, Isa::Avx512Vnni);
            const std::string what = std::string(gguf::type_traits(t).name) + " " + name;
            ASSERT_TRUE(a && v) << what;
            ASSERT_EQ(a.group_bytes, v.group_bytes) << what;
            EXPECT_EQ(std::memcmp(a.group(0), v.group(0), a.group_bytes), 0) << what << ": layouts differ";
            // The ymm kernels and the zmm ones (two words per vector, the
            // halves added per block), on the same packed bytes.
            const int slot = cpu::detail::qdot_slot(t);
            const std::pair<const char*, cpu::PackedDotFn> vnni[] = {
                {"avx512vnni ymm", cpu::detail::kPackedAvx512Vnni[slot]},
                {"avx512vnni zmm", cpu::detail::kPackedAvx512VnniZmm[slot]}};
            for (const auto& [kernel, fn] : vnni)
                for (int n_x : {1, 2, 3, 4, 5, cpu::kQDotMaxInputs}) {
                    ASSERT_NE(fn, nullptr) << what << " " << kernel;
                    const uint64_t stride = cpu::kPackRows + 1;
                    std::vector<float> oa(n_x * stride, -1.f), ov(n_x * stride, -2.f);
                    a.fn(a.group(0), xs.data(), n_x, n, oa.data(), stride);
                    fn(v.group(0), xs.data(), n_x, n, ov.data(), stride);
                    for (uint64_t o = 0; o < oa.size(); ++o) {
                        if (o % stride >= uint64_t(cpu::kPackRows)) continue;
                        EXPECT_TRUE(same_bits(oa[o], ov[o]))
                            << what << " n_x=" << n_x << " row " << o % stride << " input " << o / stride << ": avx2 "
                            << oa[o] << " vs " << kernel << " " << ov[o];
                    }
                }
        }
    }
}

TEST(Repack, GroupsUnpackToTheRowsAndMatchScalar) {
    std::mt19937 rng(77);
    for (GgmlType t : kTypes)
        for (Isa isa : packing_isas(t))
            for (uint64_t n : k_quant(t) ? std::vector<uint64_t>{256, 512, 1536} : std::vector<uint64_t>{32, 96, 576, 1536}) {
                const uint64_t rows = 2 * cpu::kPackRows + 3;   // two groups and a tail
                const std::vector<uint8_t> data = make_rows(t, rows, n, rng);
                const Weight w = weight(t, rows, n, data);
                const cpu::PackedWeight p = cpu::pack_weight(w, isa);
                const std::string what = std::string(gguf::type_traits(t).name) + " " + cpu::isa_name(isa) +
                                         " n=" + std::to_string(n);
                ASSERT_TRUE(p) << what;
                ASSERT_EQ(p.groups, 2u) << what;
                std::vector<uint8_t> back(cpu::kPackRows * w.row_bytes);
                for (uint64_t g = 0; g < p.groups; ++g) {
                    for (int r = 0; r < cpu::kPackRows; ++r)
                        cpu::unpack_row(p, g * cpu::kPackRows + r, w.row_bytes, back.data() + r * w.row_bytes);
                    EXPECT_EQ(std::memcmp(back.data(), w.row(g * cpu::kPackRows), back.size()), 0) << what;
                }
                std::vector<cpu::QuantizedInput> xq(cpu::kQDotMaxInputs);
                std::vector<const void*> xs;
                for (int k = 0; k < cpu::kQDotMaxInputs; ++k) {
                    const std::vector<float> x = make_input(n, k % 3 == 2, rng);
                    cpu::quantize_input(x.data(), n, t, xq[k]);
                    xs.push_back(xq[k].blocks());
                }
                const cpu::QDotFn scalar = cpu::qdot_fn(Isa::Scalar, t);
                for (uint64_t g = 0; g < p.groups; ++g) {
                    // Each input alone: against the scalar kernel of the row.
                    std::vector<float> alone(cpu::kQDotMaxInputs * cpu::kPackRows);
                    for (int k = 0; k < cpu::kQDotMaxInputs; ++k) {
                        p.fn(p.group(g), &xs[k], 1, n, alone.data() + k * cpu::kPackRows, 0);
                        for (int r = 0; r < cpu::kPackRows; ++r) {
                            const void* row = w.row(g * cpu::kPackRows + r);
                            const float want = scalar(row, xs[k], n);
                            // Σ|w·x| bounds the rounding as in test_qdot.
                            float abs_sum = 0;
                            std::vector<float> wf(n);
                            gguf::type_traits(t).dequantize_row(static_cast<const uint8_t*>(row), wf.data(), int64_t(n));
                            for (uint64_t i = 0; i < n; ++i) abs_sum += std::fabs(wf[i] * input_value(xq[k], i));
                            EXPECT_NEAR(alone[k * cpu::kPackRows + r], want, 1e-5 * abs_sum + 1e-30)
                                << what << " group " << g << " row " << r << " input " << k;
                        }
                    }
                    // Several inputs at once: bit for bit the same, nothing written outside.
                    for (int n_x = 1; n_x <= cpu::kQDotMaxInputs; ++n_x) {
                        const uint64_t stride = cpu::kPackRows + 2;
                        const int x0 = (cpu::kQDotMaxInputs - n_x) / 2;
                        std::vector<float> out(cpu::kQDotMaxInputs * stride, -1.f);
                        p.fn(p.group(g), xs.data() + x0, n_x, n, out.data(), stride);
                        for (uint64_t o = 0; o < out.size(); ++o) {
                            const uint64_t r = o % stride, k = o / stride;
                            if (r >= uint64_t(cpu::kPackRows) || k >= uint64_t(n_x)) {
                                EXPECT_EQ(out[o], -1.f) << what << " n_x=" << n_x << ": written outside";
                                continue;
                            }
                            EXPECT_TRUE(same_bits(out[o], alone[(x0 + k) * cpu::kPackRows + r]))
                                << what << " n_x=" << n_x << " row " << r << " input " << k << ": " << out[o]
                                << " vs " << alone[(x0 + k) * cpu::kPackRows + r];
                        }
                    }
                }
            }
}

// One row's d, corrupted before packing, moves that row's result and leaves
// the other seven bit for bit.
TEST(Repack, CorruptedScaleMovesOnlyItsRow) {
    std::mt19937 rng(5);
    for (GgmlType t : kTypes)
        for (Isa isa : packing_isas(t)) {
            const uint64_t n = 256;
            std::vector<uint8_t> data = make_rows(t, cpu::kPackRows, n, rng);
            const std::vector<float> x = make_input(n, false, rng);
            cpu::QuantizedInput xq;
            cpu::quantize_input(x.data(), n, t, xq);
            const void* xs = xq.blocks();
            float before[cpu::kPackRows], after[cpu::kPackRows];
            const cpu::PackedWeight p0 = cpu::pack_weight(weight(t, cpu::kPackRows, n, data), isa);
            ASSERT_TRUE(p0);
            p0.fn(p0.group(0), &xs, 1, n, before, 0);
            const int victim = 5;
            const uint64_t rb = n / gguf::type_traits(t).block_elems * gguf::type_traits(t).block_bytes;
            data[victim * rb + f16_offsets(t)[0] + 1] ^= 0x04;   // block 0's d: the lowest exponent bit
            const cpu::PackedWeight p1 = cpu::pack_weight(weight(t, cpu::kPackRows, n, data), isa);
            p1.fn(p1.group(0), &xs, 1, n, after, 0);
            for (int r = 0; r < cpu::kPackRows; ++r) {
                const std::string what = std::string(gguf::type_traits(t).name) + " row " + std::to_string(r);
                if (r == victim) EXPECT_GT(std::fabs(after[r] - before[r]), 1e-4f * std::fabs(before[r])) << what;
                else EXPECT_TRUE(same_bits(after[r], before[r])) << what;
            }
        }
}

// Packs from an arena: the same bytes as a pack of its own; pieces 64-byte
// aligned and consecutive in a chunk whose start is 2 MiB-aligned (a huge
// page where the system has them); a piece larger than what is left of the
// chunk starts a new one; a chunk lives while a piece of it does.
TEST(Repack, ArenaPiecesAndOwnership) {
    std::mt19937 rng(11);
    const GgmlType t = GgmlType::Q4_1;
    const uint64_t n = 256, rows = 3 * cpu::kPackRows;
    const std::vector<uint8_t> data = make_rows(t, rows, n, rng);
    const Isa isa = packing_isas(t).at(0);
    cpu::PackArena arena;
    const cpu::PackedWeight own = cpu::pack_weight(weight(t, rows, n, data), isa);
    const cpu::PackedWeight a = cpu::pack_weight(weight(t, rows, n, data), isa, nullptr, nullptr, &arena);
    const cpu::PackedWeight b = cpu::pack_weight(weight(t, rows, n, data), isa, nullptr, nullptr, &arena);
    ASSERT_TRUE(own && a && b);
    const uint64_t bytes = a.groups * a.group_bytes;   // 3 groups of 8 Q4_1 rows: 3840 bytes, a multiple of 64
    EXPECT_EQ(std::memcmp(own.group(0), a.group(0), bytes), 0);
    EXPECT_EQ(std::memcmp(own.group(0), b.group(0), bytes), 0);
    const auto addr = [](const uint8_t* p) { return reinterpret_cast<uintptr_t>(p); };
    EXPECT_EQ(addr(a.group(0)) % cpu::LazyBuffer::kHugePage, 0u);
    EXPECT_EQ(addr(b.group(0)), addr(a.group(0)) + (bytes + 63) / 64 * 64);
    EXPECT_EQ(a.data.use_count(), 3);   // the arena's chunk, a and b share one owner
    std::shared_ptr<uint8_t> big = arena.take(cpu::PackArena::kChunk);   // no room left in the first chunk
    EXPECT_EQ(addr(big.get()) % cpu::LazyBuffer::kHugePage, 0u);
    EXPECT_EQ(a.data.use_count(), 2);   // the arena moved to a new chunk; a and b keep the old one
    EXPECT_EQ(big.use_count(), 2);
    std::shared_ptr<uint8_t> next = arena.take(64);   // the big piece filled its chunk: another one
    EXPECT_EQ(big.use_count(), 1);
    EXPECT_EQ(next.use_count(), 2);
}

// copy_weight: the bytes as they are, in the arena right after the piece
// before it (or a huge-page buffer of its own), each ~1 MiB run reported
// once, in order, covering the matrix exactly.
TEST(Repack, CopyWeightKeepsBytesAndReportsRuns) {
    std::mt19937 rng(13);
    const GgmlType t = GgmlType::Q3_K;   // copy_weight copies any type's rows
    const uint64_t n = 4096, rows = 3 * 1024 + 5;   // 1760 bytes a row: ~5.2 MiB, a partial last run
    std::vector<uint8_t> data(rows * n / 256 * gguf::type_traits(t).block_bytes);
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& b : data) b = uint8_t(byte(rng));
    Weight w = weight(t, rows, n, data);
    w.row_bytes = n / 256 * gguf::type_traits(t).block_bytes;
    ASSERT_EQ(w.rows * w.row_bytes, data.size());
    struct Runs {
        const uint8_t* next;
        uint64_t calls = 0;
        bool in_order = true, sized = true;
    } runs{data.data()};
    const auto seen = [](void* ctx, const uint8_t* p, uint64_t len) {
        auto& r = *static_cast<Runs*>(ctx);
        r.in_order &= p == r.next;
        r.sized &= len > 0 && len <= (uint64_t(1) << 20);
        r.next = p + len;
        ++r.calls;
    };
    cpu::PackArena arena;
    const std::shared_ptr<uint8_t> before = arena.take(100);
    const std::shared_ptr<uint8_t> c = cpu::copy_weight(w, seen, &runs, &arena);
    ASSERT_TRUE(c);
    EXPECT_EQ(std::memcmp(c.get(), data.data(), data.size()), 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.get()), reinterpret_cast<uintptr_t>(before.get()) + 128);
    EXPECT_TRUE(runs.in_order);
    EXPECT_TRUE(runs.sized);
    EXPECT_EQ(runs.next, data.data() + data.size());
    EXPECT_EQ(runs.calls, (data.size() + (uint64_t(1) << 20) - 1) >> 20);
    const std::shared_ptr<uint8_t> own = cpu::copy_weight(w);
    ASSERT_TRUE(own);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(own.get()) % cpu::LazyBuffer::kHugePage, 0u);
    EXPECT_EQ(std::memcmp(own.get(), data.data(), data.size()), 0);
    EXPECT_FALSE(cpu::copy_weight(Weight{}));
}

// pack_pair: each matrix's groups hold the bytes pack_weight gives it alone
// (so the same products) and unpack to its rows; the runs alternate, a's
// kRunGroups groups then b's, one stream up to the last run (short here:
// 22 groups, the end of a's last run a gap); each matrix's rows reported
// once, in order, covering its full groups; no pair when the matrices cannot
// be packed alike. Two types of one width: group sizes that differ.
TEST(Repack, PairAlternatesRunsOfTheSameGroups) {
    std::mt19937 rng(17);
    const GgmlType ta = GgmlType::Q4_1, tb = GgmlType::Q8_0;
    const uint64_t n = 256, rows = 22 * cpu::kPackRows + 3;   // 5 runs of 4 groups, a run of 2, 3 tail rows
    const std::vector<uint8_t> da = make_rows(ta, rows, n, rng), db = make_rows(tb, rows, n, rng);
    const Weight wa = weight(ta, rows, n, da), wb = weight(tb, rows, n, db);
    struct Runs {
        const uint8_t* next;
        uint64_t calls = 0;
        bool in_order = true;
    } runs_a{da.data()}, runs_b{db.data()};
    const auto seen = [](void* ctx, const uint8_t* p, uint64_t len) {
        auto& r = *static_cast<Runs*>(ctx);
        r.in_order &= p == r.next && len > 0;
        r.next = p + len;
        ++r.calls;
    };
    for (Isa isa : packing_isas(ta)) {
        if (!cpu::packed_fn(isa, tb)) continue;
        const std::string what = cpu::isa_name(isa);
        runs_a = Runs{da.data()};
        runs_b = Runs{db.data()};
        cpu::PackArena arena;
        const cpu::PackedPair pair = cpu::pack_pair(wa, wb, isa, seen, &runs_a, seen, &runs_b, &arena);
        const cpu::PackedWeight alone_a = cpu::pack_weight(wa, isa), alone_b = cpu::pack_weight(wb, isa);
        ASSERT_TRUE(pair.a && pair.b && alone_a && alone_b) << what;
        ASSERT_EQ(pair.a.groups, 22u);
        ASSERT_EQ(pair.b.groups, 22u);
        EXPECT_TRUE(cpu::paired(pair.a, pair.b)) << what;
        EXPECT_FALSE(cpu::paired(alone_a, alone_b)) << what;
        EXPECT_FALSE(cpu::paired(pair.b, pair.a)) << what;
        const uint64_t ga = pair.a.group_bytes, gb = pair.b.group_bytes;
        ASSERT_NE(ga, gb);
        for (uint64_t g = 0; g < 22; ++g) {
            EXPECT_EQ(std::memcmp(pair.a.group(g), alone_a.group(g), ga), 0) << what << " a group " << g;
            EXPECT_EQ(std::memcmp(pair.b.group(g), alone_b.group(g), gb), 0) << what << " b group " << g;
        }
        std::vector<uint8_t> row(wb.row_bytes);
        for (uint64_t r = 0; r < 22 * cpu::kPackRows; r += 7) {
            cpu::unpack_row(pair.a, r, wa.row_bytes, row.data());
            EXPECT_EQ(std::memcmp(row.data(), wa.row(r), wa.row_bytes), 0) << what << " a row " << r;
            cpu::unpack_row(pair.b, r, wb.row_bytes, row.data());
            EXPECT_EQ(std::memcmp(row.data(), wb.row(r), wb.row_bytes), 0) << what << " b row " << r;
        }
        // The stream: a's run, b's run, a's next run, each right after the last.
        const uint8_t* at = pair.a.group(0);
        for (uint64_t g0 = 0; g0 < 22; g0 += cpu::kRunGroups) {
            const uint64_t g1 = std::min<uint64_t>(22, g0 + cpu::kRunGroups);
            for (uint64_t g = g0; g < g1; ++g, at += ga) EXPECT_EQ(pair.a.group(g), at) << what << " a group " << g;
            at += (g0 + cpu::kRunGroups - g1) * ga;   // the gap after a short last run
            for (uint64_t g = g0; g < g1; ++g, at += gb) EXPECT_EQ(pair.b.group(g), at) << what << " b group " << g;
        }
        EXPECT_EQ(pair.a.data.use_count(), 3);   // the arena's chunk; a and b share one owner
        EXPECT_TRUE(runs_a.in_order && runs_b.in_order) << what;
        EXPECT_EQ(runs_a.next, da.data() + 22 * cpu::kPackRows * wa.row_bytes) << what;
        EXPECT_EQ(runs_b.next, db.data() + 22 * cpu::kPackRows * wb.row_bytes) << what;
        EXPECT_EQ(runs_a.calls, 1u) << what;   // 22 groups, well under 1 MiB
        // No pair: fewer groups in one, or a type without a packed kernel.
        const Weight short_b = weight(tb, rows - 8, n, db);
        EXPECT_FALSE(cpu::pack_pair(wa, short_b, isa, nullptr, nullptr, nullptr, nullptr).a) << what;
        std::vector<uint8_t> f(rows * n * 4);
        const Weight wf = weight(GgmlType::F32, rows, n, f);
        const cpu::PackedPair none = cpu::pack_pair(wf, wb, isa, nullptr, nullptr, nullptr, nullptr);
        EXPECT_FALSE(none.a || none.b) << what;
    }
}

namespace {

// The VmFlags of the mapping of /proc/self/smaps that holds p, and its
// start ("" and 0 when none does).
std::pair<std::string, uintptr_t> mapping_of(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    bool inside = false;
    uintptr_t start = 0;
    for (std::string line; std::getline(smaps, line);) {
        uintptr_t lo = 0, hi = 0;
        char dash = 0;
        std::istringstream head(line);
        if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
            inside = lo <= a && a < hi;
            start = lo;
        } else if (inside && line.rfind("VmFlags:", 0) == 0) {
            return {line, start};
        }
    }
    return {"", 0};
}

}  // namespace

// The CPU backend on a synthetic Gemma 4 (its per-layer model projection is
// F32, which has no packed kernel; its Q4_K and Q6_K matrices do): with
// copies on, the F32 matrix is read from the pack arena (a chunk marked
// MADV_HUGEPAGE, 2 MiB-aligned), the copy holds the file's bytes, the
// packed matrices are not copied, and the logits of a prompt equal, bit for
// bit, those of a backend that reads the file (PTXLM_CPU_COPY=0's path).
// Negative control: one changed float in the copy changes the logits, so
// the products do read the copy.
TEST(Repack, CpuBackendCopiesUnpackedToArena) {
    const std::vector<uint8_t> bytes = synth::model_bytes(synth::preset(synth::Arch::Gemma4, synth::Size::Tiny));
    const Model m = Model::from_file(gguf::File::parse(bytes, "synth-gemma4"));
    ASSERT_GE(m.layers.size(), 1u);
    const Weight& proj = m.per_layer_model_proj;
    const Weight& wo = m.layers[0].wo;
    ASSERT_EQ(proj.type, GgmlType::F32);
    ASSERT_EQ(wo.type, GgmlType::Q4_K);
    const std::vector<TokenId> ids = {1, 17, 42, 99, 5, 63, 8, 120};
    const uint32_t n = uint32_t(ids.size()), nv = m.n_vocab;
    cpu::CpuBackend copied(m, 64, KvType::F16, 2), plain(m, 64, KvType::F16, 2);
    copied.set_weight_copies(true);
    plain.set_weight_copies(false);
    copied.prepare();
    plain.prepare();
    const std::span<const uint8_t> file = m.file.bytes();
    const auto in_file = [&](const uint8_t* p) { return p >= file.data() && p < file.data() + file.size(); };
    const Weight& v = copied.read_view(proj);
    ASSERT_NE(v.data, proj.data);
    EXPECT_FALSE(in_file(v.data));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 64, 0u);
    EXPECT_EQ(v.type, proj.type);
    EXPECT_EQ(v.rows, proj.rows);
    EXPECT_EQ(v.row_bytes, proj.row_bytes);
    EXPECT_EQ(std::memcmp(v.data, proj.data, proj.rows * proj.row_bytes), 0);
    if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) {
        const auto [flags, start] = mapping_of(v.data);
        EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
        EXPECT_EQ(start % cpu::LazyBuffer::kHugePage, 0u);
    }
    EXPECT_EQ(plain.read_view(proj).data, proj.data);   // copies off: the file
    EXPECT_EQ(copied.read_view(wo).data, wo.data);       // Q4_K: packed, not copied
    std::vector<float> a(uint64_t(n) * nv), b(uint64_t(n) * nv), c(uint64_t(n) * nv);
    copied.eval_batch(ids, 0, a.data(), n);
    plain.eval_batch(ids, 0, b.data(), n);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
    // Negative control: the copy's first float doubled, then restored.
    float* f = reinterpret_cast<float*>(const_cast<uint8_t*>(v.data));
    const float saved = *f;
    *f = 2 * saved + 1;
    copied.eval_batch(ids, 0, c.data(), n);
    *f = saved;
    EXPECT_NE(std::memcmp(a.data(), c.data(), a.size() * 4), 0);
    copied.eval_batch(ids, 0, c.data(), n);
    EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * 4), 0);
}

TEST(Repack, WhatIsNotPacked) {
    std::mt19937 rng(9);
    const std::vector<uint8_t> few = make_rows(GgmlType::Q4_1, cpu::kPackRows - 1, 64, rng);
    EXPECT_FALSE(cpu::pack_weight(weight(GgmlType::Q4_1, cpu::kPackRows - 1, 64, few), Isa::Avx2));
    const std::vector<uint8_t> q4_1 = make_rows(GgmlType::Q4_1, cpu::kPackRows, 64, rng);
    EXPECT_FALSE(cpu::pack_weight(weight(GgmlType::Q4_1, cpu::kPackRows, 64, q4_1), Isa::Scalar));
}

// matmul with the packed rows against matmul on the file's rows: the same
// within the float order for one input, and for many inputs bit for bit
// each input's own single-input result; rows past the last group take the
// unpacked kernel.
TEST(Repack, MatmulWithPackedJobs) {
    std::mt19937 rng(31);
    cpu::ThreadPool pool(3);
    for (GgmlType t : kTypes)
        for (Isa isa : packing_isas(t)) {
            const uint64_t n = row_values(t, 576), rows = 5 * cpu::kPackRows + 5, n_in = 11;
            const std::vector<uint8_t> data = make_rows(t, rows, n, rng);
            const Weight w = weight(t, rows, n, data);
            const cpu::PackedWeight p = cpu::pack_weight(w, isa);
            ASSERT_TRUE(p);
            std::vector<float> x(n_in * n);
            for (uint64_t i = 0; i < n_in; ++i) {
                const std::vector<float> xi = make_input(n, i % 4 == 3, rng);
                std::copy(xi.begin(), xi.end(), x.begin() + i * n);
            }
            const cpu::Arithmetic arith{cpu::CpuPath::Quantized, isa};
            std::vector<float> plain(n_in * rows), packed(n_in * rows), single(n_in * rows);
            cpu::matmul(pool, {{&w, plain.data(), rows}}, x.data(), n_in, n, arith);
            cpu::matmul(pool, {{&w, packed.data(), rows, &p}}, x.data(), n_in, n, arith);
            for (uint64_t i = 0; i < n_in; ++i)
                cpu::matmul(pool, {{&w, single.data() + i * rows, rows, &p}}, x.data() + i * n, 1, n, arith);
            for (uint64_t o = 0; o < plain.size(); ++o) {
                const std::string what = std::string(gguf::type_traits(t).name) + " output " + std::to_string(o);
                EXPECT_TRUE(same_bits(packed[o], single[o])) << what << ": " << packed[o] << " vs " << single[o];
                EXPECT_NEAR(packed[o], plain[o], 1e-4 * (std::fabs(plain[o]) + 1.f)) << what;
                if (o % rows >= p.groups * cpu::kPackRows) {
                    EXPECT_TRUE(same_bits(packed[o], plain[o])) << what;
                }
            }
        }
}

// matmul_glu against the two products, the activation over the whole vector
// and quantize_input: the same bits for g and for the down product's
// quantized input, packed and unpacked, one input and many; the down
// product on that input equals it on the float vector. Other scales in one
// gate row change that row's g and nothing else, and only its block may
// change (the items do not mix rows).
TEST(Repack, GluPassEqualsTheProductsThenTheActivation) {
    std::mt19937 rng(47);
    cpu::ThreadPool pool(3);
    const GgmlType down_type = GgmlType::Q8_0;   // a Block32 type: the quantized output
    for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K})
        for (Isa isa : cpu::runnable_isas()) {
            if (isa == Isa::Scalar) continue;
            const cpu::ElementwiseOps ew = cpu::elementwise_ops(isa);
            const uint64_t n = row_values(t, 576), rows = 7 * cpu::kGluRows;
            const std::vector<uint8_t> gd = make_rows(t, rows, n, rng), ud = make_rows(t, rows, n, rng);
            const Weight gw = weight(t, rows, n, gd), uw = weight(t, rows, n, ud);
            const cpu::PackedWeight gp = cpu::pack_weight(gw, isa), up = cpu::pack_weight(uw, isa);
            const cpu::PackedPair pair = cpu::pack_pair(gw, uw, isa, nullptr, nullptr, nullptr, nullptr);
            ASSERT_EQ(bool(pair.a), bool(gp));
            const std::vector<uint8_t> dd = make_rows(down_type, 40, rows, rng);
            const Weight dw = weight(down_type, 40, rows, dd);
            enum Layout { kPlain, kPacked, kPaired };
            for (const Layout layout : {kPlain, kPacked, kPaired})
                for (const uint64_t n_in : {uint64_t(1), uint64_t(5)})
                    for (const cpu::GluFn act : {ew.silu_mul, ew.gelu_mul}) {
                        const std::string what = std::string(gguf::type_traits(t).name) + " " + cpu::isa_name(isa) +
                                                 (layout == kPlain ? " plain" : layout == kPacked ? " packed" : " paired") + " n_in " + std::to_string(n_in);
                        std::vector<float> x(n_in * n);
                        for (uint64_t i = 0; i < n_in; ++i) {
                            const std::vector<float> xi = make_input(n, false, rng);
                            std::copy(xi.begin(), xi.end(), x.begin() + i * n);
                        }
                        const cpu::PackedWeight* gpp = layout == kPlain ? nullptr : layout == kPacked ? &gp : &pair.a;
                        const cpu::PackedWeight* upp = layout == kPlain ? nullptr : layout == kPacked ? &up : &pair.b;
                        if (gpp && !*gpp) gpp = upp = nullptr;   // a type without packed kernels
                        const cpu::Arithmetic arith{cpu::CpuPath::Quantized, isa};
                        std::vector<float> g(n_in * rows), u(n_in * rows), g2(n_in * rows), u2(n_in * rows);
                        cpu::matmul(pool, {{&gw, g.data(), rows, gpp}, {&uw, u.data(), rows, upp}}, x.data(), n_in, n, arith);
                        std::vector<cpu::QuantizedInput> ref(n_in), next(n_in);
                        for (uint64_t i = 0; i < n_in; ++i) {
                            act(g.data() + i * rows, u.data() + i * rows, uint32_t(rows));
                            cpu::quantize_input(g.data() + i * rows, rows, down_type, ref[i], isa);
                        }
                        cpu::matmul_glu(pool, {&gw, g2.data(), rows, gpp}, {&uw, u2.data(), rows, upp}, x.data(), n_in, n,
                                        isa, act, next.data());
                        ASSERT_EQ(std::memcmp(g.data(), g2.data(), g.size() * 4), 0) << what;
                        for (uint64_t i = 0; i < n_in; ++i) {
                            ASSERT_EQ(next[i].n, rows) << what;
                            ASSERT_EQ(std::memcmp(ref[i].b32.data(), next[i].b32.data(), rows / 32 * sizeof(cpu::BlockQ8x32)), 0)
                                << what << " input " << i;
                        }
                        std::vector<float> y(n_in * 40), y2(n_in * 40);
                        cpu::matmul(pool, {{&dw, y.data(), 40}}, g.data(), n_in, rows, arith);
                        cpu::matmul(pool, {{&dw, y2.data(), 40}}, next.data(), n_in, isa);
                        EXPECT_EQ(std::memcmp(y.data(), y2.data(), y.size() * 4), 0) << what;
                    }
            // The control: gate row 40's scales (item 1) set to 1, unpacked.
            std::vector<uint8_t> gd2 = gd;
            const uint16_t one = f32_to_f16(1.0f);
            const uint64_t bb = gguf::type_traits(t).block_bytes;
            for (uint64_t b = 0; b < gw.row_bytes; b += bb) std::memcpy(&gd2[40 * gw.row_bytes + b + f16_offsets(t)[0]], &one, 2);
            const Weight gw2 = weight(t, rows, n, gd2);
            const std::vector<float> x = make_input(n, false, rng);
            std::vector<float> a(rows), b(rows), ua(rows);
            cpu::QuantizedInput qa, qb;
            cpu::matmul_glu(pool, {&gw, a.data(), rows}, {&uw, ua.data(), rows}, x.data(), 1, n, isa, ew.silu_mul, &qa);
            cpu::matmul_glu(pool, {&gw2, b.data(), rows}, {&uw, ua.data(), rows}, x.data(), 1, n, isa, ew.silu_mul, &qb);
            for (uint64_t r = 0; r < rows; ++r) EXPECT_EQ(same_bits(a[r], b[r]), r != 40) << "row " << r;
            cpu::QuantizedInput qref;
            cpu::quantize_input(b.data(), rows, down_type, qref, isa);
            for (uint64_t k = 0; k < rows / 32; ++k) {
                EXPECT_EQ(std::memcmp(&qb.b32[k], &qref.b32[k], sizeof(cpu::BlockQ8x32)), 0) << "block " << k;
                if (k != 1) {
                    EXPECT_EQ(std::memcmp(&qa.b32[k], &qb.b32[k], sizeof(cpu::BlockQ8x32)), 0) << "block " << k;
                }
            }
        }
}
