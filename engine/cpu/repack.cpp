#include "engine/cpu/repack.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "engine/cpu/env_knob.h"

namespace ptxlm::cpu {

namespace {

// A block as the packing sees it: `values` elements, `halves` f16 fields and
// `words` 4-byte words of codes and scales, the fields first (or last: Q2_K,
// Q3_K, Q6_K). Packed, block b of a group is each field for the kPackRows rows side
// by side, then each word for the rows side by side (repack.h): the fields
// always first.
struct BlockShape {
    int halves = 0, words = 0;
    bool spread_qh = false;     // word 0 is a Q5 qh, stored spread (spread_qh below)
    int values = 32;
    bool halves_last = false;   // the file's block ends with its f16 fields
    explicit operator bool() const { return words != 0; }
    uint64_t bytes() const { return uint64_t(2 * halves + 4 * words); }
    // Where field f and word c start in the file's block.
    uint64_t half_at(int f) const { return halves_last ? uint64_t(4 * words + 2 * f) : uint64_t(2 * f); }
    uint64_t word_at(int c) const { return halves_last ? uint64_t(4 * c) : uint64_t(2 * halves + 4 * c); }
};

BlockShape block_shape(gguf::GgmlType t) {
    switch (t) {
        case gguf::GgmlType::Q4_0: return {1, 4};
        case gguf::GgmlType::Q4_1: return {2, 4};
        case gguf::GgmlType::Q5_0: return {1, 5, true};   // qh, then 4 words of nibbles
        case gguf::GgmlType::Q5_1: return {2, 5, true};
        case gguf::GgmlType::Q8_0: return {1, 8};
        case gguf::GgmlType::IQ4_NL: return {1, 4};   // as Q4_0: d, then 4 words of nibbles
        // d, dmin; 3 words of scales, (Q5_K: 8 words of qh,) 32 of nibbles
        case gguf::GgmlType::Q4_K: return {2, 35, false, 256};
        case gguf::GgmlType::Q5_K: return {2, 43, false, 256};
        // d, scales_h (a u16 in an f16 field's place); scales_l, 32 words of nibbles
        case gguf::GgmlType::IQ4_XS: return {2, 33, false, 256};
        // 4 words of scales, 16 of 2-bit fields, then d, dmin
        case gguf::GgmlType::Q2_K: return {2, 20, false, 256, true};
        // 8 words of hmask, 16 of 2-bit fields, 3 of scales, then d
        case gguf::GgmlType::Q3_K: return {1, 27, false, 256, true};
        // 32 words of ql, 16 of qh, 4 of scales, then d
        case gguf::GgmlType::Q6_K: return {1, 52, false, 256, true};
        default: return {};
    }
}

// A Q5 block's 32 fifth bits (bit j: value j) rearranged so that a packed
// kernel finds word c's at bit 4 of each byte with one shift: bit 8i + c is
// value 4c + i's (word c's low nibble in byte i), bit 8i + 4 + c is value
// 16 + 4c + i's (its high nibble). spread_qh's inverse is gather_qh.
uint32_t spread_qh(uint32_t qh) {
    uint32_t out = 0;
    for (int i = 0; i < 4; ++i)
        for (int c = 0; c < 4; ++c) {
            out |= ((qh >> (4 * c + i)) & 1u) << (8 * i + c);
            out |= ((qh >> (16 + 4 * c + i)) & 1u) << (8 * i + 4 + c);
        }
    return out;
}
uint32_t gather_qh(uint32_t s) {
    uint32_t out = 0;
    for (int i = 0; i < 4; ++i)
        for (int c = 0; c < 4; ++c) {
            out |= ((s >> (8 * i + c)) & 1u) << (4 * c + i);
            out |= ((s >> (8 * i + 4 + c)) & 1u) << (16 + 4 * c + i);
        }
    return out;
}
// Word c of a block copied between the file's layout and the packed one:
// word 0 of a Q5 block goes through `qh` (spread_qh packing, gather_qh
// unpacking), every other word as it is.
void copy_word(const BlockShape& shape, int c, const uint8_t* src, uint8_t* dst, uint32_t (*qh)(uint32_t)) {
    uint32_t v;
    std::memcpy(&v, src, 4);
    if (c == 0 && shape.spread_qh) v = qh(v);
    std::memcpy(dst, &v, 4);
}

}  // namespace

PackedDotFn packed_fn(Isa isa, gguf::GgmlType type) {
    const int slot = detail::qdot_slot(type);
    if (slot < 0) return nullptr;
    switch (isa) {   // see repack.h
        case Isa::Scalar: return nullptr;
        case Isa::Avx2:
        case Isa::Avx512: return detail::kPackedAvx2[slot];
        case Isa::Avx512Vnni: {
            // PTXLM_CPU_PACK_ZMM=1 takes the zmm kernels (an A/B diagnostic:
            // the same bits, slower here, repack.h).
            static const bool zmm = env_switch("PTXLM_CPU_PACK_ZMM", false);
            return zmm ? detail::kPackedAvx512VnniZmm[slot] : detail::kPackedAvx512Vnni[slot];
        }
    }
    return nullptr;
}

std::shared_ptr<uint8_t> PackArena::take(uint64_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    if (!chunk_ || chunk_->size() - used_ < bytes) {
        chunk_ = std::make_shared<LazyBuffer>(std::max(bytes, kChunk), LazyBuffer::Pages::Huge);
        used_ = 0;
    }
    std::shared_ptr<uint8_t> piece(chunk_, chunk_->data() + used_);   // shares the chunk's ownership
    used_ += bytes;
    return piece;
}

namespace {

// `bytes` from the arena, or a huge-page buffer of their own without one.
std::shared_ptr<uint8_t> take_from(PackArena* arena, uint64_t bytes) {
    if (arena) return arena->take(bytes);
    auto own = std::make_shared<LazyBuffer>(bytes, LazyBuffer::Pages::Huge);
    return std::shared_ptr<uint8_t>(own, own->data());
}

}  // namespace

std::shared_ptr<uint8_t> copy_weight(const Weight& w, PackProgress copied, void* ctx, PackArena* arena) {
    const uint64_t bytes = w.rows * w.row_bytes;
    if (!w.data || bytes == 0) return nullptr;
    std::shared_ptr<uint8_t> out = take_from(arena, bytes);
    constexpr uint64_t kRun = uint64_t(1) << 20;
    for (uint64_t off = 0; off < bytes; off += kRun) {
        const uint64_t n = std::min(kRun, bytes - off);
        std::memcpy(out.get() + off, w.data + off, n);
        if (copied) copied(ctx, w.data + off, n);
    }
    return out;
}

namespace {

// p's fields for w (data and run_stride not yet set): empty when (isa,
// w.type) has no packed kernel, w has fewer than kPackRows rows, or its row
// layout is not the shape's.
PackedWeight plan_pack(const Weight& w, Isa isa) {
    PackedWeight p;
    const BlockShape shape = block_shape(w.type);
    const PackedDotFn fn = packed_fn(isa, w.type);
    if (!fn || !shape || w.rows < kPackRows || !w.data) return p;
    const uint64_t nb = w.cols / uint64_t(shape.values);
    if (w.cols % uint64_t(shape.values) != 0 || nb * shape.bytes() != w.row_bytes) return p;
    p.type = w.type;
    p.isa = isa;
    p.groups = w.rows / kPackRows;
    p.group_bytes = kPackRows * w.row_bytes;
    p.fn = fn;
    return p;
}

// Reports w's rows to `copied` in runs of about 1 MiB, in order, as the
// packing passes them.
class Progress {
public:
    Progress(const Weight& w, const PackedWeight& p, PackProgress copied, void* ctx)
        : w_(w), copied_(copied), ctx_(ctx), group_bytes_(p.group_bytes), groups_(p.groups),
          per_run_(std::max<uint64_t>(1, (uint64_t(1) << 20) / p.group_bytes)) {}
    // Groups [0, g) have been read.
    void read_to(uint64_t g) {
        if (!copied_) return;
        for (; g - done_ >= per_run_; done_ += per_run_) copied_(ctx_, w_.row(done_ * kPackRows), per_run_ * group_bytes_);
    }
    void finish() {
        if (copied_ && done_ < groups_) copied_(ctx_, w_.row(done_ * kPackRows), (groups_ - done_) * group_bytes_);
        done_ = groups_;
    }

private:
    const Weight& w_;
    PackProgress copied_;
    void* ctx_;
    uint64_t group_bytes_, groups_, per_run_, done_ = 0;
};

// Groups [g0, g1) of w packed into p.group(g).
void fill_groups(const Weight& w, const PackedWeight& p, uint64_t g0, uint64_t g1) {
    const BlockShape shape = block_shape(w.type);
    const uint64_t nb = w.cols / uint64_t(shape.values);
    const uint64_t hb = 2 * kPackRows, wb = 4 * kPackRows;   // bytes of one packed field, one packed word
    for (uint64_t g = g0; g < g1; ++g) {
        uint8_t* dst = p.data.get() + (p.group(g) - p.data.get());
        for (uint64_t b = 0; b < nb; ++b, dst += kPackRows * shape.bytes())
            for (int r = 0; r < kPackRows; ++r) {
                const uint8_t* src = w.row(g * kPackRows + r) + b * shape.bytes();
                for (int f = 0; f < shape.halves; ++f) std::memcpy(dst + f * hb + 2 * r, src + shape.half_at(f), 2);
                for (int c = 0; c < shape.words; ++c)
                    copy_word(shape, c, src + shape.word_at(c), dst + shape.halves * hb + c * wb + 4 * r, spread_qh);
            }
    }
}

}  // namespace

PackedWeight pack_weight(const Weight& w, Isa isa, PackProgress copied, void* ctx, PackArena* arena) {
    PackedWeight p = plan_pack(w, isa);
    if (!p) return p;
    p.run_stride = kRunGroups * p.group_bytes;
    p.data = take_from(arena, p.groups * p.group_bytes);
    Progress progress(w, p, copied, ctx);
    for (uint64_t g = 0; g < p.groups; ++g) {
        progress.read_to(g);
        fill_groups(w, p, g, g + 1);
    }
    progress.finish();
    return p;
}

PackedPair pack_pair(const Weight& a, const Weight& b, Isa isa, PackProgress copied_a, void* ctx_a,
                     PackProgress copied_b, void* ctx_b, PackArena* arena) {
    PackedPair out{plan_pack(a, isa), plan_pack(b, isa)};
    if (!out.a || !out.b || out.a.groups != out.b.groups) return {};
    PackedWeight &pa = out.a, &pb = out.b;
    const uint64_t groups = pa.groups, runs = (groups + kRunGroups - 1) / kRunGroups;
    pa.run_stride = pb.run_stride = kRunGroups * (pa.group_bytes + pb.group_bytes);
    // The last run: all of a's run (its unused end a gap), then b's groups.
    const uint64_t last_b = groups - (runs - 1) * kRunGroups;
    pa.data = take_from(arena, (runs - 1) * pa.run_stride + kRunGroups * pa.group_bytes + last_b * pb.group_bytes);
    pb.data = std::shared_ptr<uint8_t>(pa.data, pa.data.get() + kRunGroups * pa.group_bytes);
    Progress progress_a(a, pa, copied_a, ctx_a), progress_b(b, pb, copied_b, ctx_b);
    for (uint64_t g = 0; g < groups; g += kRunGroups) {
        const uint64_t e = std::min(groups, g + kRunGroups);
        progress_a.read_to(g);
        fill_groups(a, pa, g, e);
        progress_b.read_to(g);
        fill_groups(b, pb, g, e);
    }
    progress_a.finish();
    progress_b.finish();
    return out;
}

bool paired(const PackedWeight& a, const PackedWeight& b) {
    return a && b && a.groups == b.groups && a.run_stride == kRunGroups * (a.group_bytes + b.group_bytes) &&
           b.run_stride == a.run_stride && b.data.get() == a.data.get() + kRunGroups * a.group_bytes;
}

void unpack_row(const PackedWeight& p, uint64_t r, uint64_t row_bytes, uint8_t* out) {
    const BlockShape shape = block_shape(p.type);
    const uint64_t hb = 2 * kPackRows, wb = 4 * kPackRows;
    const uint64_t i = r % kPackRows;
    const uint8_t* src = p.group(r / kPackRows);
    for (uint64_t b = 0; b < row_bytes / shape.bytes(); ++b, src += kPackRows * shape.bytes(), out += shape.bytes()) {
        for (int f = 0; f < shape.halves; ++f) std::memcpy(out + shape.half_at(f), src + f * hb + 2 * i, 2);
        for (int c = 0; c < shape.words; ++c)
            copy_word(shape, c, src + shape.halves * hb + c * wb + 4 * i, out + shape.word_at(c), gather_qh);
    }
}

}  // namespace ptxlm::cpu
