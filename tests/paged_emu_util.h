// Helpers the paged attention and paged RoPE tests on emu share: sentinel
// values, one launch on emu's interpreter with its stats, and that launch's
// cost in engine/projection's terms.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emu/interp.h"
#include "emu/stats.h"
#include "engine/projection.h"
#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::paged_test {

constexpr uint16_t kNaN16 = 0x7e00;
constexpr uint32_t kUnused = 0xffffffffu;   // a token slot no row uses

// One launch on emu's interpreter with stats; `bufs` are the arguments'
// contents (pointers, in the kernel's parameter order), their allocations
// returned so a caller can read per-allocation sectors.
struct Counted {
  emu::Stats stats;
  std::vector<uint64_t> addrs;
};

inline Counted count(const ptx::GeneratedKernel& g, const std::vector<std::vector<uint8_t>>& bufs) {
  std::string log;
  std::shared_ptr<const emu::Program> prog = emu::load_program(g.ptx, &log);
  Counted c;
  EXPECT_TRUE(prog) << log;
  if (!prog) return c;
  emu::Memory mem;
  std::vector<ptx::ParamValue> args;
  for (const std::vector<uint8_t>& b : bufs) {
    const uint64_t a = mem.alloc(std::max<size_t>(b.size(), 4));
    std::memcpy(mem.translate(a, b.size()), b.data(), b.size());
    c.addrs.push_back(a);
    args.push_back(ptx::DevPtr{a});
  }
  ptx::ParamPack pack = g.params.pack(args);
  emu::LaunchConfig cfg;
  cfg.grid = {g.geometry.grid.x, g.geometry.grid.y, g.geometry.grid.z};
  cfg.block = {g.geometry.block.x, 1, 1};
  cfg.dynamic_shared_bytes = g.geometry.shared_bytes;
  cfg.shared_limit = 227 * 1024;   // an sm_90 block's opt-in most
  cfg.params = reinterpret_cast<const uint8_t*>(pack.data());
  cfg.params_size = uint32_t(pack.size());
  std::optional<emu::Fault> f = emu::run_kernel(*prog, g.name, cfg, mem, &c.stats);
  EXPECT_FALSE(f.has_value()) << (f ? f->message : "");
  return c;
}

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// What one kernel's launch cost in the terms of engine/projection.h (as
// ptxlm's counted mode builds them, tools/ptxlm/counted.cpp), its blocks and
// waits those of the blocks that ran past their first load (`exited` blocks
// of `warps` warps made one wait each: the load of the position, then ret).
struct Summary {
  double kv_requested = 0;   // bytes of K/V sectors the loads touched
  double waits_per_warp = 0, inflight_avg = 0, inflight_max = 0, chain = 0;
  LaunchTerms terms;
  double us = 0;
};

inline Summary summarize(const emu::Stats& st, uint64_t kv_sectors, uint64_t blocks, uint64_t exited, uint32_t threads,
                  int fit) {
  const GpuSpec gpu = *find_gpu("h100-sxm");
  const uint32_t warps = threads / 32;
  const uint64_t live = blocks - exited;
  const double waits = double(st.inflight_batches) - double(exited * warps);
  LaunchCost l = counted_launch_cost(nlohmann::json::parse(st.to_json()), live, threads, fit);
  l.load_waits = waits;
  Summary s;
  s.kv_requested = 32.0 * double(kv_sectors);
  s.waits_per_warp = waits / double(live * warps);
  s.inflight_avg = st.inflight_bytes_avg();
  s.inflight_max = double(st.inflight_bytes_max);
  s.chain = double(st.dependent_load_chain_max);
  s.terms = launch_terms(l, gpu);
  s.us = s.terms.bound_us();
  return s;
}

}  // namespace ptxlm::paged_test
