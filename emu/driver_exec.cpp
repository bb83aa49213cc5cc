// emu's Driver API surface, part 2: modules, kernels, launches, occupancy,
// streams, stream capture and graphs, and cuGetProcAddress.
#include "emu/driver_queue.h"
#include "emu/driver_state.h"
#include "emu/jit_check.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

using namespace ptxlm::emu::driver;
namespace emu = ptxlm::emu;

namespace {

constexpr uint32_t kSharedWithoutOptIn = 48 * 1024;
constexpr uint32_t kSharedReservedPerBlock = 1024;   // sm_80+ reserve 1 KiB of shared memory per resident block

// Copies `text` into a caller's JIT log buffer given by option slots, honouring
// its size (terminator included) and writing back the bytes filled.
void write_log(const std::string& text, void** buf_slot, void** size_slot) {
    if (!buf_slot || !size_slot) return;
    char* buf = static_cast<char*>(*buf_slot);
    size_t cap = reinterpret_cast<uintptr_t>(*size_slot);
    if (!buf || cap == 0) {
        *size_slot = nullptr;
        return;
    }
    size_t n = std::min(text.size(), cap - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
    *size_slot = reinterpret_cast<void*>(uintptr_t(n + 1));
}

std::string kernel_summary(const emu::Program& p) {
    std::string s = "emu: module loaded (PTX interpreted, not compiled)";
    for (const emu::KernelInfo& k : emu::program_kernels(p))
        s += "\nemu: kernel " + k.name + ": " + std::to_string(k.params.size()) + " params (" +
             std::to_string(k.param_bytes) + " bytes), " + std::to_string(k.static_shared_bytes) +
             " bytes static shared, ~" + std::to_string(k.regs_per_thread) + " registers";
    return s;
}

bool valid_func(CUctx_st* ctx, CUfunction f) { return alive(f) && f->mod->ctx == ctx; }

// Blocks of `f` resident on one SM with this block size and dynamic shared memory.
int occupancy(const CUfunc_st* f, uint64_t threads, uint64_t dyn_shared) {
    const emu::DeviceLimits& L = emu::device_limits();
    const emu::KernelInfo& k = *f->info;
    if (threads == 0 || threads > L.max_threads_per_block || (k.max_ntid && threads > k.max_ntid)) return 0;
    uint64_t warps = (threads + L.warp_size - 1) / L.warp_size;
    uint64_t n = std::min<uint64_t>(L.max_blocks_per_sm, L.max_threads_per_sm / (warps * L.warp_size));
    if (k.regs_per_thread) {
        // Registers are allocated per warp, 8 per thread and 256 per warp at a time.
        uint64_t per_warp = (uint64_t(k.regs_per_thread + 7) / 8 * 8 * L.warp_size + 255) / 256 * 256;
        n = std::min<uint64_t>(n, L.regs_per_sm / per_warp / warps);
    }
    uint64_t shared = k.static_shared_bytes + dyn_shared;
    if (shared > L.shared_per_block_optin) return 0;
    n = std::min<uint64_t>(n, L.shared_per_sm / (shared + kSharedReservedPerBlock));
    return int(n);
}

// Validates a launch and packs its parameters (copied now, as the driver does).
CUresult make_launch(CUctx_st* ctx, CUfunction f, emu::Dim3 grid, emu::Dim3 block, unsigned shared,
                     void** kernelParams, void** extra, EmuLaunch* out) {
    if (!valid_func(ctx, f)) return CUDA_ERROR_INVALID_HANDLE;
    const emu::DeviceLimits& L = emu::device_limits();
    const emu::KernelInfo& k = *f->info;
    if (grid.count() == 0 || block.count() == 0) return CUDA_ERROR_INVALID_VALUE;
    if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) return CUDA_ERROR_INVALID_VALUE;
    if (block.x > 1024 || block.y > 1024 || block.z > 64 || block.count() > L.max_threads_per_block)
        return CUDA_ERROR_INVALID_VALUE;
    if (k.max_ntid && block.count() > k.max_ntid) return CUDA_ERROR_INVALID_VALUE;
    if (k.regs_per_thread && uint64_t(k.regs_per_thread) * block.count() > L.regs_per_sm)
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    // Above 48 KiB the kernel must have opted in with cuFuncSetAttribute.
    uint64_t total_shared = uint64_t(k.static_shared_bytes) + shared;
    if (total_shared > kSharedWithoutOptIn && shared > f->max_dynamic_shared) return CUDA_ERROR_INVALID_VALUE;
    if (total_shared > L.shared_per_block_optin) return CUDA_ERROR_INVALID_VALUE;

    out->func = f;
    out->grid = grid;
    out->block = block;
    out->shared = shared;
    out->params.assign(k.param_bytes, 0);
    if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
    if (extra) {
        const void* buf = nullptr;
        const size_t* size = nullptr;
        for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
            if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = e[1];
            else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = static_cast<const size_t*>(e[1]);
            else return CUDA_ERROR_INVALID_VALUE;
        }
        if (!buf || !size || *size != k.param_bytes) return CUDA_ERROR_INVALID_VALUE;
        if (k.param_bytes) std::memcpy(out->params.data(), buf, k.param_bytes);
    } else if (!k.params.empty()) {
        if (!kernelParams) return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < k.params.size(); ++i) {
            if (!kernelParams[i]) return CUDA_ERROR_INVALID_VALUE;
            std::memcpy(out->params.data() + k.params[i].offset, kernelParams[i], k.params[i].size);
        }
    }
    out->param_ptrs.clear();
    for (const emu::ParamInfo& p : k.params) out->param_ptrs.push_back(out->params.data() + p.offset);
    return CUDA_SUCCESS;
}

// Resolves a launch's stream: the default stream (NULL, legacy, per-thread) or
// a created stream of this context.
CUresult get_stream(CUctx_st* ctx, CUstream h, CUstream_st** out) {
    if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        *out = nullptr;
        return CUDA_SUCCESS;
    }
    if (!alive(h) || h->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    *out = h;
    return CUDA_SUCCESS;
}

// Runs or records a launch on a stream.
CUresult submit(CUctx_st* ctx, CUstream_st* st, EmuLaunch&& l) {
    if (st && st->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (st && st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        auto node = std::make_unique<CUgraphNode_st>();
        node->graph = st->graph.get();
        node->launch = std::move(l);
        state().live.insert(node.get());
        st->graph->nodes.push_back(std::move(node));
        return CUDA_SUCCESS;
    }
    if (!st && capture_forbids_unsafe(ctx)) {
        invalidate_captures(ctx);
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    if (ctx->sticky != CUDA_SUCCESS) return ctx->sticky;
    queue().submit(st, [ctx, l = std::move(l)] { execute(ctx, l); });
    return CUDA_SUCCESS;
}

}  // namespace

namespace ptxlm::emu::driver {

void execute(CUctx_st* ctx, const EmuLaunch& l) {
    State& s = state();
    const CUfunc_st* f = l.func;
    const emu::KernelInfo& k = *f->info;
    emu::LaunchConfig cfg;
    bool stats_on;
    {
        Lock lock(s.mu);
        if (ctx->sticky != CUDA_SUCCESS) return;   // an earlier fault: nothing more runs
        cfg.grid = l.grid;
        cfg.block = l.block;
        cfg.dynamic_shared_bytes = l.shared;
        cfg.params = l.params.data();
        cfg.params_size = uint32_t(l.params.size());
        cfg.cooperative = l.cooperative;
        // The opted-in limit (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); 0 = the default 48 KiB.
        uint64_t limit = uint64_t(k.static_shared_bytes) + f->max_dynamic_shared;
        cfg.shared_limit = limit > kSharedWithoutOptIn ? uint32_t(limit) : 0;
        stats_on = s.stats_enabled;
    }
    emu::Stats stats;
    std::optional<emu::Fault> fault = emu::run_kernel(*f->mod->prog, k.name, cfg, *ctx->mem, stats_on ? &stats : nullptr);
    Lock lock(s.mu);
    if (stats_on) s.stats[k.name] += stats;
    if (!fault) return;
    std::fprintf(stderr, "emu: %s\n", fault->message.c_str());
    // make_launch checked what a launch call reports, so anything found now
    // (a fault, a deadlock, a race) poisons the context: it surfaces at the
    // next sync, as on hardware.
    if (ctx->sticky == CUDA_SUCCESS)
        ctx->sticky = fault->cuda_error ? CUresult(fault->cuda_error) : CUDA_ERROR_LAUNCH_FAILED;
}

}  // namespace ptxlm::emu::driver

// ---- modules and functions ----

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
    State& s = state();
    Lock lock(s.mu);
    if (!module || !image || (numOptions && (!options || !optionValues))) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    void **err_buf = nullptr, **err_size = nullptr, **info_buf = nullptr, **info_size = nullptr;
    for (unsigned i = 0; i < numOptions; ++i) {
        switch (options[i]) {
        case CU_JIT_ERROR_LOG_BUFFER: err_buf = &optionValues[i]; break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: err_size = &optionValues[i]; break;
        case CU_JIT_INFO_LOG_BUFFER: info_buf = &optionValues[i]; break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: info_size = &optionValues[i]; break;
        default: break;   // optimisation level, verbosity, target...: no effect on an interpreter
        }
    }
    const char* text = static_cast<const char*>(image);
    if (std::memcmp(text, "\x7f" "ELF", 4) == 0) {
        write_log("emu runs PTX text only; this image is a cubin/fatbin", err_buf, err_size);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    std::string log;
    if (CUresult r = check_ptx_header(text, &log)) {
        write_log(log, err_buf, err_size);
        write_log("", info_buf, info_size);
        return r;
    }
    // The real JIT's verdict first (ptxas for this device), so diagnostics and
    // register counts match a GPU driver's; then emu's own, stricter subset.
    const emu::DeviceLimits& L = emu::device_limits();
    const emu::JitVerdict jit = emu::jit_check(text, "sm_" + std::to_string(L.cc_major * 10 + L.cc_minor));
    if (!jit.checked) {
        static bool said = false;   // once per process: no silent fallback, no noise either
        if (!said) std::fprintf(stderr, "emu: %s\n", jit.log.c_str());
        said = true;
    } else if (!jit.ok) {
        write_log(jit.log, err_buf, err_size);   // ptxas's words, as the real JIT log has them
        write_log("", info_buf, info_size);
        return CUDA_ERROR_INVALID_PTX;
    }
    std::shared_ptr<const emu::Program> prog = emu::load_program(std::string_view(text), &log);
    if (!prog) {
        write_log(log.empty() ? "emu: PTX rejected (no diagnostics)"
                              : (jit.checked ? "ptxas accepts this module, but emu does not implement it:\n" : "") + log,
                  err_buf, err_size);
        write_log("", info_buf, info_size);
        return CUDA_ERROR_INVALID_PTX;
    }
    write_log("", err_buf, err_size);
    write_log(kernel_summary(*prog) + (jit.checked ? "\n" + jit.log : ""), info_buf, info_size);
    auto mod = std::make_unique<CUmod_st>();
    mod->ctx = ctx;
    mod->prog = prog;
    for (const emu::KernelInfo& k : emu::program_kernels(*prog)) {
        auto f = std::make_unique<CUfunc_st>();
        f->mod = mod.get();
        f->own = k;
        if (auto it = jit.regs.find(k.name); it != jit.regs.end()) f->own.regs_per_thread = it->second;
        f->info = &f->own;
        f->max_dynamic_shared = kSharedWithoutOptIn - std::min(k.static_shared_bytes, kSharedWithoutOptIn);
        s.live.insert(f.get());
        mod->funcs.push_back(std::move(f));
    }
    *module = mod.get();
    s.live.insert(mod.get());
    ctx->modules[mod.get()] = std::move(mod);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
    return cuModuleLoadDataEx(module, image, 0, nullptr, nullptr);
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
    queue().drain();   // queued launches may use its functions
    State& s = state();
    Lock lock(s.mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!alive(hmod) || hmod->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    for (auto& f : hmod->funcs) s.live.erase(f.get());
    s.live.erase(hmod);
    ctx->modules.erase(hmod);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
    Lock lock(state().mu);
    if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!alive(hmod) || hmod->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    for (auto& f : hmod->funcs)
        if (f->info->name == name) {
            *hfunc = f.get();
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
    Lock lock(state().mu);
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!valid_func(ctx, hfunc)) return CUDA_ERROR_INVALID_HANDLE;
    const emu::DeviceLimits& L = emu::device_limits();
    const emu::KernelInfo& k = *hfunc->info;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: {
        uint32_t n = L.max_threads_per_block;
        if (k.max_ntid) n = std::min(n, k.max_ntid);
        if (k.regs_per_thread) {
            uint32_t per_warp = ((k.regs_per_thread + 7) / 8 * 8 * L.warp_size + 255) / 256 * 256;
            n = std::min(n, L.regs_per_sm / per_warp * L.warp_size);
        }
        *pi = int(n);
        break;
    }
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = int(k.static_shared_bytes); break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = int(k.regs_per_thread); break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = L.cc_major * 10 + L.cc_minor; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = int(hfunc->max_dynamic_shared); break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = hfunc->carveout; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!valid_func(ctx, hfunc)) return CUDA_ERROR_INVALID_HANDLE;
    const emu::DeviceLimits& L = emu::device_limits();
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || uint64_t(value) + hfunc->info->static_shared_bytes > L.shared_per_block_optin)
            return CUDA_ERROR_INVALID_VALUE;
        hfunc->max_dynamic_shared = uint32_t(value);
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
        hfunc->carveout = value;
        return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!valid_func(ctx, func)) return CUDA_ERROR_INVALID_HANDLE;
    const auto& params = func->info->params;
    if (paramIndex >= params.size()) return CUDA_ERROR_INVALID_VALUE;
    if (paramOffset) *paramOffset = params[paramIndex].offset;
    if (paramSize) *paramSize = params[paramIndex].size;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                             size_t dynamicSMemSize) {
    Lock lock(state().mu);
    if (!numBlocks || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!valid_func(ctx, func)) return CUDA_ERROR_INVALID_HANDLE;
    *numBlocks = occupancy(func, uint64_t(blockSize), dynamicSMemSize);
    return CUDA_SUCCESS;
}

// ---- launches ----

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    CUstream_st* st;
    if (CUresult r = get_stream(ctx, hStream, &st)) return r;
    EmuLaunch l;
    if (CUresult r = make_launch(ctx, f, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ},
                                 sharedMemBytes, kernelParams, extra, &l))
        return r;
    return submit(ctx, st, std::move(l));
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                           void** kernelParams) {
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    CUstream_st* st;
    if (CUresult r = get_stream(ctx, hStream, &st)) return r;
    EmuLaunch l;
    if (CUresult r = make_launch(ctx, f, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ},
                                 sharedMemBytes, kernelParams, nullptr, &l))
        return r;
    // Every block of a cooperative grid must be resident at once.
    uint64_t resident = uint64_t(occupancy(f, l.block.count(), sharedMemBytes)) * emu::device_limits().sm_count;
    if (l.grid.count() > resident) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    l.cooperative = true;
    return submit(ctx, st, std::move(l));
}

// cuLaunchKernelEx: the attributes emu honours are cooperative (as
// cuLaunchCooperativeKernel) and programmatic stream serialization (sm_90):
// the kernel may start before the one ahead of it finishes and must wait
// with griddepcontrol.wait; emu runs a stream's kernels one after another,
// which is one of the orders that allows. Any other attribute is refused.
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
    if (!config || (config->numAttrs && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
    bool cooperative = false;
    for (unsigned i = 0; i < config->numAttrs; ++i) {
        const CUlaunchAttribute& a = config->attrs[i];
        if (a.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
            cooperative = a.value.cooperative != 0;
        } else if (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) {
            if (a.value.programmaticStreamSerializationAllowed && emu::device_limits().cc_major < 9)
                return CUDA_ERROR_NOT_SUPPORTED;
        } else {
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    if (cooperative) {
        if (extra) return CUDA_ERROR_INVALID_VALUE;
        return cuLaunchCooperativeKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                                         config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                                         kernelParams);
    }
    return cuLaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                          config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream, kernelParams,
                          extra);
}

// ---- streams and capture ----

CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
    State& s = state();
    Lock lock(s.mu);
    if (!phStream || (Flags & ~unsigned(CU_STREAM_NON_BLOCKING))) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    auto st = std::make_unique<CUstream_st>();
    st->ctx = ctx;
    st->flags = Flags;
    *phStream = st.get();
    s.live.insert(st.get());
    ctx->streams[st.get()] = std::move(st);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
    State& s = state();
    Lock lock(s.mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!alive(hStream) || hStream->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    if (hStream->graph)
        for (auto& n : hStream->graph->nodes) s.live.erase(n.get());
    s.live.erase(hStream);
    ctx->streams.erase(hStream);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
    queue().drain();   // every stream's work: one device queue (driver_queue.h)
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;   // a fault from earlier work surfaces here
    CUstream_st* st;
    if (CUresult r = get_stream(ctx, hStream, &st)) return r;
    if (st && st->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
        st->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (!st && capture_forbids_unsafe(ctx)) {
        invalidate_captures(ctx);
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
    CUstream_st* st;
    {
        Lock lock(state().mu);
        CUctx_st* ctx;
        if (CUresult r = enter(&ctx)) return r;
        if (CUresult r = get_stream(ctx, hStream, &st)) return r;
        if (st && st->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
            st->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    // The legacy stream waits for every stream's work; without the API lock,
    // so a query answers while a kernel runs.
    if (queue().busy(st)) return CUDA_ERROR_NOT_READY;
    Lock lock(state().mu);
    CUctx_st* ctx;
    return enter(&ctx);   // a fault from finished work surfaces here
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    CUstream_st* st;
    if (CUresult r = get_stream(ctx, hStream, &st)) return r;
    if (!st) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;   // the legacy stream cannot be captured
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (st->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
    st->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    st->mode = mode;
    st->capture_thread = std::this_thread::get_id();
    st->graph = std::make_unique<CUgraph_st>();
    st->graph->ctx = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
    State& s = state();
    Lock lock(s.mu);
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    CUstream_st* st;
    if (CUresult r = get_stream(ctx, hStream, &st)) return r;
    if (!st || st->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
    if (st->mode != CU_STREAM_CAPTURE_MODE_RELAXED && st->capture_thread != std::this_thread::get_id())
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    std::unique_ptr<CUgraph_st> g = std::move(st->graph);
    bool invalid = st->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    st->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    *phGraph = nullptr;
    if (invalid) {
        for (auto& n : g->nodes) s.live.erase(n.get());
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *phGraph = g.get();
    s.live.insert(g.get());
    ctx->graphs[g.get()] = std::move(g);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
    Lock lock(state().mu);
    if (!captureStatus) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    CUstream_st* st;
    if (CUresult r = get_stream(ctx, hStream, &st)) return r;
    *captureStatus = st ? st->capture : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

// ---- graphs ----

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) {
    Lock lock(state().mu);
    if (!numNodes) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!alive(hGraph) || hGraph->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    size_t n = hGraph->nodes.size();
    if (nodes) {
        for (size_t i = 0; i < *numNodes; ++i) nodes[i] = i < n ? hGraph->nodes[i].get() : nullptr;
        *numNodes = std::min(*numNodes, n);
    } else {
        *numNodes = n;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) {
    Lock lock(state().mu);
    if (!type) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!alive(hNode)) return CUDA_ERROR_INVALID_HANDLE;
    *type = CU_GRAPH_NODE_TYPE_KERNEL;   // emu captures kernel launches only
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS* p) {
    Lock lock(state().mu);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!alive(hNode)) return CUDA_ERROR_INVALID_HANDLE;
    EmuLaunch& l = hNode->launch;
    *p = CUDA_KERNEL_NODE_PARAMS{};
    p->func = l.func;
    p->gridDimX = l.grid.x, p->gridDimY = l.grid.y, p->gridDimZ = l.grid.z;
    p->blockDimX = l.block.x, p->blockDimY = l.block.y, p->blockDimZ = l.block.z;
    p->sharedMemBytes = l.shared;
    p->kernelParams = l.param_ptrs.empty() ? nullptr : l.param_ptrs.data();   // the node's own copies
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
    State& s = state();
    Lock lock(s.mu);
    if (!phGraphExec) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!alive(hGraph) || hGraph->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    if (flags != 0) return CUDA_ERROR_NOT_SUPPORTED;   // auto-free, upload, device launch: not modelled
    auto e = std::make_unique<CUgraphExec_st>();
    e->ctx = ctx;
    for (auto& n : hGraph->nodes) {
        EmuLaunch copy = n->launch;   // its own parameter copy: exec updates leave the graph alone
        copy.param_ptrs.clear();
        for (const emu::ParamInfo& p : copy.func->info->params) copy.param_ptrs.push_back(copy.params.data() + p.offset);
        e->nodes.emplace_back(n.get(), std::move(copy));
    }
    *phGraphExec = e.get();
    s.live.insert(e.get());
    ctx->execs[e.get()] = std::move(e);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!alive(hGraphExec) || hGraphExec->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    CUstream_st* st;
    if (CUresult r = get_stream(ctx, hStream, &st)) return r;
    if (st && st->capture != CU_STREAM_CAPTURE_STATUS_NONE) {   // child-graph nodes are not modelled
        st->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (!st && capture_forbids_unsafe(ctx)) {
        invalidate_captures(ctx);
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    for (auto& [node, l] : hGraphExec->nodes)
        if (!valid_func(ctx, l.func)) return CUDA_ERROR_INVALID_HANDLE;   // its module was unloaded
    if (ctx->sticky != CUDA_SUCCESS) return ctx->sticky;
    // The nodes as they are now: a later cuGraphExecKernelNodeSetParams or
    // cuGraphExecDestroy does not change a launch already made.
    std::vector<EmuLaunch> nodes;
    nodes.reserve(hGraphExec->nodes.size());
    for (auto& [node, l] : hGraphExec->nodes) nodes.push_back(l);
    queue().submit(st, [ctx, nodes = std::move(nodes)] {
        for (const EmuLaunch& l : nodes) execute(ctx, l);   // after a fault, the rest does not run
    });
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS* p) {
    Lock lock(state().mu);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!alive(hGraphExec) || hGraphExec->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    auto it = std::find_if(hGraphExec->nodes.begin(), hGraphExec->nodes.end(),
                           [&](const auto& e) { return e.first == hNode; });
    if (!hNode || it == hGraphExec->nodes.end()) return CUDA_ERROR_INVALID_VALUE;
    if (!p->func) return CUDA_ERROR_INVALID_VALUE;   // CUkernel handles are not modelled
    EmuLaunch l;
    if (CUresult r = make_launch(ctx, p->func, {p->gridDimX, p->gridDimY, p->gridDimZ},
                                 {p->blockDimX, p->blockDimY, p->blockDimZ}, p->sharedMemBytes, p->kernelParams,
                                 p->extra, &l))
        return r;
    l.cooperative = it->second.cooperative;
    it->second = std::move(l);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
    State& s = state();
    Lock lock(s.mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!alive(hGraph) || hGraph->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    for (auto& n : hGraph->nodes) s.live.erase(n.get());
    s.live.erase(hGraph);
    ctx->graphs.erase(hGraph);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
    State& s = state();
    Lock lock(s.mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!alive(hGraphExec) || hGraphExec->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    s.live.erase(hGraphExec);
    ctx->execs.erase(hGraphExec);
    return CUDA_SUCCESS;
}

// ---- cuGetProcAddress: base names to the newest ABI emu exports ----

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
    (void)cudaVersion;
    (void)flags;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    struct Entry { const char* name; void* fn; };
    // #name is the base name; &name expands through cuda.h's #defines to the
    // versioned function (cuMemAlloc -> cuMemAlloc_v2).
#define P(name) {#name, reinterpret_cast<void*>(&name)}
    static const Entry kTable[] = {
        P(cuGetErrorName), P(cuGetErrorString), P(cuInit), P(cuDriverGetVersion), P(cuDeviceGetCount),
        P(cuDeviceGet), P(cuDeviceGetName), P(cuDeviceTotalMem), P(cuDeviceGetAttribute),
        P(cuDevicePrimaryCtxRetain), P(cuDevicePrimaryCtxRelease), P(cuCtxSetCurrent), P(cuCtxGetCurrent),
        P(cuCtxGetDevice), P(cuCtxSynchronize), P(cuMemAlloc), P(cuMemFree), P(cuMemGetInfo),
        P(cuMemAllocHost), P(cuMemFreeHost), P(cuMemHostAlloc), P(cuMemHostGetDevicePointer), P(cuMemcpyHtoD), P(cuMemcpyDtoH), P(cuMemcpyDtoD),
        P(cuMemcpyHtoDAsync), P(cuMemcpyDtoHAsync), P(cuMemsetD8), P(cuMemsetD32), P(cuMemsetD8Async),
        P(cuMemsetD32Async), P(cuModuleLoadDataEx), P(cuModuleLoadData), P(cuModuleUnload),
        P(cuModuleGetFunction), P(cuFuncGetAttribute), P(cuFuncSetAttribute), P(cuFuncGetParamInfo),
        P(cuOccupancyMaxActiveBlocksPerMultiprocessor), P(cuLaunchKernel), P(cuLaunchCooperativeKernel), P(cuLaunchKernelEx),
        P(cuStreamCreate), P(cuStreamDestroy), P(cuStreamSynchronize), P(cuStreamBeginCapture),
        P(cuStreamEndCapture), P(cuStreamIsCapturing), P(cuGraphGetNodes), P(cuGraphNodeGetType),
        P(cuGraphKernelNodeGetParams), P(cuGraphInstantiate), P(cuGraphLaunch),
        P(cuGraphExecKernelNodeSetParams), P(cuGraphDestroy), P(cuGraphExecDestroy), P(cuEventCreate),
        P(cuEventRecord), P(cuEventSynchronize), P(cuEventElapsedTime), P(cuEventDestroy), P(cuGetProcAddress),
    };
#undef P
    for (const Entry& e : kTable)
        if (std::strcmp(e.name, symbol) == 0) {
            *pfn = e.fn;
            if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    *pfn = nullptr;
    if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
