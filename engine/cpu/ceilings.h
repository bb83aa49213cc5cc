// The two ceilings a CPU puts on decode (issue 26): how fast its memory
// streams a read to the cores, and how many int8 multiply-adds per second
// an Isa's dot-product instructions retire. Decode reads every weight once
// per pass and multiplies each by one int8 input per token: a pass is bound
// by the first for one token and by the second for many.
#pragma once

#include <cstdint>

#include "engine/cpu/qdot.h"

namespace ptxlm::cpu {

struct ReadRate {
    double gbs = 0;       // bytes read / the best repetition's time, in 1e9 bytes per second
    uint64_t bytes = 0;   // the buffer read, split over the threads
    double best_ms = 0;
    int threads = 0, reps = 0;
};

// A read-only stream over `bytes` (make it far beyond the last-level
// cache), each of `threads` threads summing its slice with 32-byte loads
// (8-byte ones on a CPU without AVX2);
// the best of `reps` passes after one untimed one (which also faults the
// pages in), on huge pages where the system has them (lazy_buffer.h). Throws
// std::invalid_argument for no threads, no repetitions or
// fewer bytes than 4 KiB per thread.
ReadRate measure_read(int threads, uint64_t bytes, int reps = 6);

struct CopyRate {
    double gbs = 0;       // (bytes read + bytes written) / the best repetition's time, in 1e9 per second
    uint64_t bytes = 0;   // the buffer copied, split over the threads
    int threads = 0, reps = 0;
};

// memcpy of `bytes` (far beyond the last-level cache) between two buffers,
// each of `threads` threads copying its slice; the best of `reps` after one
// untimed pass. It counts reads and writes, so it is not decode's ceiling
// (measure_read is); bench reports it beside the others. Throws
// std::invalid_argument as measure_read does.
CopyRate measure_copy(int threads, uint64_t bytes, int reps = 5);

struct Int8Rate {
    double gops = 0;   // int8 multiply-adds per second, in 1e9
    Isa isa = Isa::Scalar;
    int threads = 0;
};

// The int8 multiply-add rate of isa's dot-product sequence (the one the
// quantized kernels use: vpmaddubsw + vpmaddwd + vpaddd on avx2 and
// avx512, vpdpbusd on avx512vnni) with its operands in registers: eight
// independent accumulators per thread, `threads` threads, the best of
// three runs of about 20 ms each. isa must be runnable and not Scalar
// (throws std::invalid_argument).
Int8Rate measure_int8(Isa isa, int threads);

namespace detail {
// Per-Isa loops (ceilings_avx2.cpp, ceilings_avx512.cpp). Each returns a
// value that depends on every load or accumulator, so none is optimised out.
uint64_t read_sum_avx2(const void* p, uint64_t bytes);            // bytes: a multiple of 128
uint64_t int8_loop_avx2(uint64_t iters);                          // 256 multiply-adds per iteration
uint64_t int8_loop_avx512(uint64_t iters);                        // 512
uint64_t int8_loop_avx512vnni(uint64_t iters);                    // 512
}  // namespace detail

}  // namespace ptxlm::cpu
