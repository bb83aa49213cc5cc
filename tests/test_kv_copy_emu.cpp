// Copy-on-write of KV pages on the device (kernels/decode/kv_copy.h) on emu:
// two layers of different shapes (gemma4's kind: 2 KV heads of 64 and 1 of
// 256), each with a K and a V pool, three copies in one launch (a partial
// page, a whole page, a skipped entry). Every copied row equals its source
// and no other byte of any pool changes; the same check against one row
// fewer (a copy that stopped short) fails, as does one against the wrong
// source page.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/decode/kv_copy.h"
#include "tests/emu_cuda_fixture.h"

namespace ptxlm {
namespace {

namespace kx = ptxlm::kernels;
using ptx::DevPtr;

struct Layer {
  uint32_t heads, head_dim;
};
struct Copy {
  uint32_t from, to, positions;
};

class KvCopyOnEmu : public testing_util::EmuCudaTest {
protected:
  static constexpr uint32_t kPageSize = 16, kPages = 6;

  // Pools (K and V of each layer) of random f16 bits, the copies run on
  // them, and the pools as the device left them.
  struct Run {
    std::vector<std::vector<uint16_t>> before, after;
  };
  Run run(const std::vector<Layer>& layers, const std::vector<Copy>& copies) {
    std::mt19937 rng(11);
    Run r;
    std::vector<cuda::DeviceBuffer> bufs;
    std::vector<uint8_t> desc;
    for (const Layer& l : layers)
      for (int kv = 0; kv < 2; ++kv) {
        std::vector<uint16_t> pool(size_t(kPages) * l.heads * kPageSize * l.head_dim);
        for (uint16_t& x : pool) x = uint16_t(rng());
        r.before.push_back(pool);
        bufs.push_back(upload(pool));
        const uint64_t base = bufs.back().ptr();
        const uint32_t heads = l.heads, row_bytes = l.head_dim * 2;
        const size_t at = desc.size();
        desc.resize(at + 16);
        std::memcpy(desc.data() + at, &base, 8);
        std::memcpy(desc.data() + at + 8, &heads, 4);
        std::memcpy(desc.data() + at + 12, &row_bytes, 4);
      }
    std::vector<uint32_t> list;
    for (const Copy& c : copies) list.insert(list.end(), {c.from, c.to, c.positions, 0u});
    const kx::KvCopyShape s{uint32_t(bufs.size()), kPageSize, uint32_t(copies.size())};
    auto ddesc = upload(desc), dlist = upload(list);
    launch(kx::kv_copy_kernel(s), {DevPtr{ddesc.ptr()}, DevPtr{dlist.ptr()}});
    for (size_t p = 0; p < bufs.size(); ++p) r.after.push_back(download<uint16_t>(bufs[p], r.before[p].size()));
    return r;
  }

  // Elements that differ from what the copies (as `expect` describes them)
  // should have left: each pool's before, with rows [0, positions) of every
  // KV head of page `to` taken from page `from`.
  static size_t mismatches(const std::vector<Layer>& layers, const std::vector<Copy>& expect, const Run& r) {
    size_t bad = 0;
    for (size_t p = 0; p < r.before.size(); ++p) {
      const Layer& l = layers[p / 2];
      const size_t row = l.head_dim, head = size_t(kPageSize) * row, page = l.heads * head;
      std::vector<uint16_t> want = r.before[p];
      for (const Copy& c : expect)
        for (uint32_t g = 0; g < l.heads; ++g)
          for (size_t i = 0; i < size_t(c.positions) * row; ++i)
            want[c.to * page + g * head + i] = r.before[p][c.from * page + g * head + i];
      for (size_t i = 0; i < want.size(); ++i) bad += want[i] != r.after[p][i];
    }
    return bad;
  }
};

TEST_F(KvCopyOnEmu, CopiesTheRowsOfEveryPoolAndNothingElse) {
  const std::vector<Layer> layers = {{2, 64}, {1, 256}};
  const std::vector<Copy> copies = {{1, 4, 5}, {2, 0, kPageSize}, {3, 5, 0}};
  const Run r = run(layers, copies);
  EXPECT_EQ(mismatches(layers, copies, r), 0u);
  // Controls: the first copy one row short, then from the wrong page.
  std::vector<Copy> shorter = copies;
  shorter[0].positions -= 1;
  const size_t short_bad = mismatches(layers, shorter, r);
  std::vector<Copy> wrong = copies;
  wrong[1].from = 3;
  const size_t wrong_bad = mismatches(layers, wrong, r);
  std::printf("[kv copy] 4 pools, 3 copies: 0 mismatches; controls: one row short %zu, the wrong source page %zu\n",
              short_bad, wrong_bad);
  EXPECT_GT(short_bad, 0u);
  EXPECT_GT(wrong_bad, 0u);
}

// More pieces than one step of the block takes (a Llama-3-8B-sized page:
// 8 KV heads of 128, 16 rows: 1024 pieces, two steps of 512).
TEST_F(KvCopyOnEmu, AWholeLargePage) {
  const std::vector<Layer> layers = {{8, 128}};
  const std::vector<Copy> copies = {{0, 3, kPageSize}, {5, 1, 9}};
  const Run r = run(layers, copies);
  EXPECT_EQ(mismatches(layers, copies, r), 0u);
}

TEST(KvCopy, RefusesBadShapes) {
  EXPECT_THROW(kx::kv_copy_geometry({0, 16, 1}), ptx::Error);
  EXPECT_THROW(kx::kv_copy_geometry({2, 16, 0}), ptx::Error);
  EXPECT_THROW(kx::kv_copy_geometry({2, 12, 1}), ptx::Error);
}

}  // namespace
}  // namespace ptxlm
