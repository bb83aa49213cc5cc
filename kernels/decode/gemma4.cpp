#include "kernels/decode/gemma4.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/decode/elementwise.h"
#include "kernels/decode/gemv.h"
#include "kernels/decode/layout.h"
#include "kernels/decode/util.h"
#include "kernels/examples/common.h"

namespace ptxlm::kernels {

using namespace ptx;

namespace {

constexpr uint32_t kThreads = 256;
constexpr uint32_t kPleInputItems = 8;   // ple_input's elements a thread holds at most

std::string with_rows(std::string name, uint32_t rows) {
  if (rows > 1) name.append("_t").append(std::to_string(rows));
  return name;
}

// The f32 at `base` + 4·i.
Reg f32_at(Kernel& k, const Reg& base, const Reg& i) { return k.add(base, k.mul_wide(i, 4u)); }

}  // namespace

static LaunchGeometry ple_input_geometry(const PleInputShape& s, const InlineTarget* in) {
  if (s.per_layer == 0 || s.per_layer % 4 || s.per_layer > kPleInputItems * kThreads)
    throw Error("ple_input: per_layer must be a positive multiple of 4, at most " +
                std::to_string(kPleInputItems * kThreads));
  if (s.layers == 0 || s.layers > 65535) throw Error("ple_input: layers must be 1..65535");
  check_batch("ple_input", s.tokens, in);
  row_layout(s.tok_type, s.per_layer * s.layers);   // checks the table's type and width
  return LaunchGeometry{{s.layers, s.tokens, 1}, {kThreads, 1, 1}, 0};
}

LaunchGeometry ple_input_geometry(const PleInputShape& s) { return ple_input_geometry(s, nullptr); }

GeneratedKernel ple_input_kernel(const PleInputShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry g = ple_input_geometry(s, in);
  const uint32_t P = s.per_layer, PL = s.per_layer * s.layers;
  ParamList params;
  params.add_ptr("proj").add_ptr("tok").add_ptr("token").add_ptr("w").add_ptr("out");
  std::string type = gguf::type_traits(s.tok_type).name;
  for (char& c : type) c = char(std::tolower(static_cast<unsigned char>(c)));
  const std::string name =
      with_rows("ple_input_" + std::to_string(P) + "x" + std::to_string(s.layers) + "_" + type, s.tokens);
  Emit emit(in, name.c_str(), t, params, g);
  Kernel& k = emit.k();
  Symbol red = k.shared_array("red", Type::f32, kThreads / 32);
  const RowLayout tl = row_layout(s.tok_type, PL);
  // Block (l, t): the slice at t·P·L + l·P of each row, the table's row token[t].
  Reg layer = k.special(Sreg::ctaid_x);
  Reg slice = k.mul_wide(layer, P * 4), token = k.param("token");
  if (s.tokens > 1) {
    Reg row = k.special(Sreg::ctaid_y);
    slice = k.add(slice, k.mul_wide(row, PL * 4));
    token = k.add(token, k.mul_wide(row, 4u));
  }
  Reg proj = k.add(k.param("proj"), slice), out = k.add(k.param("out"), slice);
  Reg tok_row = k.add(k.param("tok"), k.mul_wide(k.ld_global(Type::u32, at(token)), tl.row_bytes));
  Reg first = k.mul(layer, P);   // the slice's first element of the table's row
  Reg w = k.param("w");
  Reg tid = k.special(Sreg::tid_x);
  // Thread t takes elements t, t + 256, ...: every one's proj, w and table
  // element loaded before the reduction's barrier (for a float table two
  // round trips a warp: the token id, then its row beside proj and w; a
  // quantized element's decode adds its own, as embed_kernel's; a loop
  // that loaded proj, then reloaded it beside w and the row took four), and
  // after it only the stores: out may be proj.
  const uint32_t items = (P + kThreads - 1) / kThreads;
  MemOpt nc;
  nc.nc = true;
  std::vector<Reg> idx, live, y, wv, tv;
  for (uint32_t j = 0; j < items; ++j) {
    idx.push_back(j == 0 ? tid : k.add(tid, j * kThreads));
    live.push_back(k.setp(Cmp::lo, idx[j], P));
    y.push_back(k.mov(Type::f32, 0.0f));
    wv.push_back(k.mov(Type::f32, 0.0f));
    tv.push_back(k.mov(Type::f32, 0.0f));
    k.when(live[j], [&] {
      k.ld(Space::global, y[j], at(f32_at(k, proj, idx[j])));
      k.ld(Space::global, wv[j], at(f32_at(k, w, idx[j])), nc);
    });
  }
  // The table's elements after every proj and w load, all issued before
  // any is read and kept unscaled until the reduction: a float table's
  // loads then wait with the rest (a quantized element's decode waits on
  // its own loads, as embed_kernel's does).
  std::vector<Reg> raw(items);
  for (uint32_t j = 0; j < items; ++j)
    k.when(live[j], [&] { raw[j] = dequant_element(k, tl, tok_row, k.add(first, idx[j])); });
  for (uint32_t j = 0; j < items; ++j) k.when(live[j], [&] { k.mov(tv[j], raw[j]); });
  Reg ss = k.mov(Type::f32, 0.0f);
  for (uint32_t j = 0; j < items; ++j) {
    k.mul(y[j], y[j], s.proj_scale);   // 0 where not live
    k.fma(ss, y[j], y[j], ss);
  }
  Reg total = block_allreduce(k, ss, ReduceOp::sum_f32, red, kThreads);
  Reg root = k.sqrt(k.add(k.div(total, float(P)), s.eps));
  Reg scale = k.reg(Type::f32);
  k.div(scale, 1.0f, root);
  for (uint32_t j = 0; j < items; ++j) {
    Reg normed = k.mul(k.mul(y[j], scale), wv[j]);
    Reg sum = k.add(normed, s.tok_scale != 1.0f ? k.mul(tv[j], s.tok_scale) : tv[j]);   // embed_kernel's product
    k.when(live[j], [&] { k.st_global(at(f32_at(k, out, idx[j])), k.mul(sum, s.sum_scale)); });
  }
  return emit.done(true);
}

static LaunchGeometry softcap_geometry(const SoftcapShape& s, const InlineTarget* in) {
  if (s.n == 0) throw Error("softcap: n must be positive");
  if (!(s.cap > 0)) throw Error("softcap: the cap must be positive");
  check_batch("softcap", s.rows, in);
  return LaunchGeometry{{ceil_div(s.n, kThreads), s.rows, 1}, {kThreads, 1, 1}, 0};
}

LaunchGeometry softcap_geometry(const SoftcapShape& s) { return softcap_geometry(s, nullptr); }

GeneratedKernel softcap_kernel(const SoftcapShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry g = softcap_geometry(s, in);
  ParamList params;
  params.add_ptr("x");
  // The cap to 9 significant digits (every f32 its own), '.' as 'p'.
  char cap[32];
  std::snprintf(cap, sizeof cap, "%.9g", double(s.cap));
  std::string c = cap;
  std::replace(c.begin(), c.end(), '.', 'p');
  const std::string name = with_rows("softcap_" + std::to_string(s.n) + "_cap" + c, s.rows);
  Emit emit(in, name.c_str(), t, params, g);
  Kernel& k = emit.k();
  Reg e = k.global_index_x();
  Reg x = k.param("x");
  if (s.rows > 1) x = k.add(x, k.mul_wide(k.special(Sreg::ctaid_y), s.n * 4));
  k.if_(k.setp(Cmp::lt, e, s.n), [&] {
    constexpr double kLog2e = 1.4426950408889634;
    Reg a = f32_at(k, x, e);
    Reg y = k.div(k.ld_global(Type::f32, at(a)), s.cap);
    Reg e2 = k.ex2_approx(k.mul(y, 2.0 * kLog2e));
    Reg q = k.reg(Type::f32), th = k.reg(Type::f32);
    k.div(q, 2.0f, k.add(e2, 1.0f));
    k.sub(th, 1.0f, q);
    k.st_global(at(a), k.mul(th, s.cap));
  });
  return emit.done(true);
}

}  // namespace ptxlm::kernels
