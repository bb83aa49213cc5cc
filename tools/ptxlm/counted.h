// bench's counted mode: when the CUDA driver is emu, its times mean nothing,
// so bench counts one token's work instead (emu's per-kernel counters) and
// projects a rate for a named GPU (engine/projection.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/projection.h"

namespace ptxlm::cli {

// One token at KV depth `depth` (the cache filled by a host copy,
// CudaBackend::fill_kv_for_count) in a fresh CudaBackend with emu's counters on
// (PTXLM_EMU_STATS is read when the primary context is retained and written
// when it is released). Returns the per-token totals (launches, unique and
// L2-sector bytes against the bytes a token must read (weights, LM head,
// embedding row, the f16 KV cache at that depth), the weight loads' sector
// efficiency, shared-memory wavefronts against their ideal), a row per
// kernel (grid, block, registers and spills from ptxas for sm_90 when ptxas
// is found, blocks per SM on `gpu`, bytes in flight per SM, unique /
// requested / weight bytes, shared wavefronts / ideal / ratio, the ratio null
// where the kernel touches no shared memory; instructions by class, loads in
// flight per warp, waits, dependent-load chains; each kernel's limits on
// `gpu`, the binding one and its projected time) and the projection, for the
// GEMV arithmetic `path`, with the GEMVs prefetching their first weights
// when `prefetch` (--gpu-prefetch); the projection the other way too
// ("projected_prefetch"), and with programmatic launches ("projected_pdl").
// paged_kv: the KV cache in pages, attention as paged_rope -> paged_attention
// (ptxlm's default; not --gpu-contiguous-kv).
// Call with no other CudaBackend alive.
nlohmann::json counted_token(const Model& m, Schedule schedule, GpuArithmetic path, const GpuSpec& gpu,
                             uint32_t depth = 0, bool prefetch = false, bool paged_kv = false);

// One batch step of `batch` (1..16) decode tokens (CudaBackend::step, graph
// schedule, paged KV), each sequence at KV depth `depth` on pages of its
// own, or with `prompt` one sequence's chunk of `batch` prompt tokens from
// `depth` on, in a fresh CudaBackend with emu's counters on. Returns the step's
// launches, the weight bytes it reads (each kernel's distinct weight bytes
// times the launches a matrix takes: T over its GEMV's columns) against one
// pass over the weights (1.0x when each matrix is read once for every
// column) and the sectors its weight loads touched, the
// KV bytes, a row per kernel (launches, grid, registers, projected us and
// the binding limit) and the projection for `gpu`: us per token and the
// aggregate tokens/s of the batch, work by binding limit. Call with no other
// CudaBackend alive.
nlohmann::json counted_step(const Model& m, GpuArithmetic path, const GpuSpec& gpu, uint32_t depth, uint32_t batch,
                            bool prompt = false);

// The per-kernel rows of `counted` as a Markdown table.
std::string counted_kernel_table(const nlohmann::json& counted);

}  // namespace ptxlm::cli
