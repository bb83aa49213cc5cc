// mma.sync.aligned.m16n8k32 with 8-bit inputs (issue 22's tensor-core
// GEMVs) on emu: a kernel from the PTX builder loads each lane's A, B and C
// fragments by the PTX ISA's lane map (written out again here, apart from
// emu's), runs one mma and stores D by the same map; D must be A·B + C as
// the CPU computes it, for every signedness of A and B and with sums that
// wrap. The map of the test is the ISA's, so a transposed or shifted map in
// emu fails it (negative control: the same kernel with the B fragment's
// registers swapped). The instruction is counted on the tensor class;
// ptxas assembles the kernel for sm_80 and sm_90; emu refuses a partial
// warp, a .target below sm_80 and .satfinite.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "emu_test_util.h"
#include "kernels/ptx/builder.h"
#include "kernels/ptx/ptxas.h"

using namespace ptxlm;
using namespace ptxlm::emu;
using namespace ptxlm::emu::testing_util;

namespace {

// Lane l, g = l / 4, t = l % 4. A (16 × 32, row-major bytes): register r
// holds row g + 8·(r & 1), columns 4t + 16·(r >> 1) .. + 3. B (32 × 8,
// stored column-major: column n's 32 bytes at 32n): register r holds column
// g, rows 4t + 16r .. + 3. C and D (16 × 8 s32, row-major): register r is
// row g + 8·(r >> 1), column 2t + (r & 1).
std::string mma_kernel(bool a_signed, bool b_signed, bool swap_b = false, unsigned sm = 80) {
  ptx::Target t;
  t.sm = sm;
  ptx::Kernel k("mma_tile", t);
  ptx::ParamList p;
  p.add_ptr("a").add_ptr("b").add_ptr("c").add_ptr("d");
  k.set_params(p);
  k.set_maxntid({32});
  ptx::Reg lane = k.special(ptx::Sreg::tid_x);
  ptx::Reg g = k.shr(lane, 2u), tq = k.and_(lane, 3u);
  const ptx::Type at = a_signed ? ptx::Type::s32 : ptx::Type::u32, bt = b_signed ? ptx::Type::s32 : ptx::Type::u32;
  auto word = [&](const char* param, const ptx::Reg& byte_offset, ptx::Type type) {
    ptx::Reg v = k.reg(type);
    k.ld(ptx::Space::global, v, ptx::at(k.add(k.param(param), k.cvt(ptx::Type::u64, byte_offset))));
    return v;
  };
  std::array<ptx::Reg, 4> a, c, d;
  std::array<ptx::Reg, 2> b;
  for (uint32_t r = 0; r < 4; ++r) {
    ptx::Reg row = k.add(g, 8 * (r & 1)), col = k.add(k.shl(tq, 2u), 16 * (r >> 1));
    a[r] = word("a", k.mad_lo(row, 32u, col), at);
  }
  for (uint32_t r = 0; r < 2; ++r) b[r] = word("b", k.mad_lo(g, 32u, k.add(k.shl(tq, 2u), 16 * r)), bt);
  if (swap_b) std::swap(b[0], b[1]);
  for (uint32_t r = 0; r < 4; ++r) {
    ptx::Reg row = k.add(g, 8 * (r >> 1)), col = k.add(k.shl(tq, 1u), r & 1);
    c[r] = word("c", k.shl(k.mad_lo(row, 8u, col), 2u), ptx::Type::s32);
    d[r] = k.reg(ptx::Type::s32);
  }
  k.mma_m16n8k32(d, a, b, c);
  for (uint32_t r = 0; r < 4; ++r) {
    ptx::Reg row = k.add(g, 8 * (r >> 1)), col = k.add(k.shl(tq, 1u), r & 1);
    k.st_global(ptx::at(k.add(k.param("d"), k.cvt(ptx::Type::u64, k.shl(k.mad_lo(row, 8u, col), 2u)))), d[r]);
  }
  return k.emit();
}

struct Tile {
  std::vector<uint8_t> a = std::vector<uint8_t>(16 * 32), b = std::vector<uint8_t>(8 * 32);
  std::vector<int32_t> c = std::vector<int32_t>(16 * 8);
};

Tile random_tile(uint32_t seed, bool big_c) {
  std::mt19937 rng(seed);
  Tile t;
  for (uint8_t& v : t.a) v = uint8_t(rng());
  for (uint8_t& v : t.b) v = uint8_t(rng());
  for (int32_t& v : t.c) v = big_c ? int32_t(0x7fff0000u + (rng() & 0xffff)) : int32_t(rng() % 20001) - 10000;
  return t;
}

// D = A·B + C, wrapping at 32 bits.
std::vector<int32_t> reference(const Tile& t, bool a_signed, bool b_signed) {
  std::vector<int32_t> d(16 * 8);
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n) {
      uint32_t acc = uint32_t(t.c[i * 8 + n]);
      for (int kk = 0; kk < 32; ++kk) {
        const int32_t x = a_signed ? int8_t(t.a[i * 32 + kk]) : t.a[i * 32 + kk];
        const int32_t y = b_signed ? int8_t(t.b[n * 32 + kk]) : t.b[n * 32 + kk];
        acc += uint32_t(x * y);
      }
      d[i * 8 + n] = int32_t(acc);
    }
  return d;
}

std::vector<int32_t> run(const std::string& ptx, const Tile& t, Stats* st = nullptr, uint32_t threads = 32,
                         std::string* fault = nullptr) {
  Emu e(ptx);
  EXPECT_TRUE(e.prog) << e.log;
  if (!e.prog) return {};
  const uint64_t a = e.alloc(t.a.size()), b = e.alloc(t.b.size()), c = e.alloc(t.c.size() * 4), d = e.alloc(16 * 8 * 4);
  e.put(a, t.a);
  e.put(b, t.b);
  e.put(c, t.c);
  auto f = e.run("mma_tile", {1, 1, 1}, {threads, 1, 1}, Params().add(a).add(b).add(c).add(d), st);
  if (fault) *fault = f ? f->message : "";
  if (f) return {};
  return e.get<int32_t>(d, 16 * 8);
}

TEST(EmuMma, M16N8K32IsTheCpusProductForEverySignedness) {
  int cases = 0;
  for (const bool as : {true, false})
    for (const bool bs : {true, false})
      for (const bool big_c : {false, true}) {
        const Tile t = random_tile(7 + cases, big_c);
        const std::vector<int32_t> want = reference(t, as, bs), got = run(mma_kernel(as, bs), t);
        EXPECT_EQ(got, want) << "A " << (as ? "s8" : "u8") << ", B " << (bs ? "s8" : "u8") << (big_c ? ", C near 2^31" : "");
        ++cases;
      }
  // The sums near 2^31 wrap (the reference's too): at least one changes sign.
  const Tile t = random_tile(99, true);
  const std::vector<int32_t> d = reference(t, false, false);
  EXPECT_TRUE(std::any_of(d.begin(), d.end(), [](int32_t v) { return v < 0; }));
}

TEST(EmuMma, SwappedBRegistersFail) {
  const Tile t = random_tile(3, false);
  const std::vector<int32_t> want = reference(t, true, true), got = run(mma_kernel(true, true, true), t);
  ASSERT_EQ(got.size(), want.size());
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
  EXPECT_GT(differ, 100u) << "B's rows 0..15 and 16..31 exchanged left D the product";
}

TEST(EmuMma, CountedOnTheTensorPipe) {
  Stats st;
  const Tile t = random_tile(5, false);
  ASSERT_EQ(run(mma_kernel(true, true), t, &st), reference(t, true, true));
  EXPECT_EQ(st.by_class[size_t(InstClass::Tensor)], 1u);
  EXPECT_NE(st.to_json().find("\"tensor\":1"), std::string::npos) << st.to_json();
}

TEST(EmuMma, RefusesAPartialWarpAnOldTargetAndSatfinite) {
  const Tile t = random_tile(5, false);
  std::string fault;
  EXPECT_TRUE(run(mma_kernel(true, true), t, nullptr, 16, &fault).empty());
  EXPECT_NE(fault.find("not by the whole warp"), std::string::npos) << fault;

  std::string ptx = mma_kernel(true, true);
  std::string old = ptx;
  old.replace(old.find(".target sm_80"), 13, ".target sm_75");
  Emu e75(old);
  EXPECT_FALSE(e75.prog);
  EXPECT_NE(e75.log.find("requires .target sm_80"), std::string::npos) << e75.log;
  std::string sat = ptx;
  sat.replace(sat.find(".s32.s8.s8.s32"), 14, ".satfinite.s32.s8.s8.s32");
  Emu es(sat);
  EXPECT_FALSE(es.prog);
  EXPECT_NE(es.log.find("satfinite"), std::string::npos) << es.log;
  // The builder refuses it below sm_80.
  EXPECT_THROW(mma_kernel(true, true, false, 75), ptx::Error);
}

TEST(EmuMma, PtxasAssemblesTheKernel) {
  const std::string ptxas = PTXLM_PTXAS;
  ASSERT_FALSE(ptxas.empty()) << "no ptxas found at configure time (the CUDA toolkit's ptxas is a dependency)";
  for (const char* arch : {"sm_80", "sm_90"}) {
    const ptx::PtxasResult r = ptx::run_ptxas(ptxas, mma_kernel(true, false), arch);
    EXPECT_TRUE(r.ok()) << arch << ": " << r.log;
  }
}

}  // namespace
