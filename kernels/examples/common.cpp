#include "kernels/examples/common.h"

#include <algorithm>

#include "kernels/examples/examples.h"

namespace ptxlm::kernels {

using namespace ptx;

uint32_t row_block(uint32_t n) { return std::clamp<uint32_t>((n + 31) / 32 * 32, 32, 256); }

Kernel start_kernel(const char* name, const Target& t, const ParamList& params, const LaunchGeometry& g) {
  Kernel k(name, t);
  k.set_params(params);
  k.set_maxntid(g.block);
  return k;
}

namespace {

Reg combine(Kernel& k, const Reg& a, const Reg& b, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum_f32: return k.add(a, b);
    case ReduceOp::max_f32:
    case ReduceOp::max_u64: return k.max(a, b);
  }
  throw Error("combine: bad op");
}

}  // namespace

Reg warp_allreduce(Kernel& k, const Reg& v, ReduceOp op) {
  Reg acc = v;
  for (uint32_t m = 16; m >= 1; m /= 2) {
    Reg other;
    if (op == ReduceOp::max_u64) {
      // shfl moves 32 bits: exchange both halves.
      Reg lo = k.reg(Type::u32), hi = k.reg(Type::u32);
      k.unpack(lo, hi, acc);
      Reg olo = k.shfl_bfly(lo, m), ohi = k.shfl_bfly(hi, m);
      other = k.reg(Type::u64);
      k.pack(other, olo, ohi);
    } else {
      other = k.shfl_bfly(acc, m);
    }
    acc = combine(k, acc, other, op);
  }
  return acc;
}

Reg block_allreduce(Kernel& k, const Reg& v, ReduceOp op, const Symbol& scratch, uint32_t threads) {
  if (threads % 32 || threads == 0 || threads > 1024) throw Error("block_allreduce: bad thread count");
  Reg w = warp_allreduce(k, v, op);
  const uint32_t warps = threads / 32;
  if (warps == 1) return w;
  const uint32_t bytes = type_bytes(v.type);
  Reg tid = k.special(Sreg::tid_x);
  Reg lane = k.and_(tid, 31u);
  Reg warp = k.shr(tid, 5u);
  Reg base = k.shared_addr(scratch);
  Reg slot = k.mad_lo(warp, bytes, base);
  k.when(k.setp(Cmp::eq, lane, 0u), [&] { k.st_shared(at(slot), w); });
  k.bar_sync(0);  // the warp partials are visible to every thread
  Reg acc = k.ld_shared(v.type, at(scratch));
  for (uint32_t i = 1; i < warps; ++i) acc = combine(k, acc, k.ld_shared(v.type, at(scratch, int64_t(i) * bytes)), op);
  k.bar_sync(0);  // nobody rewrites scratch before everyone has read it
  return acc;
}

GeneratedKernel finish(const Kernel& k, const ParamList& params, const LaunchGeometry& g, bool hot) {
  validate_geometry(k.name(), g);
  return GeneratedKernel{k.name(), k.emit(), params, g, hot};
}

Emit::Emit(const InlineTarget* in, const char* name, const Target& t, const ParamList& params, const LaunchGeometry& g,
           const std::function<void(Kernel&)>& first)
    : name_(name), params_(params), g_(g) {
  validate_geometry(name, g);
  if (!in) {
    own_.emplace(start_kernel(name, t, params, g));
    if (first) first(*own_);
    if (t.pdl) {   // launched programmatically: the grid before may still be running
      own_->griddepcontrol_wait();
      own_->griddepcontrol_launch_dependents();
    }
    return;
  }
  InlineOp op = in->op;
  op.params = &params_;
  op.grid = g.grid;
  op.block = g.block;
  op.dynamic_bytes = g.shared_bytes;
  if (in->prefetch_only) {
    if (first) {
      in->host->comment(std::string("prefetch of inline op ") + name);
      in->host->begin_inline(op);
      first(*in->host);
      in->host->end_inline();
    }
    own_.emplace(start_kernel(name, t, params, g));
    scratch_ = true;
    return;
  }
  host_ = in->host;
  host_->comment(std::string("inline op ") + name);
  host_->begin_inline(op);
  if (first) first(*host_);
}

GeneratedKernel Emit::done(bool hot) {
  if (scratch_) return GeneratedKernel{name_, "", params_, LaunchGeometry{g_.grid, g_.block, 0}, hot};
  if (own_) return finish(*own_, params_, g_, hot);
  LaunchGeometry g = g_;
  g.shared_bytes = host_->end_inline();
  return GeneratedKernel{name_, "", params_, g, hot};
}

std::vector<GeneratedKernel> example_kernels(Target t) {
  std::vector<GeneratedKernel> out;
  out.push_back(rmsnorm_kernel({1, 576, 1e-5f}, t));   // SmolLM2 n_embd
  out.push_back(rmsnorm_kernel({4, 256, 1e-6f}, t));   // gemma3 per-head q/k norm
  out.push_back(softmax_kernel({9, 1024}, t));         // attention scores
  out.push_back(argmax_kernel({262144}, t));           // gemma3 vocab
  out.push_back(argmax_kernel({49152, 128, 4}, t));    // SmolLM2 vocab
  for (Activation a : {Activation::relu, Activation::gelu_tanh, Activation::silu})
    out.push_back(act_backward_kernel({2048, a}, t));
  out.push_back(sumsq_partials_kernel({1 << 20}, t));
  out.push_back(clip_scale_kernel({512, 1.0f}, t));
  out.push_back(clip_apply_kernel({1 << 20}, t));
  out.push_back(read_stream_kernel({1ull << 26, 132 * 4}, t));   // 1 GiB on an H100's 132 SMs
  return out;
}

}  // namespace ptxlm::kernels
