#include "kernels/decode/persistent.h"

#include <algorithm>

namespace ptxlm::kernels {

using namespace ptx;

namespace {

// Barrier ids: the ops' own code uses 0 (counting only the op's threads when
// the op is narrower than the block); the persistent loop uses 1 for the
// whole block, so threads that skip an op never meet the op's barrier.
constexpr unsigned kLoopBarrier = 1;

constexpr uint32_t kRecordBytes = sizeof(OpRecord);

}  // namespace

PersistentKernel persistent_kernel(const std::vector<OpGenerator>& kinds, Target t, PersistentState st) {
  if (kinds.empty()) throw Error("persistent_kernel: no op kinds");
  if (st.token % 4 || st.pos % 4 || st.token == st.pos) throw Error("persistent_kernel: a bad state layout");
  // Standalone first: each op's block size, so the kernel's is their maximum.
  std::vector<GeneratedKernel> alone;
  uint32_t threads = 32, arg_bytes = 8;
  for (const OpGenerator& g : kinds) {
    alone.push_back(g(t, nullptr));
    const Dim3& b = alone.back().geometry.block;
    if (b.y != 1 || b.z != 1 || b.x % 32)
      throw Error("persistent_kernel: op " + alone.back().name + " has a block that is not 1-D whole warps");
    if (alone.back().geometry.grid.z != 1) throw Error("persistent_kernel: op " + alone.back().name + " has a 3-D grid");
    threads = std::max(threads, b.x);
    arg_bytes = std::max(arg_bytes, alone.back().params.size_bytes());
  }

  ParamList params;
  params.add_ptr("ops").add_u32("n_ops").add_ptr("sync").add_ptr("ranges").add_ptr("state").add_ptr("best").add_ptr("io");
  params.add_u32("steps").add_ptr("stop_ids").add_u32("n_stop");
  Kernel k("persistent_decoder", t);
  k.set_params(params);
  k.set_maxntid({threads, 1, 1});
  // One resident block per SM is all the kernel needs (it loops over the
  // ops' virtual blocks); without this ptxas budgets registers for two and
  // spills.
  k.set_minnctapersm(1);
  Symbol win = k.dynamic_shared("win", 16);
  Symbol cell = k.shared_array("stop_cell", Type::u32, 1);
  // The current op's arguments, copied from its record once per op: the
  // ops' param() reads them from here (shared memory, not a global load per use).
  Symbol op_args = k.shared_array("op_args", Type::u64, arg_bytes / 8, 16);
  // The current op's record, loaded once per block (5 threads) instead of by
  // every thread; two slots by op parity, see below.
  Symbol op_rec = k.shared_array("op_rec", Type::u64, 2 * kRecordBytes / 8, 16);

  Reg ops = k.param("ops"), n_ops = k.param("n_ops"), sync = k.param("sync"), ranges = k.param("ranges");
  Reg state = k.param("state");
  Reg best = k.param("best"), io = k.param("io"), steps = k.param("steps"), stop_ids = k.param("stop_ids");
  Reg n_stop = k.param("n_stop");
  Reg tid = k.special(Sreg::tid_x), bid = k.special(Sreg::ctaid_x), nblocks = k.special(Sreg::nctaid_x);
  Reg is_t0 = k.setp(Cmp::eq, tid, 0u);
  Reg go_addr = k.add(sync, k.mul_wide(n_ops, 4u));   // done[n_ops], then go, stop, flags
  Reg flags = k.add(go_addr, 8u);

  // Thread 0 spins until op d has finished `epoch` tokens' worth of virtual
  // blocks: done[d] >= vblocks[d] * epoch (acquire: its writes are visible).
  auto wait_op = [&](const Reg& d, const Reg& epoch) {
    Reg drec = k.add(ops, k.mul_wide(d, kRecordBytes));
    Reg target = k.mul(k.ld_global(Type::u32, at(drec, 4)), epoch);
    Reg counter = k.add(sync, k.mul_wide(d, 4u));
    Label spin = k.label("wait_op");
    k.place(spin);
    Reg c = k.ld_acquire_gpu(Type::u32, at(counter));
    k.bra_if(k.setp(Cmp::lo, c, target), spin);
  };
  // Thread 0 spins until one virtual block's flag says it finished this
  // token (flags hold the epoch of the block's last completion).
  auto wait_flag = [&](const Reg& index, const Reg& epoch) {
    Reg addr = k.add(flags, k.mul_wide(index, 4u));
    Label spin = k.label("wait_flag");
    k.place(spin);
    Reg f = k.ld_acquire_gpu(Type::u32, at(addr));
    k.bra_if(k.setp(Cmp::lo, f, epoch), spin);
  };

  PersistentKernel out;
  uint32_t shared = 0;
  Label finished = k.label("finished");
  Reg step = k.reg(Type::u32);
  k.for_range(step, 0u, steps, 1u, [&] {
    Reg epoch = k.add(step, 1u);
    Reg i = k.reg(Type::u32);
    k.comment("the op table, in order");
    k.for_range(i, 0u, n_ops, 1u, [&] {
      Reg rec = k.add(ops, k.mul_wide(i, kRecordBytes));
      // Slot i % 2: a thread may reach this op while a slower warp of its
      // block still reads the previous op's slot (no barrier separates them
      // when the block had no virtual block of that op), but not the slot
      // before that, which the barrier below separates.
      Reg slot = k.mad_lo(k.and_(i, 1u), kRecordBytes, k.shared_addr(op_rec));
      k.if_(k.setp(Cmp::lo, tid, kRecordBytes / 8), [&] {
        k.st_shared(at(k.mad_lo(tid, 8u, slot)), k.ld_global(Type::u64, at(k.add(rec, k.mul_wide(tid, 8u)))));
      });
      k.bar_sync(kLoopBarrier);
      Reg kind = k.ld_shared(Type::u32, at(slot));
      Reg vblocks = k.ld_shared(Type::u32, at(slot, 4));
      Reg grid_x = k.ld_shared(Type::u32, at(slot, 8));
      Reg n_deps = k.ld_shared(Type::u32, at(slot, 12));
      Reg flag_base = k.ld_shared(Type::u32, at(slot, 48));
      Reg args = k.ld_shared(Type::u64, at(slot, 56));
      // Every thread is past the previous op (the barrier above), so its
      // arguments are no longer read; the copy is read only after the
      // virtual block's opening barrier.
      Reg w = k.reg(Type::u32);
      k.for_range(w, tid, arg_bytes / 8, threads, [&] {
        k.st_shared(at(k.mad_lo(w, 8u, k.shared_addr(op_args))), k.ld_global(Type::u64, at(k.add(args, k.mul_wide(w, 8u)))));
      });
      // With prefetches, the arguments are read before the opening barrier.
      if (t.prefetch) k.bar_sync(kLoopBarrier);
      Reg v = k.reg(Type::u32);
      k.for_range(v, bid, vblocks, nblocks, [&] {
        Reg cx = k.reg(Type::u32), cy = k.reg(Type::u32);
        k.rem(cx, v, grid_x);
        k.div(cy, v, grid_x);
        // The switch over the op's kind: kind j's code for virtual block
        // (cx, cy), its arguments from the shared copy, for the threads of
        // its block; whole, or only its opening prefetch (kinds without one
        // emit nothing). Every path ends at `end`.
        auto dispatch = [&](const Label& end, bool prefetch_only) {
          for (uint32_t j = 0; j < kinds.size(); ++j) {
            Label next = k.label(prefetch_only ? "next_prefetch" : "next_kind");
            k.bra_ifnot(k.setp(Cmp::eq, kind, j), next);
            const uint32_t op_threads = alone[j].geometry.block.x;
            if (op_threads < threads) k.bra_if(k.setp(Cmp::hs, tid, op_threads), end);
            InlineTarget in;
            in.host = &k;
            in.op.record = args.name;
            in.op.ctaid_x = cx.name;
            in.op.ctaid_y = cy.name;
            in.op.host_threads = threads;
            in.op.end = end.name;
            in.op.window = win.name;
            in.op.args_shared = op_args.name;
            in.prefetch_only = prefetch_only;
            GeneratedKernel g = kinds[j](t, &in);
            if (!prefetch_only) {
              shared = std::max(shared, g.geometry.shared_bytes);
              out.kinds.push_back(std::move(g));
            }
            k.bra(end);
            k.place(next);
          }
          k.place(end);
        };
        // The op's first weights into L2 while thread 0 waits for its inputs:
        // DRAM streams through the handoff instead of idling until the op's
        // first loads (and its input staging) are under way.
        if (t.prefetch) {
          k.comment("prefetch the virtual block's first weights, before its wait");
          dispatch(k.label("prefetched"), true);
        }
        k.comment("wait for the ops this one reads (their completion this token)");
        k.if_(is_t0, [&] {
          Reg j = k.reg(Type::u32);
          k.for_range(j, 0u, n_deps, 1u, [&] {
            Reg d = k.ld_shared(Type::u32, at(k.mad_lo(j, 4u, slot), 16));
            Reg r = k.ld_shared(Type::u32, at(k.mad_lo(j, 4u, slot), 32));
            k.if_else(k.setp(Cmp::eq, r, kAllBlocks), [&] { wait_op(d, epoch); }, [&] {
              // Only the producer's blocks this virtual block reads.
              Reg tri = k.add(ranges, k.mul_wide(k.mad_lo(v, 3u, r), 4u));
              Reg first = k.ld_global(Type::u32, at(tri)), count = k.ld_global(Type::u32, at(tri, 4));
              Reg stride = k.ld_global(Type::u32, at(tri, 8));
              Reg base = k.add(k.ld_global(Type::u32, at(k.add(ops, k.mul_wide(d, kRecordBytes)), 48)), first);
              Reg q = k.reg(Type::u32);
              k.for_range(q, 0u, count, 1u, [&] { wait_flag(k.mad_lo(q, stride, base), epoch); });
            });
          });
        });
        k.bar_sync(kLoopBarrier);   // the whole block starts after thread 0's acquire
        dispatch(k.label("end_op"), false);
        k.bar_sync(kLoopBarrier);   // every thread's writes of this virtual block precede the release
        Reg one = k.mov(Type::u32, 1u);
        Reg flag = k.add(flags, k.mul_wide(k.add(flag_base, v), 4u));
        k.when(is_t0, [&] {
          k.st_release_gpu(at(flag), epoch);   // for consumers that read only some of this op's blocks
          k.red(AtomOp::add, Space::global, at(k.add(sync, k.mul_wide(i, 4u))), one, Scope::gpu, Order::release);
        });
      });
    });

    k.comment("advance (block 0, thread 0): the token, the stop test, the next token's state");
    k.if_(k.setp(Cmp::eq, bid, 0u), [&] {
      k.if_(is_t0, [&] {
        wait_op(k.sub(n_ops, 1u), epoch);
        Reg key = k.ld_global(Type::u64, at(best));
        Reg lo = k.reg(Type::u32), hi = k.reg(Type::u32);
        k.unpack(lo, hi, key);
        Reg token = k.not_(lo);   // argmax_index: the key's low half is ~index
        k.st_global(at(k.add(io, k.mul_wide(step, 4u)), kPersistentIoHeader), token);
        MemOpt rel_sys;
        rel_sys.order = Order::release;
        rel_sys.scope = Scope::sys;
        k.st(Space::global, at(io), epoch, rel_sys);   // the host may read tokens[0..epoch)
        Reg stop = k.mov(Type::u32, 0u);
        Reg j = k.reg(Type::u32);
        k.for_range(j, 0u, n_stop, 1u, [&] {
          Reg id = k.ld_global(Type::u32, at(k.add(stop_ids, k.mul_wide(j, 4u))));
          k.when(k.setp(Cmp::eq, id, token), [&] { k.mov(stop, 1u); });
        });
        Reg last = k.setp(Cmp::eq, epoch, steps), none = k.setp(Cmp::eq, stop, 0u);
        k.selp(stop, k.selp(2u, 0u, last, Type::u32), stop, none);   // the step count, unless a stop id came first
        MemOpt acq_sys;
        acq_sys.order = Order::acquire;
        acq_sys.scope = Scope::sys;
        Reg cancel = k.reg(Type::u32);
        k.ld(Space::global, cancel, at(io, 4), acq_sys);
        k.when(k.setp(Cmp::ne, cancel, 0u), [&] { k.mov(stop, 3u); });
        k.when(k.setp(Cmp::ne, stop, 0u), [&] { k.st_global(at(io, 8), stop); });
        k.st_global(at(state, st.token), token);
        k.st_global(at(state, st.pos), k.add(k.ld_global(Type::u32, at(state, st.pos)), 1u));
        k.st_global(at(best), k.mov(Type::u64, 0ull));
        k.st_global(at(go_addr, 4), stop);
        k.st_release_gpu(at(go_addr), epoch);
      });
    });
    k.comment("every block: wait for the advance (it wrote state and cleared best), then stop or go on");
    k.if_(is_t0, [&] {
      Label spin = k.label("wait_go");
      k.place(spin);
      Reg g = k.ld_acquire_gpu(Type::u32, at(go_addr));
      k.bra_if(k.setp(Cmp::lo, g, epoch), spin);
      k.st_shared(at(cell), k.ld_global(Type::u32, at(go_addr, 4)));
    });
    k.bar_sync(kLoopBarrier);
    Reg stop = k.ld_shared(Type::u32, at(cell));
    k.bar_sync(kLoopBarrier);   // the cell is not rewritten before every thread has read it
    k.bra_if(k.setp(Cmp::ne, stop, 0u), finished);
  });
  k.place(finished);

  LaunchGeometry g{{1, 1, 1}, {threads, 1, 1}, (shared + 15) / 16 * 16};
  validate_geometry(k.name(), g);
  out.kernel = GeneratedKernel{k.name(), k.emit(), params, g, true};
  return out;
}

}  // namespace ptxlm::kernels
