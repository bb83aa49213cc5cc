// Quant formats: the type table, f16/bf16 conversions, dequantizers against
// an independent per-element reading of the layouts (FACTS.md), and the
// quantizers' error bounds. gguf-py cross-checks live in py/check_quant.py.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "gguf/f16.h"
#include "gguf/quant.h"
#include "gguf/quant_internal.h"

namespace {

using namespace ptxlm;
using namespace ptxlm::gguf;

constexpr GgmlType kAllTypes[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
    GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q2_K, GgmlType::Q3_K,
    GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::BF16,
    GgmlType::IQ4_NL, GgmlType::IQ4_XS,
};

// ---- deterministic data (independent of the standard library's distributions)

struct Rng {
    std::mt19937 gen;
    explicit Rng(uint32_t seed) : gen(seed) {}
    uint32_t u32() { return uint32_t(gen()); }
    double uniform() { return (u32() >> 8) * 0x1p-24; }   // [0, 1)
    float gaussian() {   // Box-Muller
        const double u1 = 1.0 - uniform(), u2 = uniform();
        return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
    }
    // f16 bits of a value with |v| in [1e-4, 10] and a random sign.
    uint16_t f16_scale() {
        const double mag = std::exp(std::log(1e-4) + uniform() * (std::log(10.0) - std::log(1e-4)));
        return f32_to_f16(float((u32() & 1) ? -mag : mag));
    }
};

std::vector<float> gaussian(uint32_t seed, size_t n, float sigma = 1.f) {
    Rng r(seed);
    std::vector<float> v(n);
    for (float& x : v) x = sigma * r.gaussian();
    return v;
}

std::vector<float> uniform(uint32_t seed, size_t n) {
    Rng r(seed);
    std::vector<float> v(n);
    for (float& x : v) x = float(2.0 * r.uniform() - 1.0);
    return v;
}

std::vector<float> dequantize(GgmlType type, const std::vector<uint8_t>& blocks) {
    const TypeTraits& t = type_traits(type);
    const int64_t n = int64_t(blocks.size() / t.block_bytes) * t.block_elems;
    std::vector<float> out(static_cast<size_t>(n));
    t.dequantize_row(blocks.data(), out.data(), n);
    return out;
}

std::vector<uint8_t> quantize(GgmlType type, const std::vector<float>& x) {
    const TypeTraits& t = type_traits(type);
    std::vector<uint8_t> out(*row_bytes(t, x.size()));
    t.quantize_row(x.data(), out.data(), int64_t(x.size()));
    return out;
}

double rel_rms(const std::vector<float>& x, const std::vector<float>& y) {
    double e2 = 0, x2 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double e = double(y[i]) - x[i];
        e2 += e * e;
        x2 += double(x[i]) * x[i];
    }
    return std::sqrt(e2 / x2);
}

// ---- type table ---------------------------------------------------------------

TEST(QuantTable, EveryTypeIsKnownAndRoundTripsByIdAndName) {
    for (GgmlType type : kAllTypes) {
        const uint32_t id = uint32_t(type);
        const TypeTraits* t = find_type(id);
        ASSERT_NE(t, nullptr) << id;
        EXPECT_EQ(t->type, type);
        EXPECT_EQ(&type_traits(type), t);
        EXPECT_EQ(find_type_by_name(t->name), t) << t->name;
        std::string lower = t->name;
        for (char& c : lower) c = char(std::tolower(c));
        EXPECT_EQ(find_type_by_name(lower), t) << lower;
        EXPECT_EQ(type_name(id), t->name);
        EXPECT_NE(t->dequantize_row, nullptr) << t->name;
    }
}

TEST(QuantTable, BlockSizesMatchTheStructs) {
    struct Want { GgmlType type; uint32_t elems, bytes; };
    const Want want[] = {
        {GgmlType::F32, 1, 4}, {GgmlType::F16, 1, 2}, {GgmlType::BF16, 1, 2},
        {GgmlType::Q4_0, 32, sizeof(BlockQ4_0)}, {GgmlType::Q4_1, 32, sizeof(BlockQ4_1)},
        {GgmlType::Q5_0, 32, sizeof(BlockQ5_0)}, {GgmlType::Q5_1, 32, sizeof(BlockQ5_1)},
        {GgmlType::Q8_0, 32, sizeof(BlockQ8_0)}, {GgmlType::Q8_1, 32, sizeof(BlockQ8_1)},
        {GgmlType::Q2_K, 256, sizeof(BlockQ2_K)}, {GgmlType::Q3_K, 256, sizeof(BlockQ3_K)},
        {GgmlType::Q4_K, 256, sizeof(BlockQ4_K)}, {GgmlType::Q5_K, 256, sizeof(BlockQ5_K)},
        {GgmlType::Q6_K, 256, sizeof(BlockQ6_K)}, {GgmlType::Q8_K, 256, sizeof(BlockQ8_K)},
        {GgmlType::IQ4_NL, 32, sizeof(BlockIQ4_NL)}, {GgmlType::IQ4_XS, 256, sizeof(BlockIQ4_XS)},
    };
    for (const Want& w : want) {
        const TypeTraits& t = type_traits(w.type);
        EXPECT_EQ(t.block_elems, w.elems) << t.name;
        EXPECT_EQ(t.block_bytes, w.bytes) << t.name;
    }
}

TEST(QuantTable, StorageOnlyTypesAreKnownWithoutNumerics) {
    // Readable and inspectable, but nothing may pretend to decode them.
    for (GgmlType type : {GgmlType::IQ2_XXS, GgmlType::IQ3_S, GgmlType::IQ1_M, GgmlType::I32, GgmlType::F64,
                          GgmlType::TQ2_0, GgmlType::MXFP4}) {
        const TypeTraits* t = find_type(uint32_t(type));
        ASSERT_NE(t, nullptr) << uint32_t(type);
        EXPECT_EQ(t->dequantize_row, nullptr) << t->name;
        EXPECT_EQ(t->quantize_row, nullptr) << t->name;
        EXPECT_EQ(find_type_by_name(t->name), t);
    }
    EXPECT_EQ(type_traits(GgmlType::IQ4_XS).block_bytes, 136u);
    EXPECT_EQ(type_traits(GgmlType::IQ1_M).block_elems, 256u);
}

TEST(QuantTable, UnknownIdsAndNames) {
    for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u, 1000u, 0xffffffffu}) {
        EXPECT_EQ(find_type(id), nullptr) << id;
        EXPECT_EQ(type_name(id), "type " + std::to_string(id));
    }
    EXPECT_EQ(find_type_by_name(""), nullptr);
    EXPECT_EQ(find_type_by_name("Q4_2"), nullptr);
    EXPECT_EQ(find_type_by_name("Q4_K_M"), nullptr);   // a file type, not a tensor type
    EXPECT_EQ(find_type_by_name("Q4"), nullptr);
}

TEST(QuantTable, RowBytes) {
    const TypeTraits& q4k = type_traits(GgmlType::Q4_K);
    EXPECT_EQ(row_bytes(q4k, 0), 0u);
    EXPECT_EQ(row_bytes(q4k, 256), 144u);
    EXPECT_EQ(row_bytes(q4k, 4096), 16u * 144u);
    EXPECT_EQ(row_bytes(q4k, 255), std::nullopt);
    EXPECT_EQ(row_bytes(q4k, 640 + 32), std::nullopt);
    EXPECT_EQ(row_bytes(type_traits(GgmlType::Q8_0), 33), std::nullopt);
    EXPECT_EQ(row_bytes(type_traits(GgmlType::Q8_0), 64), 68u);
    EXPECT_EQ(row_bytes(type_traits(GgmlType::F32), 7), 28u);
    EXPECT_EQ(row_bytes(type_traits(GgmlType::BF16), 3), 6u);
    // Overflow of blocks * bytes is rejected, not wrapped.
    EXPECT_EQ(row_bytes(type_traits(GgmlType::F32), uint64_t(1) << 62), std::nullopt);
    EXPECT_EQ(row_bytes(type_traits(GgmlType::F32), uint64_t(1) << 61), uint64_t(1) << 63);
}

// ---- f16 / bf16 ---------------------------------------------------------------

bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

// Independent value of an f16 bit pattern, in double.
double f16_value(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 0x3ff;
    const double mag = e == 0 ? std::ldexp(m, -24) : e == 31 ? INFINITY : std::ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -mag : mag;
}

TEST(F16, ExhaustiveRoundTrip) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = f16_to_f32(uint16_t(h));
        if (f16_is_nan(uint16_t(h))) {
            ASSERT_TRUE(std::isnan(f)) << h;
            // Sign and payload kept; the result is quiet (as F16C and ggml give it).
            EXPECT_EQ(f32_bits(f), (uint32_t(h & 0x8000) << 16) | 0x7fc00000u | (uint32_t(h & 0x3ff) << 13)) << h;
            const uint16_t back = f32_to_f16(f);
            EXPECT_TRUE(f16_is_nan(back)) << h;
            EXPECT_EQ(back, uint16_t(h | 0x200)) << h;   // the NaN payload class: quiet
            continue;
        }
        ASSERT_EQ(double(f), f16_value(uint16_t(h))) << h;
        ASSERT_EQ(f32_to_f16(f), h) << h;
        if ((h & 0x7fff) < 0x7c00 && (h & 0x7fff) != 0x7bff) {   // finite, next is finite
            const uint16_t next = uint16_t(h + 1);
            if (!(h & 0x8000)) {
                EXPECT_LT(f, f16_to_f32(next)) << h;
            }
        }
    }
}

TEST(F16, RoundsTiesToEvenEverywhere) {
    // The midpoint between consecutive finite f16 values (needs 12 bits: exact
    // in f32) goes to the even one; one f32 ulp either side decides.
    // (0x7bff, whose upper neighbour is inf, is in OverflowSubnormalsAndSpecials.)
    for (uint32_t h = 0; h < 0x7bff; ++h) {
        for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
            const uint16_t lo = uint16_t(h | sign), hi = uint16_t((h + 1) | sign);
            const double mid = (f16_value(lo) + f16_value(hi)) / 2;
            const float fm = float(mid);
            ASSERT_EQ(double(fm), mid);
            const uint16_t even = (h & 1) ? hi : lo;
            ASSERT_EQ(f32_to_f16(fm), even) << std::hex << h;
            const float toward_lo = std::nextafter(fm, 0.f), toward_hi = std::nextafter(fm, sign ? -INFINITY : INFINITY);
            ASSERT_EQ(f32_to_f16(toward_lo), lo) << std::hex << h;
            ASSERT_EQ(f32_to_f16(toward_hi), hi) << std::hex << h;
        }
    }
}

TEST(F16, OverflowSubnormalsAndSpecials) {
    EXPECT_EQ(f32_to_f16(65504.f), 0x7bff);
    EXPECT_EQ(f32_to_f16(std::nextafter(65520.f, 0.f)), 0x7bff);
    EXPECT_EQ(f32_to_f16(65520.f), 0x7c00);   // tie between 65504 and 2^16: even is inf
    EXPECT_EQ(f32_to_f16(-65520.f), 0xfc00);
    EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7c00);
    EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
    EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
    EXPECT_EQ(f32_to_f16(0.f), 0x0000);
    EXPECT_EQ(f32_to_f16(-0.f), 0x8000);
    EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);           // smallest subnormal
    EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);           // tie with zero: even is zero
    EXPECT_EQ(f32_to_f16(std::nextafter(0x1p-25f, 1.f)), 0x0001);
    EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002);         // tie between 1 and 2: even
    EXPECT_EQ(f32_to_f16(0x1.4p-23f), 0x0002);         // 2.5 ulp: tie, even is 2
    EXPECT_EQ(f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);  // tie between 0x3ff and 0x400
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
    EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::denorm_min()), 0x8000);
    EXPECT_EQ(f32_to_f16(1e-30f), 0x0000);
    EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
    EXPECT_EQ(f16_to_f32(0x03ff), 0x3ffp-24f);
    EXPECT_EQ(f16_to_f32(0x8001), -0x1p-24f);
    EXPECT_EQ(f16_to_f32(0x3c00), 1.f);
    EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
    EXPECT_EQ(f16_to_f32(0xfc00), -INFINITY);
    // NaN stays NaN and comes out quiet, even from a signalling f32 NaN whose
    // payload lies only in the low 13 bits.
    EXPECT_EQ(f32_to_f16(f32_from_bits(0x7f800001u)), 0x7e00);
    EXPECT_EQ(f32_to_f16(f32_from_bits(0xffc00000u)), 0xfe00);
    EXPECT_EQ(f32_to_f16(f32_from_bits(0x7fa00000u)), 0x7f00);
    EXPECT_EQ(f32_bits(f16_to_f32(0x7c01)), 0x7fc02000u);
}

TEST(BF16, ExhaustiveRoundTripTiesAndNaN) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint32_t u = h << 16;
        const bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
        ASSERT_EQ(f32_bits(bf16_to_f32(uint16_t(h))), u);
        if (nan) {
            EXPECT_EQ(f32_to_bf16(f32_from_bits(u)), uint16_t(h | 0x40)) << h;
            EXPECT_EQ(f32_to_bf16(f32_from_bits(u | 0x1234)), uint16_t(h | 0x40)) << h;
            continue;
        }
        ASSERT_EQ(f32_to_bf16(f32_from_bits(u)), h);
        if ((h & 0x7f80) == 0x7f80) continue;   // inf: no value above it
        // Below half, exactly half (to even; 0x7f7f rounds up into inf), above half.
        const uint16_t up = uint16_t(h + 1), even = (h & 1) ? up : uint16_t(h);
        ASSERT_EQ(f32_to_bf16(f32_from_bits(u | 0x7fff)), h);
        ASSERT_EQ(f32_to_bf16(f32_from_bits(u | 0x8000)), even);
        ASSERT_EQ(f32_to_bf16(f32_from_bits(u | 0x8001)), up);
    }
    EXPECT_EQ(f32_to_bf16(f32_from_bits(0x7f800001u)), 0x7fc0);
    EXPECT_EQ(f32_to_bf16(3.4e38f), 0x7f80);   // overflow to inf
}

// ---- dequantizers against an independent reading of the layouts --------------

float h2f(const uint8_t* p) { uint16_t h; std::memcpy(&h, p, 2); return f16_to_f32(h); }

// Element i of one block of type t at p, computed directly from the layout
// description (FACTS.md, ggml's block structs), one element at a time.
float expected_element(GgmlType t, const uint8_t* p, int i) {
    switch (t) {
    case GgmlType::Q4_0: {   // {d; qs[16]}
        const int q = i < 16 ? (p[2 + i] & 15) : (p[2 + i - 16] >> 4);
        return float(q - 8) * h2f(p);
    }
    case GgmlType::Q4_1: {   // {d; m; qs[16]}
        const int q = i < 16 ? (p[4 + i] & 15) : (p[4 + i - 16] >> 4);
        return float(q) * h2f(p) + h2f(p + 2);
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {   // {d; [m;] qh[4]; qs[16]}
        const int o = t == GgmlType::Q5_0 ? 2 : 4;
        const int lo = i < 16 ? (p[o + 4 + i] & 15) : (p[o + 4 + i - 16] >> 4);
        const int hi = (p[o + i / 8] >> (i % 8)) & 1;   // bit i of the LE u32
        const int q = lo + 16 * hi;
        return t == GgmlType::Q5_0 ? float(q - 16) * h2f(p) : float(q) * h2f(p) + h2f(p + 2);
    }
    case GgmlType::Q8_0: return float(int8_t(p[2 + i])) * h2f(p);
    case GgmlType::Q8_1: return float(int8_t(p[4 + i])) * h2f(p);
    case GgmlType::Q8_K: { float d; std::memcpy(&d, p, 4); return d * float(int8_t(p[4 + i])); }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {   // {d; dmin; scales[12]; [qh[32];] qs[128]}
        const uint8_t* s = p + 4;
        const int j = i / 32;   // sub-block
        const int sc = j < 4 ? (s[j] & 63) : ((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        const int m = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
        const int c = i / 64, l = i % 32;
        const bool high = (i % 64) >= 32;
        const uint8_t* qs = p + (t == GgmlType::Q4_K ? 16 : 48);
        int q = high ? (qs[32 * c + l] >> 4) : (qs[32 * c + l] & 15);
        if (t == GgmlType::Q5_K) q += 16 * ((p[16 + l] >> (2 * c + (high ? 1 : 0))) & 1);
        const float d1 = h2f(p) * float(sc), m1 = h2f(p + 2) * float(m);
        return d1 * float(q) - m1;
    }
    case GgmlType::Q6_K: {   // {ql[128]; qh[64]; scales[16]; d}
        const int h = i / 128, r = i % 128, l = r % 32, quarter = r / 32;
        const uint8_t* ql = p + 64 * h;
        const uint8_t* qh = p + 128 + 32 * h;
        const int lo = quarter == 0 ? (ql[l] & 15) : quarter == 1 ? (ql[l + 32] & 15)
                     : quarter == 2 ? (ql[l] >> 4) : (ql[l + 32] >> 4);
        const int q = (lo | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
        const int sc = int8_t(p[192 + 8 * h + l / 16 + 2 * quarter]);
        return h2f(p + 208) * float(sc) * float(q);
    }
    case GgmlType::Q2_K: {   // {scales[16]; qs[64]; d; dmin}: element 128h + 32k + l
        const int h = i / 128, k = (i % 128) / 32, l = i % 32;
        const int q = (p[16 + 32 * h + l] >> (2 * k)) & 3;
        const uint8_t sc = p[i / 16];
        const float dl = h2f(p + 80) * float(sc & 15), ml = h2f(p + 82) * float(sc >> 4);
        return dl * float(q) - ml;
    }
    case GgmlType::Q3_K: {   // {hmask[32]; qs[64]; scales[12]; d}
        const int h = i / 128, k = (i % 128) / 32, l = i % 32, j = i / 16;
        const uint8_t* s = p + 96;
        const int sc6 = (j < 8 ? (s[j] & 15) : (s[j - 8] >> 4)) | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
        const int low = (p[32 + 32 * h + l] >> (2 * k)) & 3;
        const int high = (p[l] >> (4 * h + k)) & 1;
        const float dl = h2f(p + 108) * float(sc6 - 32);
        return dl * float(low - (high ? 0 : 4));
    }
    case GgmlType::IQ4_NL: {   // {d; qs[16]}, codes as Q4_0's into the table
        const int q = i < 16 ? (p[2 + i] & 15) : (p[2 + i - 16] >> 4);
        return h2f(p) * float(kIQ4Values[q]);
    }
    case GgmlType::IQ4_XS: {   // {d; scales_h (u16); scales_l[4]; qs[128]}
        const int j = i / 32, l = i % 32;
        const int scales_h = p[2] | p[3] << 8;
        const int ls = ((p[4 + j / 2] >> (4 * (j % 2))) & 15) | (((scales_h >> (2 * j)) & 3) << 4);
        const uint8_t* qs = p + 8 + 16 * j;
        const int q = l < 16 ? (qs[l] & 15) : (qs[l - 16] >> 4);
        const float dl = h2f(p) * float(ls - 32);
        return dl * float(kIQ4Values[q]);
    }
    default: return NAN;
    }
}

// Offsets of the f16 scale fields, set to sane values in random blocks.
std::vector<int> f16_fields(GgmlType t) {
    switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: return {0};
    case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: return {0};
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q8_1: return {0, 2};
    case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q6_K: return {208};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    default: return {};
    }
}

TEST(Dequantize, RandomBlocksMatchTheLayoutBitForBit) {
    const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                              GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q2_K, GgmlType::Q3_K,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K,
                              GgmlType::IQ4_NL, GgmlType::IQ4_XS};
    Rng r(7);
    for (GgmlType type : types) {
        const TypeTraits& t = type_traits(type);
        const int nblocks = 64;
        std::vector<uint8_t> blocks(size_t(nblocks) * t.block_bytes);
        for (uint8_t& b : blocks) b = uint8_t(r.u32());
        for (int b = 0; b < nblocks; ++b) {
            uint8_t* p = blocks.data() + size_t(b) * t.block_bytes;
            for (int off : f16_fields(type)) {
                const uint16_t h = r.f16_scale();
                std::memcpy(p + off, &h, 2);
            }
            if (type == GgmlType::Q8_K) {
                const float d = f16_to_f32(r.f16_scale());
                std::memcpy(p, &d, 4);
            }
        }
        const std::vector<float> y = dequantize(type, blocks);
        for (int b = 0; b < nblocks; ++b)
            for (uint32_t i = 0; i < t.block_elems; ++i) {
                const float want = expected_element(type, blocks.data() + size_t(b) * t.block_bytes, int(i));
                ASSERT_EQ(f32_bits(y[b * t.block_elems + i]), f32_bits(want)) << t.name << " block " << b << " el " << i;
            }
    }
}

// Hand-made blocks with hand-computed values (exact in binary, so EXPECT_EQ).
TEST(Dequantize, HandMadeQ4_0Q5_0Q8_0) {
    BlockQ4_0 q4{};
    q4.d = f32_to_f16(0.5f);
    for (int j = 0; j < 16; ++j) q4.qs[j] = uint8_t(j | (15 - j) << 4);
    std::vector<uint8_t> raw(sizeof q4);
    std::memcpy(raw.data(), &q4, sizeof q4);
    std::vector<float> y = dequantize(GgmlType::Q4_0, raw);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], 0.5f * float(j - 8));
        EXPECT_EQ(y[j + 16], 0.5f * float(7 - j));
    }
    EXPECT_EQ(y[0], -4.f);
    EXPECT_EQ(y[16], 3.5f);

    BlockQ5_0 q5{};
    q5.d = f32_to_f16(-0.25f);
    for (int j = 0; j < 16; ++j) q5.qs[j] = uint8_t(j | j << 4);
    const uint32_t qh = 0x8000'0001u;   // 5th bit of element 0 and element 31
    std::memcpy(q5.qh, &qh, 4);
    raw.assign(sizeof q5, 0);
    std::memcpy(raw.data(), &q5, sizeof q5);
    y = dequantize(GgmlType::Q5_0, raw);
    EXPECT_EQ(y[0], -0.f);               // q = 16: (16 - 16) * -0.25
    EXPECT_EQ(y[1], 3.75f);              // q = 1: -15 * -0.25
    EXPECT_EQ(y[16], 4.f);               // q = 0
    EXPECT_EQ(y[31], -3.75f);            // q = 15 + 16 = 31

    BlockQ8_0 q8{};
    q8.d = f32_to_f16(0.125f);
    for (int j = 0; j < 32; ++j) q8.qs[j] = int8_t(j * 8 - 128);
    raw.assign(sizeof q8, 0);
    std::memcpy(raw.data(), &q8, sizeof q8);
    y = dequantize(GgmlType::Q8_0, raw);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], float(j - 16));
}

TEST(Dequantize, HandMadeQ4_K) {
    BlockQ4_K b{};
    b.d = f32_to_f16(0.5f);
    b.dmin = f32_to_f16(0.25f);
    // sub-block j: scale 2j + 1, min 40 + j (6 bits, so j >= 4 spill into the top bits).
    const uint8_t sc[8] = {1, 3, 5, 7, 9, 11, 13, 63}, m[8] = {40, 41, 42, 43, 44, 45, 46, 47};
    detail::k_scale_min_set(sc, m, b.scales);
    for (int j = 0; j < 8; ++j) {   // the packing inverts the FACTS.md unpacking
        uint8_t gs, gm;
        detail::k_scale_min_get(j, b.scales, &gs, &gm);
        EXPECT_EQ(gs, sc[j]);
        EXPECT_EQ(gm, m[j]);
    }
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = uint8_t((l % 16) | ((15 - l % 16) << 4));
    std::vector<uint8_t> raw(sizeof b);
    std::memcpy(raw.data(), &b, sizeof b);
    const std::vector<float> y = dequantize(GgmlType::Q4_K, raw);
    for (int i = 0; i < 256; ++i) {
        const int j = i / 32, l = i % 32;
        const int q = (j % 2 == 0) ? l % 16 : 15 - l % 16;
        EXPECT_EQ(y[i], 0.5f * float(sc[j]) * float(q) - 0.25f * float(m[j])) << i;
    }
    EXPECT_EQ(y[0], -10.f);                 // 0.5*1*0 - 0.25*40
    EXPECT_EQ(y[255], 0.5f * 63 * 0 - 0.25f * 47);
    EXPECT_EQ(y[224], 0.5f * 63 * 15 - 0.25f * 47);   // 460.75
}

TEST(Dequantize, HandMadeQ6_K) {
    BlockQ6_K b{};
    b.d = f32_to_f16(0.0625f);
    for (int j = 0; j < 16; ++j) b.scales[j] = int8_t(j % 2 ? -(j + 1) : (j + 1));
    // Element e of half h gets q = (e % 64) - 32, written through the layout.
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
            const int q1 = l, q2 = l + 32, q3 = (l + 64) % 64, q4 = (l + 96) % 64;
            b.ql[64 * h + l] = uint8_t((q1 & 15) | (q3 & 15) << 4);
            b.ql[64 * h + l + 32] = uint8_t((q2 & 15) | (q4 & 15) << 4);
            b.qh[32 * h + l] = uint8_t((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
        }
    std::vector<uint8_t> raw(sizeof b);
    std::memcpy(raw.data(), &b, sizeof b);
    const std::vector<float> y = dequantize(GgmlType::Q6_K, raw);
    for (int i = 0; i < 256; ++i) {
        const int q = (i % 128) % 64 - 32;
        const int sc = b.scales[i / 16];
        EXPECT_EQ(y[i], 0.0625f * float(sc) * float(q)) << i;
    }
    EXPECT_EQ(y[0], 0.0625f * 1 * -32);      // -2
    EXPECT_EQ(y[31], 0.0625f * -2 * -1);     // 0.125
    EXPECT_EQ(y[255], 0.0625f * -16 * 31);   // -31
}

TEST(Dequantize, PlainFloatTypes) {
    const std::vector<float> x = {1.f, -2.5f, 0x1p-24f, 65504.f, -0.f, 3.14159f};
    std::vector<uint8_t> raw(x.size() * 4);
    std::memcpy(raw.data(), x.data(), raw.size());
    EXPECT_EQ(dequantize(GgmlType::F32, raw), x);
    const std::vector<float> h = dequantize(GgmlType::F16, quantize(GgmlType::F16, x));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(h[i], f16_to_f32(f32_to_f16(x[i])));
    EXPECT_EQ(h[3], 65504.f);
    const std::vector<float> b = dequantize(GgmlType::BF16, quantize(GgmlType::BF16, x));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(b[i], bf16_to_f32(f32_to_bf16(x[i])));
}


// ---- quantizers -----------------------------------------------------------------

constexpr GgmlType kQuantizable[] = {
    GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
    GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K,
    GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
};

TEST(Quantize, TableHasTheQuantizers) {
    for (GgmlType t : kQuantizable) EXPECT_NE(type_traits(t).quantize_row, nullptr) << type_traits(t).name;
}

// Relative RMS error sqrt(sum e^2 / sum x^2) of quantize -> dequantize over
// 2^18 values. Bounds are the values measured on these seeds plus ~15% (the
// quantizers are deterministic, so the margin only absorbs later tuning of the
// searches; a real regression, e.g. a lost refit or a wrong scale packing,
// costs far more than 15%). F16/BF16 bounds are theoretical: RNE leaves a
// relative error uniform in +-2^-11 (resp. 2^-8), RMS 2^-11/sqrt(3).
// Measured (gaussian / uniform[-1,1] / gaussian sigma 0.02):
//   Q4_0 .0828/.0598/.0828  Q4_1 .0782/.0607/.0782  Q5_0 .0405/.0285/.0405
//   Q5_1 .0379/.0294/.0379  Q8_0 .00535/.00377/.00535  Q4_K .0710/.0546/.0710
//   Q5_K .0356/.0272/.0356  Q6_K .0167/.0125/.0167  Q8_K .0069/.0039/.0069
//   Q2_K .2684/.2218/.2681  Q3_K .1444/.1184/.1440
//   IQ4_NL .0739/.0625/.0740  IQ4_XS .0742/.0627/.0743
struct ErrorBound { GgmlType type; double gaussian, uniform; };
constexpr ErrorBound kErrorBounds[] = {
    {GgmlType::F16, 2.9e-4, 2.9e-4},   {GgmlType::BF16, 2.3e-3, 2.3e-3},
    {GgmlType::Q4_0, 0.095, 0.069},    {GgmlType::Q4_1, 0.090, 0.070},
    {GgmlType::Q5_0, 0.047, 0.033},    {GgmlType::Q5_1, 0.044, 0.034},
    {GgmlType::Q8_0, 0.0062, 0.0044},  {GgmlType::Q4_K, 0.080, 0.063},
    {GgmlType::Q5_K, 0.041, 0.031},    {GgmlType::Q6_K, 0.0192, 0.0144},
    {GgmlType::Q8_K, 0.0080, 0.0045},
    {GgmlType::Q2_K, 0.31, 0.255},     {GgmlType::Q3_K, 0.166, 0.136},
    {GgmlType::IQ4_NL, 0.085, 0.072},  {GgmlType::IQ4_XS, 0.085, 0.072},
};

TEST(Quantize, RelativeRmsErrorBounds) {
    const size_t n = size_t(1) << 18;
    const std::vector<float> g = gaussian(1, n), u = uniform(2, n), w = gaussian(3, n, 0.02f);
    for (const ErrorBound& b : kErrorBounds) {
        const char* name = type_traits(b.type).name;
        const double eg = rel_rms(g, dequantize(b.type, quantize(b.type, g)));
        const double eu = rel_rms(u, dequantize(b.type, quantize(b.type, u)));
        const double ew = rel_rms(w, dequantize(b.type, quantize(b.type, w)));
        std::printf("  %-5s rel RMS gaussian %.5f uniform %.5f weights(0.02) %.5f\n", name, eg, eu, ew);
        EXPECT_LT(eg, b.gaussian) << name;
        EXPECT_LT(eu, b.uniform) << name;
        EXPECT_LT(ew, b.gaussian) << name;   // f16 scales must not hurt at weight-like magnitudes
    }
}

// Values already on a type's grid come back exactly (as values: a -0 on the
// grid may come back as +0).
TEST(Quantize, ValuesOnTheGridRoundTripExactly) {
    Rng r(11);
    const int nb = 64;
    auto check = [&](GgmlType t, const std::vector<float>& x) {
        const std::vector<float> y = dequantize(t, quantize(t, x));
        for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i]) << type_traits(t).name << " el " << i;
    };
    // Q8_0: q in [-127, 127] with a +-127 in every block.
    std::vector<float> x(32 * nb);
    for (int b = 0; b < nb; ++b) {
        const float d = std::fabs(f16_to_f32(r.f16_scale()));
        for (int i = 0; i < 32; ++i) x[32 * b + i] = float(int(r.u32() % 255) - 127) * d;
        x[32 * b + r.u32() % 32] = (r.u32() & 1 ? 127.f : -127.f) * d;
    }
    check(GgmlType::Q8_0, x);
    // Q4_0/Q5_0: offset grids; the extreme on the negative end (ggml's rule
    // finds it) or only on the positive end (the scale search finds it).
    for (int half : {8, 16}) {
        const GgmlType t = half == 8 ? GgmlType::Q4_0 : GgmlType::Q5_0;
        for (int positive_end : {0, 1}) {
            for (int b = 0; b < nb; ++b) {
                const float d = f16_to_f32(r.f16_scale());
                for (int i = 0; i < 32; ++i) {
                    int q = int(r.u32() % uint32_t(2 * half)) - half;
                    if (positive_end && q == -half) q = 0;
                    x[32 * b + i] = float(q) * d;
                }
                x[32 * b + r.u32() % 32] = float(positive_end ? half - 1 : -half) * d;
            }
            check(t, x);
        }
    }
    // Q4_1/Q5_1 with dyadic d and m (so max - min and the division are exact).
    for (int qmax : {15, 31}) {
        for (int b = 0; b < nb; ++b) {
            const float d = std::ldexp(1.f, int(r.u32() % 8) - 6), m = std::ldexp(-float(r.u32() % 64), -3);
            for (int i = 0; i < 32; ++i) x[32 * b + i] = float(int(r.u32() % uint32_t(qmax + 1))) * d + m;
            x[32 * b + 3] = m;
            x[32 * b + 17] = float(qmax) * d + m;
        }
        check(qmax == 15 ? GgmlType::Q4_1 : GgmlType::Q5_1, x);
    }
    // Q8_K: power-of-two d, one -128 per block.
    std::vector<float> xk(256 * 8);
    for (int b = 0; b < 8; ++b) {
        const float d = std::ldexp(1.f, int(r.u32() % 16) - 10);
        for (int i = 0; i < 256; ++i) xk[256 * b + i] = float(int(r.u32() % 256) - 128) * d;
        xk[256 * b + 5] = -128.f * d;
    }
    check(GgmlType::Q8_K, xk);
    // IQ4_NL: table values times an f16 d, with a -127 (the table's far end,
    // which the scale search maps the extreme onto first) in every block.
    for (int b = 0; b < nb; ++b) {
        const float d = f16_to_f32(r.f16_scale());
        for (int i = 0; i < 32; ++i) x[32 * b + i] = d * float(kIQ4Values[r.u32() % 16]);
        x[32 * b + r.u32() % 32] = d * -127.f;
    }
    check(GgmlType::IQ4_NL, x);
    // F16/BF16: every finite value of the format.
    std::vector<float> h, bf;
    for (uint32_t v = 0; v < 65536; ++v) {
        if ((v & 0x7c00) != 0x7c00) h.push_back(f16_to_f32(uint16_t(v)));
        if ((v & 0x7f80) != 0x7f80) bf.push_back(bf16_to_f32(uint16_t(v)));
    }
    check(GgmlType::F16, h);
    check(GgmlType::BF16, bf);
}

// k-quants and IQ4_XS have no exact grid to hit (sub-block scales are fit,
// then rounded to 4/6/8 bits); their output re-quantized must stay close to
// itself.
TEST(Quantize, KQuantsAreNearlyIdempotent) {
    const std::vector<float> x = gaussian(5, 256 * 256);
    for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                       GgmlType::IQ4_XS}) {
        const std::vector<float> y1 = dequantize(t, quantize(t, x));
        const std::vector<float> y2 = dequantize(t, quantize(t, y1));
        const double first = rel_rms(x, y1), again = rel_rms(y1, y2);
        std::printf("  %-5s first pass %.5f, re-quantized %.6f\n", type_traits(t).name, first, again);
        EXPECT_LT(again, 0.1 * first) << type_traits(t).name;
    }
}

TEST(Quantize, ZeroAndConstantRowsGiveNoNaN) {
    for (GgmlType t : kQuantizable) {
        const char* name = type_traits(t).name;
        const std::vector<float> zeros(1024, 0.f);
        for (float v : dequantize(t, quantize(t, zeros))) ASSERT_EQ(v, 0.f) << name;
        for (float c : {1.f, -1.f, 0.37f, -2.5f, 1e-3f, -1e-3f, 300.f}) {
            const std::vector<float> x(1024, c);
            for (float v : dequantize(t, quantize(t, x))) {
                ASSERT_TRUE(std::isfinite(v)) << name << " c=" << c;
                ASSERT_LE(std::fabs(v - c), 4e-3f * std::fabs(c)) << name << " c=" << c;
            }
        }
        // Zero sub-blocks next to large and tiny values.
        std::vector<float> mixed = gaussian(9, 1024);
        for (int i = 0; i < 64; ++i) mixed[i] = 0.f;
        mixed[100] = 1000.f;
        for (int i = 512; i < 768; ++i) mixed[i] *= 1e-6f;
        for (float v : dequantize(t, quantize(t, mixed))) ASSERT_TRUE(std::isfinite(v)) << name;
    }
}

// Every output byte is written (nothing depends on the buffer's old contents),
// and the same input gives the same bytes.
TEST(Quantize, DeterministicAndFullyWritten) {
    const std::vector<float> x = gaussian(13, 4096);
    for (GgmlType type : kQuantizable) {
        const TypeTraits& t = type_traits(type);
        const size_t bytes = *row_bytes(t, x.size());
        std::vector<uint8_t> a(bytes, 0xAA), b(bytes, 0x55);
        t.quantize_row(x.data(), a.data(), int64_t(x.size()));
        t.quantize_row(x.data(), b.data(), int64_t(x.size()));
        EXPECT_EQ(a, b) << t.name;
    }
}

TEST(Quantize, Q8KBlockSums) {
    const std::vector<float> x = gaussian(17, 1024);
    const std::vector<uint8_t> raw = quantize(GgmlType::Q8_K, x);
    for (int b = 0; b < 4; ++b) {
        BlockQ8_K blk;
        std::memcpy(&blk, raw.data() + b * sizeof blk, sizeof blk);
        for (int j = 0; j < 16; ++j) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += blk.qs[16 * j + i];
            EXPECT_EQ(blk.bsums[j], sum);
        }
    }
}

}  // namespace
