#include "engine/step_backend.h"

#include <stdexcept>
#include <string>

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/driver.h"
#include "engine/model.h"

namespace ptxlm {

uint32_t check_seq_step(const SeqStep& s, uint32_t before, uint32_t max_tokens, uint32_t n_vocab, uint32_t n_ctx,
                        KvPages pages) {
    const uint32_t n = static_cast<uint32_t>(s.tokens.size());
    if (uint64_t(before) + n > max_tokens)
        throw std::invalid_argument("step: more than " + std::to_string(max_tokens) + " tokens");
    if (s.logits ? s.n_logits == 0 || s.n_logits > n : s.n_logits != 0) throw std::invalid_argument("step: bad n_logits");
    if (s.argmax && n == 0) throw std::invalid_argument("step: an argmax without a token");
    if (n == 0) return 0;
    for (TokenId token : s.tokens)
        if (token < 0 || uint32_t(token) >= n_vocab)
            throw ModelError("token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                             std::to_string(n_vocab - 1) + ")");
    if (uint64_t(s.pos) + n > n_ctx)
        throw ModelError("position " + std::to_string(uint64_t(s.pos) + n - 1) + " is past the context of " +
                         std::to_string(n_ctx) + " tokens");
    // Attention reads every position up to the last token's.
    const uint32_t last_page = (s.pos + n - 1) / pages.page_size;
    if (last_page >= s.pages.size())
        throw std::invalid_argument("step: a page table of " + std::to_string(s.pages.size()) +
                                    " pages does not reach position " + std::to_string(s.pos + n - 1));
    for (uint32_t i = 0; i <= last_page; ++i)
        if (s.pages[i] >= pages.n_pages)
            throw std::invalid_argument("step: page " + std::to_string(s.pages[i]) + " of the table is past the " +
                                        std::to_string(pages.n_pages) + " pages of the KV storage");
    return n;
}

void check_step_options(Schedule s, bool contiguous_kv) {
    if (s == Schedule::Persistent)
        throw std::invalid_argument("the persistent decoder serves one sequence per launch; sequences step together "
                                    "under --schedule graph (the default) or chain");
    if (contiguous_kv)
        throw std::invalid_argument("--gpu-contiguous-kv: sequences step together on paged KV only (the default)");
}

MakeStepBackend make_step_backend(const Model& m, const Backend& like, const BackendOptions& opt) {
    if (const auto* c = dynamic_cast<const cpu::CpuBackend*>(&like)) {
        const uint32_t n_ctx = c->n_ctx();
        const KvType kv = c->device_info().kv_bytes_per_el == 4 ? KvType::F32 : KvType::F16;
        const cpu::Isa isa = c->isa();
        const cpu::CpuPath path = c->path();
        std::shared_ptr<cpu::ThreadPool> pool = opt.cpu_pool;
        const int threads = opt.threads > 0 ? opt.threads : cpu::ThreadPool::default_threads();
        return [&m, n_ctx, kv, isa, path, pool, threads](KvPages pages) {
            auto b = std::make_unique<cpu::CpuBackend>(m, n_ctx, kv, pool ? pool : std::make_shared<cpu::ThreadPool>(threads),
                                                       pages);
            b->set_isa(isa);
            b->set_path(path);
            b->prepare();
            return b;
        };
    }
    const auto& g = dynamic_cast<const cuda::CudaBackend&>(like);
    const Schedule sched = g.schedule();
    const cuda::GpuTuning tuning = g.tuning();
    check_step_options(sched, !tuning.paged_kv);
    const uint32_t n_ctx = g.n_ctx();
    const GpuArithmetic path = g.arithmetic();
    return [&m, n_ctx, sched, path, tuning](KvPages pages) {
        return std::make_unique<cuda::CudaBackend>(m, cuda::Driver::load(), n_ctx, sched, path, nullptr, tuning, pages);
    };
}

}  // namespace ptxlm
