// The interpreter's memory instructions (ld/st/atom/red and their checks),
// warp-collective instructions (shfl, vote, elect) and barriers: the
// Launch members that exec.cpp's run_warp dispatches to.
#include "exec_launch.h"
#include "shared_banks.h"

namespace ptxlm::emu::exec {

inline uint64_t load_le(const uint8_t* p, uint32_t n) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    return v;
}

bool Launch::mem_op(Warp& w, const Inst& in, uint32_t m) {
    const bool is_ld = in.op == Op::Ld;
    const uint32_t esz = ty_bits(in.ty) / 8, n = esz * in.vec;
    const Space sp = in.space == Space::Generic ? Space::Global : in.space;
    const uint64_t* base = w.regs + size_t(in.addr) * 32;
    const bool sgn = ty_signed(in.ty);
    bool changed = false;   // a store that leaves memory as it was is no progress
    uint32_t shared_addr[32];   // per lane, for the wavefront count (read for lanes in m only)
    for (uint32_t mm = m; mm; mm &= mm - 1) {
        int l = __builtin_ctz(mm);
        uint64_t a = base[l] + uint64_t(in.off);
        uint8_t* p = access(w, l, in, sp, a, n);
        if (!p) return false;
        shared_addr[l] = uint32_t(a);   // a shared access is in bounds here, so a < 2^32
        if (race && sp != Space::Param) {
            std::optional<RaceCheck::Race> r;
            if (sp == Space::Shared) r = race->shared(who(w, l), uint32_t(a), n, !is_ld);
            else if (is_ld) r = race->load(who(w, l), a, n, MemSem(in.sem), MemScope(in.scope), in.nc);
            else r = race->store(who(w, l), a, n, MemSem(in.sem), MemScope(in.scope));
            if (r) return raise_race(*r);
        }
        for (uint32_t i = 0; i < in.vec; ++i) {
            if (is_ld) {
                uint64_t v = load_le(p + i * esz, esz);
                uint32_t rb = k.reg_bits[in.d[i]];
                if (sgn && esz < 8) v = uint64_t(int64_t(v << (64 - 8 * esz)) >> (64 - 8 * esz));
                if (rb < 64) v &= (uint64_t(1) << rb) - 1;
                w.regs[size_t(in.d[i]) * 32 + l] = v;
                if (concurrent && sp == Space::Global) {
                    w.iter_hash = spin_mix(w.iter_hash, a + i * esz, v);
                    w.iter_host |= cache_mapped;   // access() just pointed the cache at a's allocation
                }
            } else {
                uint64_t v = w.regs[size_t(in.a[i]) * 32 + l];
                if (std::memcmp(p + i * esz, &v, esz) != 0) changed = true;
                std::memcpy(p + i * esz, &v, esz);
            }
        }
    }
    if (sp == Space::Global) {
        count_global(w, in, m, n, is_ld, false);
        if (stats && is_ld)
            w.fly.issued(in, sector_scratch.data(), sector_scratch.data() + sector_scratch.size(), *stats, fly_scratch);
    } else if (sp == Space::Shared && stats) {
        const SharedWavefronts wf = shared_wavefronts(shared_addr, m, n);
        if (is_ld) {
            stats->shared_load_bytes += uint64_t(__builtin_popcount(m)) * n;
            stats->shared_load_wavefronts += wf.actual;
            stats->shared_load_ideal_wavefronts += wf.ideal;
        } else {
            stats->shared_store_bytes += uint64_t(__builtin_popcount(m)) * n;
            stats->shared_store_wavefronts += wf.actual;
            stats->shared_store_ideal_wavefronts += wf.ideal;
        }
    }
    if (is_ld && sp == Space::Global) w.iter_read = true;
    if (changed) progress(w);
    return true;
}

// prefetch: no data moves and no register changes, so it is no access for
// the race checker and no load for the in-flight counters; what emu checks is
// stricter than a GPU (which drops a prefetch it cannot serve): every lane's
// address lies in device memory, as a kernel's own buffers do. Counted: the
// requests and the distinct 128-byte lines each one names.
bool Launch::prefetch_op(Warp& w, const Inst& in, uint32_t m) {
    const uint64_t* base = w.regs + size_t(in.addr) * 32;
    uint64_t lines[32];
    uint32_t n = 0;
    for (uint32_t mm = m; mm; mm &= mm - 1) {
        const int l = __builtin_ctz(mm);
        const uint64_t a = base[l] + uint64_t(in.off);
        if (!access(w, l, in, Space::Global, a, 1)) return false;
        lines[n++] = a / 128;
    }
    if (stats) {
        std::sort(lines, lines + n);
        stats->prefetch_requests++;
        stats->prefetch_bytes += 128 * uint64_t(std::unique(lines, lines + n) - lines);
    }
    return true;
}

template <class T>
T atom_apply(AtomOp op, T old, T b, T c, bool* write) {
    using U = std::make_unsigned_t<T>;   // wrapping add, no signed overflow
    *write = true;
    switch (op) {
    case AtomOp::Add: return T(U(old) + U(b));
    case AtomOp::Min: return old < b ? old : b;
    case AtomOp::Max: return old > b ? old : b;
    case AtomOp::Exch: return b;
    case AtomOp::Cas: if (old == b) return c; *write = false; return old;
    case AtomOp::And: return T(old & b);
    case AtomOp::Or: return T(old | b);
    case AtomOp::Xor: return T(old ^ b);
    case AtomOp::Inc: return old >= b ? T(0) : T(U(old) + 1);
    case AtomOp::Dec: return (old == 0 || old > b) ? b : T(U(old) - 1);
    }
    return old;
}

bool Launch::atom_op(Warp& w, const Inst& in, uint32_t m) {
    const uint32_t n = ty_bits(in.ty) / 8;
    const Space sp = in.space == Space::Generic ? Space::Global : in.space;
    const uint64_t* base = w.regs + size_t(in.addr) * 32;
    const AtomOp op = AtomOp(in.sub);
    bool changed = false;   // an atomic that leaves memory as it was (a failed CAS) is no progress
    for (uint32_t mm = m; mm; mm &= mm - 1) {   // lanes in order: one valid serialisation
        int l = __builtin_ctz(mm);
        uint8_t* p = access(w, l, in, sp, base[l] + uint64_t(in.off), n);
        if (!p) return false;
        if (race && sp == Space::Global)   // shared atomics: strong, never a race among themselves
            race->atomic(who(w, l), base[l] + uint64_t(in.off), n, MemSem(in.sem), MemScope(in.scope));
        uint64_t b = w.regs[size_t(in.a[0]) * 32 + l];
        uint64_t c = in.a[1] != kNoReg ? w.regs[size_t(in.a[1]) * 32 + l] : 0;
        uint64_t old = load_le(p, n), nv;
        bool write;
        switch (in.ty) {
        case Ty::S32: nv = uint32_t(atom_apply<int32_t>(op, int32_t(old), int32_t(b), int32_t(c), &write)); break;
        case Ty::S64: nv = uint64_t(atom_apply<int64_t>(op, int64_t(old), int64_t(b), int64_t(c), &write)); break;
        case Ty::F32: {
            float o, x; uint32_t ou = uint32_t(old), xu = uint32_t(b);
            std::memcpy(&o, &ou, 4); std::memcpy(&x, &xu, 4);
            float r = op == AtomOp::Add ? o + x : x;
            write = true;
            std::memcpy(&ou, &r, 4);
            nv = ou;
            break;
        }
        case Ty::F16: case Ty::BF16: {   // .noftz add, computed exactly in double, rounded once
            bool h = in.ty == Ty::F16;
            double o = h ? f32_from_f16(uint16_t(old)) : f32_from_bf16(uint16_t(old));
            double x = h ? f32_from_f16(uint16_t(b)) : f32_from_bf16(uint16_t(b));
            nv = h ? f16_from_f64(o + x, Rnd::Rn) : bf16_from_f32(float(o + x), Rnd::Rn);
            write = true;
            break;
        }
        case Ty::F64: {
            double o, x; std::memcpy(&o, &old, 8); std::memcpy(&x, &b, 8);
            double r = o + x;
            write = true;
            std::memcpy(&nv, &r, 8);
            break;
        }
        default:
            nv = n == 4 ? uint64_t(atom_apply<uint32_t>(op, uint32_t(old), uint32_t(b), uint32_t(c), &write))
                        : atom_apply<uint64_t>(op, old, b, c, &write);
        }
        if (write && std::memcmp(p, &nv, n) != 0) {
            std::memcpy(p, &nv, n);
            changed = true;
        }
        if (in.d[0] != kNoReg) w.regs[size_t(in.d[0]) * 32 + l] = old;
        if (concurrent) {
            w.iter_hash = spin_mix(w.iter_hash, base[l] + uint64_t(in.off), old);
            w.iter_host |= cache_mapped;
        }
    }
    // Shared atomics add no shared bytes or wavefronts: lanes on one address
    // serialise instead of broadcasting, which shared_wavefronts() does not model.
    if (sp == Space::Global) count_global(w, in, m, n, false, true);
    w.iter_read = true;
    if (changed) progress(w);
    return true;
}

bool Launch::shfl(Warp& w, const Inst& in, uint32_t m) {
    const uint64_t* A = w.regs + size_t(in.a[0]) * 32;
    const uint64_t* B = w.regs + size_t(in.a[1]) * 32;
    const uint64_t* C = w.regs + size_t(in.a[2]) * 32;
    const uint64_t* M = w.regs + size_t(in.a[3]) * 32;
    int first = __builtin_ctz(m);
    uint32_t member = uint32_t(M[first]);
    if (member != m) {
        std::ostringstream s;
        s << "shfl.sync membermask 0x" << std::hex << member << " differs from the lanes executing it 0x" << m << std::dec
          << ": " << where(w, first, in);
        return raise(kIllegalInstruction, s.str());
    }
    uint64_t src[32], out[32];
    bool pv[32];
    std::memcpy(src, A, sizeof(src));
    for (uint32_t mm = m; mm; mm &= mm - 1) {
        uint32_t lane = uint32_t(__builtin_ctz(mm));
        uint32_t b = uint32_t(B[lane]), c = uint32_t(C[lane]);
        uint32_t segmask = (c >> 8) & 31, clamp = c & 31;
        uint32_t max_lane = (lane & segmask) | (clamp & ~segmask);
        uint32_t min_lane = lane & segmask;
        int64_t j;
        bool ok;
        switch (ShflMode(in.sub)) {
        case ShflMode::Up: j = int64_t(lane) - int64_t(b); ok = j >= int64_t(max_lane); break;
        case ShflMode::Down: j = int64_t(lane) + int64_t(b); ok = j <= int64_t(max_lane); break;
        case ShflMode::Bfly: j = int64_t(lane ^ b); ok = j <= int64_t(max_lane); break;
        default: j = int64_t(min_lane | (b & ~segmask & 31)); ok = j <= int64_t(max_lane); break;
        }
        if (!ok) j = lane;
        if (ok && !(m >> j & 1)) {
            std::ostringstream s;
            s << "shfl.sync reads lane " << j << " which is not executing it: " << where(w, int(lane), in);
            return raise(kIllegalInstruction, s.str());
        }
        out[lane] = src[j] & 0xffffffffu;
        pv[lane] = ok;
    }
    uint64_t* D = w.regs + size_t(in.d[0]) * 32;
    uint64_t* P = in.pd != kNoReg ? w.regs + size_t(in.pd) * 32 : nullptr;
    for (uint32_t mm = m; mm; mm &= mm - 1) {
        int l = __builtin_ctz(mm);
        D[l] = out[l];
        if (P) P[l] = pv[l];
    }
    return true;
}

// mma.sync.aligned.m16n8k32.row.col.s32.{s8,u8}.{s8,u8}.s32: D = A·B + C
// over the warp, A 16 × 32 (row-major), B 32 × 8 (column-major), C and D
// 16 × 8 int32, the sums wrapping. Lane l (group g = l / 4, t = l % 4)
// holds, four 8-bit elements to a register, the lowest element in the low
// byte: A's rows g (a0, a2) and g + 8 (a1, a3) at columns 4t.. (a0, a1)
// and 16 + 4t.. (a2, a3); B's column g at rows 4t.. (b0) and 16 + 4t..
// (b1); C's and D's rows g (c0, c1) and g + 8 (c2, c3) at columns 2t and
// 2t + 1. Every lane must execute it (.aligned).
bool Launch::mma(Warp& w, const Inst& in, uint32_t m) {
    if (m != 0xffffffffu || w.active != 0xffffffffu) {
        std::ostringstream s;
        s << "mma.sync.aligned executed by lanes 0x" << std::hex << m << std::dec
          << ", not by the whole warp: " << where(w, __builtin_ctz(m), in);
        return raise(kIllegalInstruction, s.str());
    }
    const uint64_t* R = w.regs;
    auto reg = [&](uint32_t r, uint32_t lane) { return uint32_t(R[size_t(r) * 32 + lane]); };
    auto elem = [](uint32_t word, uint32_t i, Ty t) {
        const uint32_t b = (word >> (8 * i)) & 0xffu;
        return t == Ty::S8 ? int32_t(int8_t(b)) : int32_t(b);
    };
    int32_t A[16][32], B[32][8];
    uint32_t D[16][8];   // C, then A·B added
    for (uint32_t lane = 0; lane < 32; ++lane) {
        const uint32_t g = lane / 4, t = lane % 4;
        for (uint32_t r = 0; r < 4; ++r) {
            const uint32_t row = g + 8 * (r & 1), col = 4 * t + 16 * (r >> 1);
            for (uint32_t i = 0; i < 4; ++i) A[row][col + i] = elem(reg(in.a[r], lane), i, in.ty);
        }
        for (uint32_t r = 0; r < 2; ++r)
            for (uint32_t i = 0; i < 4; ++i) B[4 * t + 16 * r + i][g] = elem(reg(in.x[r], lane), i, in.ty2);
        for (uint32_t r = 0; r < 4; ++r) D[g + 8 * (r >> 1)][2 * t + (r & 1)] = reg(in.x[2 + r], lane);
    }
    for (uint32_t i = 0; i < 16; ++i)
        for (uint32_t j = 0; j < 8; ++j)
            for (uint32_t k = 0; k < 32; ++k) D[i][j] += uint32_t(A[i][k] * B[k][j]);   // |product| <= 255 · 255
    for (uint32_t lane = 0; lane < 32; ++lane) {
        const uint32_t g = lane / 4, t = lane % 4;
        for (uint32_t r = 0; r < 4; ++r) w.regs[size_t(in.d[r]) * 32 + lane] = D[g + 8 * (r >> 1)][2 * t + (r & 1)];
    }
    return true;
}

bool Launch::vote(Warp& w, const Inst& in, uint32_t m) {
    const uint64_t* P = w.regs + size_t(in.a[0]) * 32;
    int first = __builtin_ctz(m);
    uint32_t member = uint32_t(w.regs[size_t(in.a[1]) * 32 + first]);
    if (member != m) {
        std::ostringstream s;
        s << "vote.sync membermask 0x" << std::hex << member << " differs from the lanes executing it 0x" << m << std::dec
          << ": " << where(w, first, in);
        return raise(kIllegalInstruction, s.str());
    }
    uint32_t ballot = 0;
    for (uint32_t mm = m; mm; mm &= mm - 1) {
        int l = __builtin_ctz(mm);
        if ((P[l] & 1) != in.neg_c) ballot |= 1u << l;
    }
    uint64_t r = VoteMode(in.sub) == VoteMode::Ballot ? ballot
               : VoteMode(in.sub) == VoteMode::All   ? uint64_t(ballot == m)
                                                     : uint64_t(ballot != 0);
    uint64_t* D = w.regs + size_t(in.d[0]) * 32;
    for (uint32_t mm = m; mm; mm &= mm - 1) D[__builtin_ctz(mm)] = r;
    return true;
}

bool Launch::elect(Warp& w, const Inst& in, uint32_t m) {
    int first = __builtin_ctz(m);
    uint32_t member = uint32_t(w.regs[size_t(in.a[0]) * 32 + first]);
    if (member != m) {
        std::ostringstream s;
        s << "elect.sync membermask 0x" << std::hex << member << " differs from the lanes executing it 0x" << m << std::dec
          << ": " << where(w, first, in);
        return raise(kIllegalInstruction, s.str());
    }
    uint64_t* D = w.regs + size_t(in.d[0]) * 32;
    uint64_t* P = w.regs + size_t(in.pd) * 32;
    for (uint32_t mm = m; mm; mm &= mm - 1) {
        int l = __builtin_ctz(mm);
        D[l] = uint64_t(first);
        P[l] = l == first;
    }
    return true;
}

bool Launch::bar(Warp& w, const Inst& in, uint32_t m, bool* blocked) {
    *blocked = false;
    int first = __builtin_ctz(w.active);
    if (m != w.active || w.active != w.live) {
        std::ostringstream s;
        s << "bar.sync executed by a diverged warp (lanes 0x" << std::hex << m << " of live 0x" << w.live << std::dec
          << "): " << where(w, first, in);
        return raise(kIllegalInstruction, s.str());
    }
    uint32_t id = uint32_t(w.regs[size_t(in.a[0]) * 32 + first]);
    uint32_t expected = in.na == 2 ? uint32_t(w.regs[size_t(in.a[1]) * 32 + first]) : nthreads;
    if (id > 15) return raise(kIllegalInstruction, "barrier id " + std::to_string(id) + " over 15: " + where(w, first, in));
    if (in.na == 2 && (expected == 0 || expected % 32 || expected > (nthreads + 31) / 32 * 32))
        return raise(kIllegalInstruction, "bad barrier thread count " + std::to_string(expected) + ": " + where(w, first, in));
    Barrier& b = blk->bars[id];
    if (b.arrived && b.expected != expected)
        return raise(kIllegalInstruction, "barrier " + std::to_string(id) + " used with thread counts " +
                                              std::to_string(b.expected) + " and " + std::to_string(expected) + ": " + where(w, first, in));
    b.expected = expected;
    b.arrived += uint32_t(__builtin_popcount(m));
    progress(w);
    w.pc++;
    if (b.arrived >= b.expected) {
        for (uint32_t wi : b.warps) blk->warps[wi].waiting_bar = -1;
        round_progress = true;
        if (race) race->barrier(blk->index);
        b.warps.clear();
        b.arrived = 0;
        if (stats) stats->barriers++;
        return true;
    }
    b.warps.push_back(w.id);
    w.waiting_bar = int(id);
    *blocked = true;
    return true;
}

}  // namespace ptxlm::emu::exec
