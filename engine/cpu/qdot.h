// Quantized dot products for the CPU backend: a row of quantized weights times
// an activation vector that was quantized once, per matrix-vector product, to
// 8-bit blocks. The inner loops are integer multiply-adds on the packed
// weights (llama.cpp's scheme); floats enter once per block.
//
// Activation layouts (QuantizedInput), chosen by the weight type:
//   Block32  for Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL: per 32 values, int8 qs in
//            [-127, 127] (never -128, so the SIMD kernels may negate them for
//            the sign trick), float d = amax / 127, s = d · Σqs, which
//            applies the offset m of Q4_1/Q5_1 as m · s, and Σqs itself.
//   Block256 for Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_XS (like ggml's Q8_K): per
//            256 values, int8 qs in [-127, 127], float d = amax / 127, and
//            int16 bsums (Σ of each 16 qs), which apply the mins of
//            Q2_K/Q4_K/Q5_K and the -4 and -32 offsets of Q3_K and Q6_K.
// A value is x ≈ d · q, rounded to nearest. Scales stay float (ggml keeps
// f16 for Q8_0's d; tried, it lands further from llama.cpp's logits).
//
// Kernels exist per Isa; the scalar ones define the arithmetic, the SIMD ones
// compute the same integer sums per block and differ only in the order of the
// float additions. Callers fetch a QDotFn once (qdot_fn) and call it per row,
// or, for a batch of inputs, a QDotMultiFn (qdot_multi_fn) per row or row
// pair and group of inputs: it unpacks the weights once for the group and
// gives the QDotFn's results bit for bit.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "gguf/quant.h"

namespace ptxlm::cpu {

enum class Isa {
    Scalar,
    Avx2,        // avx2 + fma + f16c: 256-bit, vpmaddubsw
    Avx512,      // avx512f + bw + vl: 512-bit, vpmaddubsw
    Avx512Vnni,  // the same plus avx512vnni: vpdpbusd
};

const char* isa_name(Isa isa);   // "scalar", "avx2", "avx512", "avx512vnni"
// Every Isa this CPU's hardware runs, Scalar first, best last.
std::vector<Isa> hardware_isas();
// The Isas the engine may select here: hardware_isas() up to the one named by
// env PTXLM_CPU_ISA (scalar|avx2|avx512|avx512vnni), all of them when it is
// unset or empty. The cap makes an AVX-512 machine behave as an AVX2-only (or
// a scalar) one for everything that selects or sweeps Isas: the backend's
// default, set_isa, the quantizer, the tests. Throws std::runtime_error for a
// name that is unknown or that this CPU cannot run.
std::vector<Isa> runnable_isas();
// The best runnable Isa: runnable_isas().back().
Isa best_isa();
// The Isa named `name` (as isa_name spells it); throws std::invalid_argument
// listing the names for any other.
Isa parse_isa(std::string_view name);

struct BlockQ8x32 {
    int8_t qs[32];
    float d;
    float s;       // d · Σqs
    int32_t sum;   // Σqs (the packed kernels' Q4_0/Q5_0 offset term)
};
struct BlockQ8x256 {
    int8_t qs[256];
    int16_t bsums[16];   // bsums[j] = Σ qs[16j .. 16j+16)
    float d;
};
static_assert(sizeof(BlockQ8x32) == 44 && sizeof(BlockQ8x256) == 292);

struct QuantizedInput {
    enum class Layout { None, Block32, Block256 };
    Layout layout = Layout::None;
    uint64_t n = 0;                  // values quantized
    std::vector<BlockQ8x32> b32;     // n / 32 blocks when layout == Block32
    std::vector<BlockQ8x256> b256;   // n / 256 blocks when layout == Block256

    // Block32 storage for n values (n a multiple of 32), for a pass whose
    // threads fill the blocks themselves (QuantizeBlock32Fn).
    void reset_block32(uint64_t values) {
        layout = Layout::Block32;
        n = values;
        b32.resize(values / 32);
    }

    // The blocks of the current layout, as QDotFn takes them.
    const void* blocks() const {
        return layout == Layout::Block256 ? static_cast<const void*>(b256.data()) : b32.data();
    }
};

// True for the weight types with quantized dot products (Q4_0 Q4_1 Q5_0 Q5_1
// Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS).
bool has_qdot(gguf::GgmlType weight_type);
// The activation layout weights of this type need (None without qdot).
QuantizedInput::Layout qdot_layout(gguf::GgmlType weight_type);

// out = x[0..n) quantized for dot products with rows of weight_type. n is a
// multiple of the type's block size (throws std::invalid_argument otherwise,
// or when the type has no qdot). Reuses out's storage: no allocation once
// its capacity suffices. `isa` (one this CPU runs) picks the quantizer's
// instructions; every Isa gives the same bits.
void quantize_input(const float* x, uint64_t n, gguf::GgmlType weight_type, QuantizedInput& out, Isa isa);
inline void quantize_input(const float* x, uint64_t n, gguf::GgmlType weight_type, QuantizedInput& out) {
    quantize_input(x, n, weight_type, out, best_isa());
}

// One Block32 block of quantize_input: x[0..32) into *out, the same bits.
// For a pass whose threads each quantize the blocks they computed.
using QuantizeBlock32Fn = void (*)(const float* x, BlockQ8x32& out);
QuantizeBlock32Fn quantize_block32_fn(Isa isa);

// Σ_i w[i]·x[i] for one row of n weights; x = QuantizedInput::blocks() of an
// input quantized for the row's type, with n = its QuantizedInput::n. No
// allocation, no checks: the hot path. (The SIMD kernels take plain pointers
// so that they use no inline library code: an inline function instantiated in
// a file built with -mavx512f could be the copy the linker keeps for all.)
using QDotFn = float (*)(const void* row, const void* x, uint64_t n);
// The kernel for (isa, type); nullptr when the type has no qdot. isa must be
// runnable (runnable_isas()).
QDotFn qdot_fn(Isa isa, gguf::GgmlType weight_type);
// Convenience with checks (type, layout, n, isa): throws std::invalid_argument.
float qdot(Isa isa, gguf::GgmlType weight_type, const void* row, const QuantizedInput& x, uint64_t n);

// A few rows times several inputs (a prompt batch), each weight block
// unpacked once for all the inputs: out[r + k · out_stride] = the QDotFn of
// the same Isa for (row r, xs[k]), bit for bit. The SIMD kernels take the
// inputs in passes sized to their registers, and two or four rows at a time
// where that measured faster (the input blocks loaded once for all); the scalar
// ones loop the single-input kernel.
constexpr int kQDotMaxRows = 4;
constexpr int kQDotMaxInputs = 8;
struct QDotBatch {
    const void* rows = nullptr;        // n_rows rows of n weights, row_bytes apart
    uint64_t row_bytes = 0;
    int n_rows = 1;                    // 1 ..= kQDotMaxRows
    const void* const* xs = nullptr;   // n_x inputs, QuantizedInput::blocks() of n values each
    int n_x = 1;                       // 1 ..= kQDotMaxInputs
    uint64_t n = 0;                    // values per row and input
    float* out = nullptr;              // out[r + k · out_stride]: row r, input k
    uint64_t out_stride = 0;
};
// Same discipline as QDotFn (no allocation, no checks).
using QDotMultiFn = void (*)(const QDotBatch& batch);
// The kernel for (isa, type); nullptr when the type has no qdot. isa must be
// runnable.
QDotMultiFn qdot_multi_fn(Isa isa, gguf::GgmlType weight_type);

namespace detail {

// Two tables per Isa (single and multi input), indexed by QDotSlot; defined
// in qdot.cpp, qdot_avx2.cpp and qdot_avx512.cpp.
enum QDotSlot { kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ4_K, kQ5_K, kQ6_K, kIQ4_NL, kIQ4_XS, kQ2_K, kQ3_K, kQDotSlots };
// The slot of a type, -1 for types without qdot.
int qdot_slot(gguf::GgmlType t);
extern const QDotFn kQDotScalar[kQDotSlots];
extern const QDotFn kQDotAvx2[kQDotSlots];
extern const QDotFn kQDotAvx512[kQDotSlots];
extern const QDotFn kQDotAvx512Vnni[kQDotSlots];
extern const QDotMultiFn kQDotMultiScalar[kQDotSlots];
extern const QDotMultiFn kQDotMultiAvx2[kQDotSlots];
extern const QDotMultiFn kQDotMultiAvx512[kQDotSlots];
extern const QDotMultiFn kQDotMultiAvx512Vnni[kQDotSlots];

// The AVX2 kernels (qdot_avx2.cpp) of IQ4_NL, IQ4_XS, Q2_K and Q3_K, by
// name. The AVX-512 tables held these until those types had AVX-512 kernels
// of their own (qdot_avx512.cpp); nothing outside qdot_avx2.cpp uses them now.
float qdot_avx2_iq4_nl(const void* row, const void* x, uint64_t n);
float qdot_avx2_iq4_xs(const void* row, const void* x, uint64_t n);
float qdot_avx2_q2_k(const void* row, const void* x, uint64_t n);
float qdot_avx2_q3_k(const void* row, const void* x, uint64_t n);
void qdot_multi_avx2_iq4_nl(const QDotBatch& batch);
void qdot_multi_avx2_iq4_xs(const QDotBatch& batch);
void qdot_multi_avx2_q2_k(const QDotBatch& batch);
void qdot_multi_avx2_q3_k(const QDotBatch& batch);

// static: each file keeps its own copy, built with its own ISA flags (see
// QDotFn).
static inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

// Q4_K/Q5_K: the 8 six-bit scales and mins packed in 12 bytes, as bytes
// sc[0..8) and m[0..8) (same result as gguf's k_scale_min_get, four at a
// time: sub-blocks 4..7 keep their low 4 bits in bytes 8..11 and their top 2
// bits in bits 6..7 of bytes 0..7).
static inline void unpack_k_scales(const uint8_t s[12], uint8_t sc[8], uint8_t m[8]) {
    const uint32_t a = load_u32(s), b = load_u32(s + 4), c = load_u32(s + 8);
    const uint32_t sc_lo = a & 0x3f3f3f3fu, m_lo = b & 0x3f3f3f3fu;
    const uint32_t sc_hi = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
    const uint32_t m_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u);
    std::memcpy(sc, &sc_lo, 4);
    std::memcpy(sc + 4, &sc_hi, 4);
    std::memcpy(m, &m_lo, 4);
    std::memcpy(m + 4, &m_hi, 4);
}

// A pass's NR weight rows (row_bytes apart) and NX inputs, typed.
template <class Block, class Input, int NR, int NX>
static inline void pass_operands(const void* row, uint64_t row_bytes, const void* const* xs, const Block* (&w)[NR],
                                 const Input* (&y)[NX]) {
    for (int r = 0; r < NR; ++r) w[r] = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(row) + r * row_bytes);
    for (int k = 0; k < NX; ++k) y[k] = static_cast<const Input*>(xs[k]);
}

// The SIMD files' kernels: Kernel::run<NR, NX>(rows, row_bytes, xs, n, out,
// out_stride) computes NR rows times NX inputs in one pass, each (row, input)
// with exactly the arithmetic of NR = NX = 1 (its own accumulators, the same
// order), so that the single-input kernel (run_single) and the multi-input
// one (run_multi) agree bit for bit. run_multi takes rows in fours in
// passes of W4 inputs when W4 > 0 (the kernel does NR = 4), then pairs in
// passes of W2 when W2 > 0 (NR = 2), then single rows in passes of W1, and
// the leftover inputs of each in one smaller pass. static, and Kernel lives
// in the file's anonymous namespace: every instantiation stays in its file.
template <class Kernel, int NR, int M>
static inline void run_tail(int m, const void* rows, uint64_t row_bytes, const void* const* xs, uint64_t n,
                            float* out, uint64_t out_stride) {
    if constexpr (M > 0) {
        if (m == M) return Kernel::template run<NR, M>(rows, row_bytes, xs, n, out, out_stride);
        run_tail<Kernel, NR, M - 1>(m, rows, row_bytes, xs, n, out, out_stride);
    }
}
template <class Kernel, int NR, int W>
static inline void run_inputs(const QDotBatch& a, int r) {
    static_assert(W >= 1 && W <= kQDotMaxInputs);
    const void* rows = static_cast<const uint8_t*>(a.rows) + uint64_t(r) * a.row_bytes;
    int k = 0;
    for (; k + W <= a.n_x; k += W)
        Kernel::template run<NR, W>(rows, a.row_bytes, a.xs + k, a.n, a.out + r + k * a.out_stride, a.out_stride);
    run_tail<Kernel, NR, W - 1>(a.n_x - k, rows, a.row_bytes, a.xs + k, a.n, a.out + r + k * a.out_stride,
                                a.out_stride);
}
template <class Kernel, int W1, int W2 = 0, int W4 = 0>
static void run_multi(const QDotBatch& a) {
    int r = 0;
    if constexpr (W4 > 0)
        for (; r + 4 <= a.n_rows; r += 4) run_inputs<Kernel, 4, W4>(a, r);
    if constexpr (W2 > 0)
        for (; r + 2 <= a.n_rows; r += 2) run_inputs<Kernel, 2, W2>(a, r);
    for (; r < a.n_rows; ++r) run_inputs<Kernel, 1, W1>(a, r);
}
template <class Kernel>
static float run_single(const void* row, const void* x, uint64_t n) {
    float out;
    Kernel::template run<1, 1>(row, 0, &x, n, &out, 1);
    return out;
}

}  // namespace detail
}  // namespace ptxlm::cpu
