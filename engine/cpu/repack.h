// Weights rearranged once, at load, for the decode kernels of one Isa.
//
// In the file's layout each row is a run of blocks, so a kernel for one row
// works per block: unpack, one multiply-add, convert two f16 scales, scale,
// and at the end a horizontal sum; on AVX2 that is ~15 instructions per
// 20-byte Q4_1 block, and decode runs at half the machine's read bandwidth,
// bound by those instructions. Packed, kPackRows = 8 rows make a group whose
// blocks interleave: block b of the group holds the 8 rows' f16 scales side
// by side (one vcvtph2ps converts them all), then their quantized values as
// 4-byte words, word c of row r at byte 32·c + 4·r, so one 32-byte load is
// 4 values of each of the 8 rows, one broadcast of 4 input bytes meets all
// 8, and every int32 lane ends as one row's sum: no horizontal sums, and one
// input load and one scale product for 8 rows. The bytes stay the file's
// (f16 scales, the same codes; only Q5's fifth bits are reordered within
// their word), so a token reads as many bytes as before.
//
// Packed blocks, per 32 values of 8 rows:
//   Q4_0: d[8] f16, qs 128 bytes (word c of row r: its bytes 4c..4c+3, low
//         nibbles values 4c.., high nibbles values 16 + 4c..)
//   Q4_1: d[8] f16, m[8] f16, qs 128 bytes (as Q4_0's)
//   Q5_0: d[8] f16, qh[8] (each row's 32 fifth bits, spread: bit 8i + c
//         is value 4c + i's, bit 8i + 4 + c value 16 + 4c + i's, so word
//         c's sit at bits c and 4 + c of byte i), qs 128 bytes (as Q4_0's)
//   Q5_1: d[8] f16, m[8] f16, qh[8] (spread), qs 128 bytes
//   Q8_0: d[8] f16, qs 256 bytes (word c of row r: values 4c..4c+3)
//   IQ4_NL: as Q4_0 (the codes index the non-linear table)
// and per 256 values (a super-block) of 8 rows, the file's words
// in the file's order, each as 8 rows side by side:
//   Q4_K: d[8], dmin[8] f16, the 12 scale bytes as 3 words, qs 32 words
//         (word 8c + w: values 64c + 4w.. in its low nibbles, 64c + 32 +
//         4w.. in its high ones): 1152 bytes
//   Q5_K: d[8], dmin[8], scales 3 words, qh 8 words, qs 32 words: 1408
//   Q6_K: d[8] (the file's last field, first here), ql 32 words, qh 16,
//         the 16 int8 scales 4 words: 1680
//   IQ4_XS: d[8], scales_h[8] (u16), scales_l 1 word, qs 32 words (word
//         4ib + w: values 32ib + 4w.. low, 32ib + 16 + 4w.. high): 1088
//   Q2_K: d[8], dmin[8] (the file's last fields), scales 4 words, qs 16
//         words (word 8h + w: 2-bit field k is value 128h + 32k + 4w..): 672
//   Q3_K: d[8] (the file's last field), hmask 8 words, qs 16 words (as
//         Q2_K's), scales 3 words: 880
//
// A packed kernel computes the same integer sum per (row, block) as the
// scalar kernel (qdot.h); its float arithmetic per (row, input) is one
// product d_w·d_x per block times that sum into one accumulator (Q4_1 and
// Q5_1: m·s per block, Q4_K and Q5_K: dmin_w·d_x times the mins' sum per
// super-block, into the same one), whatever the number of inputs: multi-input results equal single-input ones bit for bit, so a
// sequence's logits do not depend on how it is batched.
//
// Rows past the last full group stay in the file's layout and take the
// unpacked kernels.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "engine/cpu/lazy_buffer.h"
#include "engine/cpu/qdot.h"
#include "engine/model.h"

namespace ptxlm::cpu {

constexpr int kPackRows = 8;

// One group (kPackRows rows of n values) times n_x inputs (1 ..=
// kQDotMaxInputs, QuantizedInput::blocks() each): out[r + k · out_stride] for
// row r and input k. No allocation, no checks.
using PackedDotFn = void (*)(const uint8_t* group, const void* const* xs, int n_x, uint64_t n, float* out,
                             uint64_t out_stride);

// The packed kernel for (isa, type), nullptr when there is none (then the
// weight stays unpacked). isa must be runnable. Every kernel that runs by
// default is 256 bits wide on the same layout: Avx2 and Avx512 take the AVX2
// kernels (on an AVX-512 VNNI Xeon, 2026-11-28, docs/benchmarks.md, they
// decode SmolLM2 at twice the rate of the one-row AVX-512 kernels, which pay
// a horizontal sum per row); Avx512Vnni takes the same algorithms with
// vpdpbusd products and vpternlogd Q5 merges (repack_avx512vnni.cpp), whose
// results equal the AVX2 kernels' bit for bit, so a packed weight gives the
// same bits on the three SIMD Isas (whose input quantizers give the same
// bits too). The 256-value types' kernels: vpmaddubsw on Avx2 and Avx512 (a
// sub-block's int16 sums meet its scale in one vpmaddwd), vpdpbusd on
// Avx512Vnni (int32 sums, one vpmulld by the scale per sub-block), the
// same bits; on a Zen 4 EPYC (2026-12-01, L2-resident groups, 4 inputs) the
// VNNI ones run Q4_K 1.08x, Q5_K/Q3_K/Q6_K 1.22-1.30x, Q2_K 1.16x and
// IQ4_XS 1.87x as fast (docs/benchmarks.md). Q4_K gains least: a word
// needs one broadcast load of the input per vpdpbusd, and the loads bind.
// A zmm build of the VNNI kernels exists (two adjacent words per vector,
// the input's two 4-byte groups in the halves, the halves added per block;
// the same bits, Repack.VnniEqualsAvx2BitForBit) but is not the default:
// with one group of 8 rows per call each input word meets only 8 rows, so a
// zmm's input costs a masked broadcast (a port-0/5 op) per two words, which
// gives back what halving the vpdpbusd saves. On an Emerald Rapids Xeon
// (2026-11-28, 1 thread) it ran pp512 at 0.98× (SmolLM2 Q4_1) and 0.94×
// (gemma-3-270m) of the ymm kernels, tg alike. PTXLM_CPU_PACK_ZMM=1 selects
// it (repack.cpp) for A/B runs.
PackedDotFn packed_fn(Isa isa, gguf::GgmlType type);

// Groups are stored in runs of kRunGroups (32 rows, matvec.h's kGluRows):
// run k at data + k · run_stride. A matrix packed alone has its runs back to
// back (run_stride = kRunGroups · group_bytes, group g at g · group_bytes);
// two packed as a pair (pack_pair) alternate runs, so a pass that takes 32
// rows of one, then the same 32 of the other, reads one stream.
constexpr uint64_t kRunGroups = 4;

struct PackedWeight {
    gguf::GgmlType type = gguf::GgmlType::F32;
    Isa isa = Isa::Scalar;
    uint64_t groups = 0;        // full groups: rows [0, kPackRows · groups) are packed
    uint64_t group_bytes = 0;   // kPackRows · the row's bytes
    uint64_t run_stride = 0;    // bytes from one run of kRunGroups groups to the next
    PackedDotFn fn = nullptr;
    std::shared_ptr<uint8_t> data;   // in a PackArena's chunk (holding it) or its own buffer

    explicit operator bool() const { return fn != nullptr; }
    const uint8_t* group(uint64_t g) const {
        return data.get() + g / kRunGroups * run_stride + g % kRunGroups * group_bytes;
    }
};

// Where packed weights live: 64-byte-aligned pieces of chunks of at least
// kChunk bytes (LazyBuffer on huge pages where the system has them, so a
// decode streams them with one TLB entry per 2 MiB), handed out in order. A
// chunk lives as long as any piece of it; the unused end of the last one is
// never touched, so it is not resident (beyond the huge page the last piece
// ends in).
class PackArena {
public:
    static constexpr uint64_t kChunk = uint64_t(32) << 20;
    std::shared_ptr<uint8_t> take(uint64_t bytes);

private:
    std::shared_ptr<LazyBuffer> chunk_;
    uint64_t used_ = 0;
};

// w packed for isa: empty (false) when (isa, w.type) has no packed kernel or
// w has fewer than kPackRows rows. `copied`, when given, is called as the
// copy goes with each further run of w's rows that has been read, [p, p + n)
// (runs of about 1 MiB, in order): the caller may release those bytes
// (CpuBackend drops the file's pages), so a large matrix is never resident
// twice.
using PackProgress = void (*)(void* ctx, const uint8_t* p, uint64_t n);
// arena: where the packed copy goes (nullptr: a buffer of its own).
PackedWeight pack_weight(const Weight& w, Isa isa, PackProgress copied = nullptr, void* ctx = nullptr,
                         PackArena* arena = nullptr);

// a and b (gate and up) packed for isa as a pair: the same groups, runs of
// kRunGroups groups of a then b's same groups, in one buffer from `arena`
// (a.data at its start, b.data after a's first run; the end of a short last
// run of a is a gap). Each matrix's rows are reported to its own `copied`,
// as pack_weight's. Both empty when either has no packed kernel or their
// full groups differ in number: the caller packs them alone.
struct PackedPair {
    PackedWeight a, b;
};
PackedPair pack_pair(const Weight& a, const Weight& b, Isa isa, PackProgress copied_a, void* ctx_a,
                     PackProgress copied_b, void* ctx_b, PackArena* arena = nullptr);
// Whether b's runs follow a's in one buffer, as pack_pair lays them out.
bool paired(const PackedWeight& a, const PackedWeight& b);

// w's rows · row_bytes bytes as they are, in the file's layout, in `arena`
// (nullptr: a buffer of its own, huge pages too), each ~1 MiB run reported
// to `copied` once it has been read, as pack_weight's: the matrices without
// a packed kernel (F16, F32, ...) or with too few rows, so that a
// decode streams them from huge pages as it does the packed ones. A Weight
// whose data points at the copy gives the same products bit for bit (the
// same bytes through the same kernels). Null for an empty w.
std::shared_ptr<uint8_t> copy_weight(const Weight& w, PackProgress copied = nullptr, void* ctx = nullptr,
                                     PackArena* arena = nullptr);

// Row r (< kPackRows · p.groups) of p back in the file's layout, row_bytes
// written to out: the embedding lookup of a model whose output matrix is its
// token embeddings (the file's pages of it are dropped), and the tests'
// round trip.
void unpack_row(const PackedWeight& p, uint64_t r, uint64_t row_bytes, uint8_t* out);

namespace detail {
// In qdot.h's slot order, nullptr entries where no kernel exists; defined in
// repack_avx2.cpp and repack_avx512vnni.cpp (the templates of repack_kernels*.h).
extern const std::array<PackedDotFn, kQDotSlots> kPackedAvx2;
extern const std::array<PackedDotFn, kQDotSlots> kPackedAvx512Vnni;      // ymm
extern const std::array<PackedDotFn, kQDotSlots> kPackedAvx512VnniZmm;   // zmm, the same algorithms
}  // namespace detail

}  // namespace ptxlm::cpu
