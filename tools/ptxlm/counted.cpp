#include "tools/ptxlm/counted.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/decode_plan.h"
#include "kernels/ptx/ptxas.h"

namespace ptxlm::cli {

namespace {

// The context counted mode generates its kernels for: the depth plus this.
constexpr uint32_t kCountedContext = 64;

// Runs one token with emu's counters written to a temp file; returns the
// counters, the chain and the weight buffers' addresses.
struct Counted {
    nlohmann::json kernels;
    std::vector<cuda::CudaBackend::Launch> launches;
    std::set<uint64_t> weights;
    Schedule schedule = Schedule::Default;
    size_t all_to_all_waits = 0;   // the persistent op table's, per token
    uint32_t blocks = 0;           // the persistent grid on emu
};

// Runs `work` with emu's counters written to a temp file (PTXLM_EMU_STATS is
// read when the primary context is retained and written when it is
// released: `work` makes and destroys its backend); returns them.
template <typename Work>
nlohmann::json with_emu_counters(Work&& work) {
    char path[] = "/tmp/ptxlm-emu-stats-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) throw std::runtime_error("bench: cannot create a file for emu's counters");
    close(fd);
    setenv("PTXLM_EMU_STATS", path, 1);
    try {
        work();
    } catch (...) {
        unsetenv("PTXLM_EMU_STATS");
        std::remove(path);
        throw;
    }
    unsetenv("PTXLM_EMU_STATS");
    std::ifstream in(path);
    nlohmann::json stats;
    try {
        in >> stats;
    } catch (const std::exception& e) {
        std::remove(path);
        throw std::runtime_error(std::string("bench: emu's counters are unreadable: ") + e.what());
    }
    std::remove(path);
    return stats.at("kernels");
}

// The grids are sized for the device's SMs: emu must have the GPU's.
void check_sms(const Backend& b, const GpuSpec& gpu) {
    const int sms = b.device_info().units;
    if (sms != int(gpu.sms))
        throw std::runtime_error("bench: emu has " + std::to_string(sms) + " SMs; counting for " + gpu.name +
                                 " needs its " + std::to_string(gpu.sms) + " (PTXLM_EMU_SMS)");
}

Counted count_one_token(const Model& m, Schedule schedule, GpuArithmetic arith, uint32_t depth, const GpuSpec& gpu,
                        bool prefetch, bool paged) {
    Counted c;
    c.kernels = with_emu_counters([&] {
        cuda::CudaBackend b(m, cuda::Driver::load(), depth + kCountedContext, schedule, arith, nullptr,
                            cuda::GpuTuning{false, prefetch, paged});
        check_sms(b, gpu);
        std::vector<float> logits(b.n_vocab());
        b.fill_kv_for_count(0, depth);
        b.eval(0, depth, logits.data());
        c.launches = b.launches();
        c.schedule = b.schedule();
        c.all_to_all_waits = b.all_to_all_waits();
        c.blocks = b.persistent_blocks();
        for (uint64_t w : b.weight_buffers()) c.weights.insert(w);
    });
    return c;
}

// Registers and spill bytes per kernel from ptxas for sm_90; empty when no
// ptxas is found (the rows then say null).
std::map<std::string, ptx::PtxasFunctionReport> ptxas_reports(const cuda::DecodePlan& plan, bool prefetch) {
    std::map<std::string, ptx::PtxasFunctionReport> out;
    const std::string ptxas = ptx::find_ptxas();
    if (ptxas.empty()) return out;
    ptx::Target t = ptx::Target::parse("sm_90");
    t.prefetch = prefetch;
    for (const ptx::GeneratedKernel& g : cuda::decode_kernels(plan, t)) {
        const ptx::PtxasResult r = ptx::run_ptxas(ptxas, g.ptx, "sm_90");
        if (!r.ok()) throw std::runtime_error("bench: ptxas rejected " + g.name + ":\n" + r.log);
        if (const ptx::PtxasFunctionReport* f = r.find(g.name)) out[g.name] = *f;
    }
    return out;
}

// Blocks of a launch's kernel that fit on one of the GPU's SMs (0: no ptxas
// report).
int blocks_fit(const std::map<std::string, ptx::PtxasFunctionReport>& regs, const GpuSpec& gpu,
               const cuda::CudaBackend::Launch& l) {
    auto r = regs.find(l.kernel);
    return r == regs.end() ? 0
                           : blocks_per_sm(gpu, l.threads, r->second.registers, uint32_t(r->second.smem_bytes) + l.shared_bytes);
}

// Which part of a token each of the chain's kernels serves, by name ("layer"
// kernels run once per layer, "head" is the LM head, the rest run once per
// token).
struct ChainParts {
    std::set<std::string> layer;
    std::string head;
    std::map<std::string, uint64_t> prefetch_bytes;   // per GEMV kernel: what its weight prefetch asks for
    std::map<std::string, uint32_t> columns;          // per GEMV kernel: its input columns
    const char* part(const std::string& kernel) const {
        return kernel == head ? "head" : layer.count(kernel) ? "layer" : "token";
    }
};

ChainParts chain_parts(const cuda::DecodePlan& p) {
    ChainParts c;
    auto add = [&](const kernels::GemvShape& s) {
        std::string name = kernels::gemv_kernel(s).name;
        c.prefetch_bytes[name] = kernels::gemv_prefetch_bytes(s);
        c.columns[name] = s.columns;
        return name;
    };
    for (const cuda::LayerPlan& l : p.layers) {
        for (const kernels::GemvShape* s : {&l.qkv, &l.wo, &l.gate_up, &l.down}) c.layer.insert(add(*s));
        c.layer.insert(kernels::add_norm_kernel(p.add_norm).name);
        if (l.paged)   // the contiguous cache's kernel is not built (it refuses head size 96)
            for (const ptx::GeneratedKernel& g :
                 {kernels::paged_rope_kernel(l.rope), kernels::paged_attention_kernel(l.paged_attention)})
                c.layer.insert(g.name);
        else
            c.layer.insert(kernels::attention_kernel(l.attention).name);
    }
    c.head = add(p.head);
    return c;
}

// A kernel's distinct weight bytes and weight load sectors, from emu's
// per-allocation counters and the allocations that hold weights.
std::pair<uint64_t, uint64_t> weight_traffic(const nlohmann::json& k, const std::set<uint64_t>& weights) {
    uint64_t unique = 0, sectors = 0;
    for (const nlohmann::json& a : k.at("allocations"))
        if (weights.count(a.at("base").get<uint64_t>())) {
            unique += a.at("unique").get<uint64_t>();
            sectors += a.at("load_sectors").get<uint64_t>();
        }
    return {unique, sectors};
}

// A kernel's shared-memory wavefronts, loads and stores together, and their
// ideal (emu's bank model, emu/shared_banks.h: counted, not measured).
struct Wavefronts {
    uint64_t actual = 0, ideal = 0;
};

Wavefronts shared_wavefronts(const nlohmann::json& k) {
    return {k.at("shared_load_wavefronts").get<uint64_t>() + k.at("shared_store_wavefronts").get<uint64_t>(),
            k.at("shared_load_ideal_wavefronts").get<uint64_t>() + k.at("shared_store_ideal_wavefronts").get<uint64_t>()};
}

// Actual over ideal; null when nothing touched shared memory.
nlohmann::json wavefront_ratio(const Wavefronts& w) {
    return w.ideal ? nlohmann::json(double(w.actual) / double(w.ideal)) : nlohmann::json(nullptr);
}

// What emu counted of a kernel's instructions and loads in flight, for its row.
void add_work_counts(nlohmann::json& row, const nlohmann::json& k, uint64_t weight_bytes) {
    row["warp_instructions"] = k.at("warp_instructions");
    row["instructions_by_class"] = k.at("instructions_by_class");
    row["instructions_per_weight_byte"] =
        weight_bytes ? nlohmann::json(k.at("warp_instructions").get<double>() / double(weight_bytes)) : nlohmann::json(nullptr);
    const uint64_t waits = k.at("inflight_batches").get<uint64_t>();
    row["load_waits"] = waits;
    row["in_flight_bytes_per_warp"] = waits ? nlohmann::json(k.at("inflight_bytes_sum").get<double>() / double(waits))
                                            : nlohmann::json(nullptr);
    row["in_flight_bytes_per_warp_max"] = k.at("inflight_bytes_max");
    row["dependent_load_chain"] = k.at("dependent_load_chain_max");
}

// The limits of one launch on `gpu` (engine/projection.h), for its row.
nlohmann::json terms_json(const LaunchTerms& t) {
    nlohmann::json j = {{"dram", t.dram},       {"start", t.start},   {"prologue", t.prologue},
                        {"latency", t.latency}, {"issue", t.issue},   {"shared", t.shared}};
    for (size_t i = 0; i < kPipes; ++i) j[kPipeNames[i]] = t.pipe[i];
    return j;
}

// The "projected" object of a counted token: a Projection on `gpu`, labelled.
nlohmann::json projected_json(const Projection& p, const GpuSpec& gpu, Schedule schedule, const std::string& label) {
    return {{"label", label},
            {"gpu", gpu.name},
            {"description", gpu.description},
            {"sms", gpu.sms},
            {"bandwidth_gbs", gpu.bandwidth_gbs},
            {"schedule", schedule_name(schedule)},
            {"us_per_token", p.us_per_token},
            {"clock_ghz", gpu.clock_ghz},
            {"achievable_bandwidth", gpu.achievable},
            {"dram_latency_us", gpu.dram_latency_us},
            {"launch_us", p.launch_us + p.sync_us},
            {"sync_us", p.sync_us},
            {"work_us", p.work_us},
            {"memory_us", p.memory_us},
            {"start_us", p.start_us},
            {"bound_us", p.bound_us},
            {"tokens_per_s", p.tokens_per_s},
            {"bandwidth_share", p.bandwidth_share}};
}

// The persistent schedule: one kernel runs every op, so emu's counters are
// one row; what it adds is the waiting: grid-wide syncs, counter waits and
// the instructions spent spinning.
nlohmann::json counted_persistent(const Model& m, const Counted& c, const GpuSpec& gpu, uint32_t depth, bool q,
                                  bool prefetch, bool paged) {
    const uint32_t ctx = depth + kCountedContext;
    const nlohmann::json& k = c.kernels.at("persistent_decoder");
    const uint64_t requested = 32 * (k.at("global_load_sectors").get<uint64_t>() + k.at("global_store_sectors").get<uint64_t>()) +
                               k.at("global_atomic_bytes").get<uint64_t>();
    const uint64_t unique = k.at("unique_global_bytes").get<uint64_t>();
    const auto [w_unique, w_sectors] = weight_traffic(k, c.weights);
    // All-to-all waits inside the layers (the rest: the embedding's and the
    // LM head's gathers).
    const cuda::DecodePlan plan = cuda::decode_plan(m, ctx, q, gpu.sms, paged, cuda::gemv_warps(m, Schedule::Persistent));
    const ChainParts parts = chain_parts(plan);
    uint64_t layer_a2a = 0;
    for (const cuda::CudaBackend::Launch& l : c.launches)
        if (parts.layer.count(l.kernel)) layer_a2a += l.all_to_all_waits;
    ptx::Target t = ptx::Target::parse("sm_90");
    t.prefetch = prefetch;
    const ptx::GeneratedKernel g =
        kernels::persistent_kernel(cuda::decode_op_kinds(plan), t,
                                   cuda::state_layout(paged))
            .kernel;
    nlohmann::json row = {{"kernel", g.name}, {"part", "token"}, {"launches", k.at("launches")}, {"blocks", nullptr},
                          {"threads", g.geometry.block.x}, {"dynamic_shared_bytes", g.geometry.shared_bytes},
                          {"unique_bytes", unique}, {"requested_bytes", requested}, {"weight_bytes", w_unique},
                          {"weight_sector_efficiency", w_sectors ? nlohmann::json(double(w_unique) / (32.0 * double(w_sectors)))
                                                                  : nlohmann::json(nullptr)},
                          {"registers", nullptr}, {"spill_bytes", nullptr}, {"blocks_per_sm", nullptr},
                          {"resident_blocks_per_sm", nullptr}, {"in_flight_bytes_per_sm", nullptr}};
    const Wavefronts wf = shared_wavefronts(k);
    row["shared_wavefronts"] = wf.actual;
    row["shared_ideal_wavefronts"] = wf.ideal;
    row["shared_wavefront_ratio"] = wavefront_ratio(wf);
    add_work_counts(row, k, w_unique);
    int fit = 1;                          // without ptxas: the kernel's .minnctapersm
    uint64_t grid = uint64_t(gpu.sms);   // one block per SM
    const std::string ptxas = ptx::find_ptxas();
    if (!ptxas.empty()) {
        const ptx::PtxasResult r = ptx::run_ptxas(ptxas, g.ptx, "sm_90");
        if (!r.ok()) throw std::runtime_error("bench: ptxas rejected " + g.name + ":\n" + r.log);
        if (const ptx::PtxasFunctionReport* f = r.find(g.name)) {
            row["registers"] = f->registers;
            row["spill_bytes"] = f->spill_store_bytes + f->spill_load_bytes;
            fit = blocks_per_sm(gpu, g.geometry.block.x, f->registers, uint32_t(f->smem_bytes) + g.geometry.shared_bytes);
            row["blocks_per_sm"] = fit;
            row["resident_blocks_per_sm"] = fit;
            grid = uint64_t(std::max(fit, 1)) * uint64_t(gpu.sms);
        }
    }
    row["blocks"] = grid;
    const uint64_t syncs = k.at("grid_syncs").get<uint64_t>();
    // emu runs the persistent grid with its own block count; the work per
    // token is the same on any grid, spread over this one.
    // Spinning is emu's artefact (its blocks run one after another), not work.
    std::vector<LaunchCost> costs = {counted_launch_cost(k, grid, g.geometry.block.x, std::max(fit, 1))};
    costs[0].warp_instructions -= k.at("spin_instructions").get<double>() / k.at("launches").get<double>();
    // Each op starts after its handoff as a launch of the chain does: it
    // streams from an idle DRAM, after a prologue emu counts only for the
    // first op (waits before a warp's first barrier); assumed one round trip
    // per warp per op, the input's read (the chain's GEMVs count 0.5 to 2).
    const double ops = double(c.launches.size());
    costs[0].fills = uint32_t(ops);
    costs[0].prologue_waits = ops * double(grid) * double((g.geometry.block.x + 31) / 32);
    // With --gpu-prefetch each GEMV op's blocks prefetch its first weights
    // before they wait at its handoff (a kGridSyncUs, more than a round
    // trip, ahead of its first loads): they hide the op's fill and prologue
    // where the bytes cover them, each op's bytes capped at what its own
    // start takes. The other way is projected from the same counts.
    const double bytes_per_us = gpu.bandwidth_gbs * 1e3 * gpu.achievable;
    const double op_start_bytes = 2 * gpu.dram_latency_us * bytes_per_us;   // a fill and a one-wait prologue
    uint64_t planned = 0, hiding = 0;
    for (const cuda::CudaBackend::Launch& l : c.launches)
        if (auto pf = parts.prefetch_bytes.find(l.kernel); pf != parts.prefetch_bytes.end()) {
            planned += pf->second;
            hiding += std::min<uint64_t>(pf->second, uint64_t(op_start_bytes));
        }
    costs[0].prefetch_ahead = true;
    costs[0].prefetch_bytes = prefetch ? hiding : 0;
    std::vector<LaunchCost> other = costs;
    other[0].prefetch_bytes = prefetch ? 0 : hiding;
    const LaunchTerms terms = launch_terms(costs[0], gpu);
    row["bound_by"] = terms.bound_by();
    row["terms_us"] = terms_json(terms);
    row["projected_us"] = terms.bound_us();
    // Every op waits for (part of) the op before it: the token's critical
    // path crosses one release -> acquire handoff per op, each assumed to
    // cost what a grid-wide sync does. Ops do not overlap in this model.
    const uint64_t handoffs = c.launches.size();
    const Projection p = project(costs, 1, gpu, LaunchMode::Persistent, handoffs);
    const PassTraffic tr = pass_traffic(m);
    const double token_bytes = double(tr.weights + tr.lm_head + tr.embd_row + kv_read_bytes(m, depth, 2));
    return {{"tokens", 1},
            {"depth", depth},
            {"n_layer", m.layers.size()},
            {"n_vocab", m.n_vocab},
            {"launches", k.at("launches")},
            {"ops", c.launches.size()},
            {"all_to_all_waits", c.all_to_all_waits},
            {"all_to_all_waits_per_layer", double(layer_a2a) / double(m.layers.size())},
            {"grid_syncs", syncs},
            {"grid_syncs_per_layer", double(syncs) / double(m.layers.size())},
            {"emu_blocks", c.blocks},
            {"spin_waits", k.at("spin_waits")},
            {"spin_instructions", k.at("spin_instructions")},
            {"warp_instructions", k.at("warp_instructions")},
            {"token_bytes", token_bytes},
            {"unique_bytes", unique},
            {"requested_bytes", requested},
            {"unique_over_weights", double(unique) / token_bytes},
            {"requested_over_weights", double(requested) / token_bytes},
            {"weight_bytes", w_unique},
            {"sector_efficiency", w_sectors ? double(w_unique) / (32.0 * double(w_sectors)) : 0.0},
            {"shared_wavefronts", wf.actual},
            {"shared_ideal_wavefronts", wf.ideal},
            {"shared_wavefront_ratio", wavefront_ratio(wf)},
            {"launches_below_sm_count", 0},
            {"registers_from", ptxas.empty() ? "no ptxas found" : "ptxas sm_90"},
            {"kernels", nlohmann::json::array({row})},
            {"handoffs", handoffs},
            {"projected", projected_json(p, gpu, c.schedule,
                                         std::string("projected from emu's counts") +
                                             (prefetch ? " with each GEMV op prefetching its first weights before its "
                                                         "handoff wait (--gpu-prefetch)"
                                                       : "") +
                                             ", not measured; assumes 1 us per op-to-op handoff, ops not overlapping")},
            // emu's count of the prefetches and what the GEMVs' plans ask for
            // (equal when the ops prefetch as planned; 0 counted without).
            {"prefetch_bytes", k.at("prefetch_bytes")},
            {"prefetch_bytes_planned", planned},
            {"projected_prefetch",
             projected_json(project(other, 1, gpu, LaunchMode::Persistent, handoffs), gpu, c.schedule,
                            prefetch ? "projected from emu's counts without the weight prefetch, not measured"
                                     : "projected from emu's counts with each GEMV op prefetching its first weights "
                                       "before its handoff wait (--gpu-prefetch), not measured")},
            // One launch: no programmatic launches.
            {"projected_pdl", nullptr}};
}

}  // namespace

nlohmann::json counted_token(const Model& m, Schedule schedule, GpuArithmetic path, const GpuSpec& gpu, uint32_t depth,
                             bool prefetch, bool paged_kv) {
    const bool q = cuda::quantized_gemvs(path);
    const Counted c = count_one_token(m, schedule, path, depth, gpu, prefetch, paged_kv);
    if (c.schedule == Schedule::Persistent) return counted_persistent(m, c, gpu, depth, q, prefetch, paged_kv);
    const uint32_t ctx = depth + kCountedContext;
    const nlohmann::json& ks = c.kernels;
    const cuda::DecodePlan plan = cuda::decode_plan(m, ctx, q, gpu.sms, paged_kv, cuda::gemv_warps(m, c.schedule));
    const std::map<std::string, ptx::PtxasFunctionReport> regs = ptxas_reports(plan, prefetch);
    const ChainParts parts = chain_parts(plan);

    // Requested: what reaches L2, the 32-byte sectors each warp-level access
    // touches (plus atomics); unique: distinct bytes, summed over kernels.
    uint64_t n_launch = 0, requested = 0, unique = 0, weight_unique = 0, weight_sectors = 0;
    Wavefronts wavefronts;
    nlohmann::json rows = nlohmann::json::array();
    std::set<std::string> seen;
    std::vector<LaunchCost> costs;
    uint64_t below = 0;
    std::map<std::string, std::pair<double, LaunchTerms>> kernel_us;   // per kernel: µs summed over its launches, last terms
    // The other way: without the prefetches emu counted, or with what each
    // GEMV's would ask for (kernels::gemv_prefetch_bytes).
    std::vector<LaunchCost> other;
    std::map<std::string, double> kernel_us_other;
    // Each kernel as an op of the persistent decoder under --gpu-prefetch
    // costs it: a GEMV's prefetch issued before its handoff wait, a round
    // trip or more ahead of its first loads (engine/projection.h), so it
    // hides the fill too (bench/efficiency scales the persistent schedule
    // from these rows).
    std::map<std::string, double> kernel_us_ahead;
    for (const cuda::CudaBackend::Launch& l : c.launches) {
        const LaunchCost w = counted_launch_cost(ks.at(l.kernel), l.blocks, l.threads, blocks_fit(regs, gpu, l));
        const LaunchTerms t = launch_terms(w, gpu);
        auto& ku = kernel_us[l.kernel];
        ku.first += t.bound_us();
        ku.second = t;
        costs.push_back(w);
        other.push_back(w);
        const auto pf = parts.prefetch_bytes.find(l.kernel);
        other.back().prefetch_bytes = prefetch || pf == parts.prefetch_bytes.end() ? 0 : pf->second;
        kernel_us_other[l.kernel] += launch_terms(other.back(), gpu).bound_us();
        LaunchCost ahead = w;
        ahead.prefetch_bytes = pf == parts.prefetch_bytes.end() ? 0 : pf->second;
        ahead.prefetch_ahead = true;
        kernel_us_ahead[l.kernel] += launch_terms(ahead, gpu).bound_us();
        below += l.blocks < uint64_t(gpu.sms);
    }
    for (const cuda::CudaBackend::Launch& l : c.launches) {
        const nlohmann::json& k = ks.at(l.kernel);
        const uint64_t launches = k.at("launches").get<uint64_t>();
        if (!seen.insert(l.kernel).second) continue;

        const uint64_t req = 32 * (k.at("global_load_sectors").get<uint64_t>() +
                                   k.at("global_store_sectors").get<uint64_t>()) +
                             k.at("global_atomic_bytes").get<uint64_t>();
        const auto [w_unique, w_sectors] = weight_traffic(k, c.weights);
        n_launch += launches;
        requested += req;
        unique += k.at("unique_global_bytes").get<uint64_t>();
        weight_unique += w_unique;
        weight_sectors += w_sectors;
        const Wavefronts wf = shared_wavefronts(k);
        wavefronts.actual += wf.actual;
        wavefronts.ideal += wf.ideal;

        nlohmann::json row = {{"kernel", l.kernel},
                              {"part", parts.part(l.kernel)},
                              {"launches", launches},
                              {"blocks", l.blocks},
                              {"threads", l.threads},
                              {"dynamic_shared_bytes", l.shared_bytes},
                              {"unique_bytes", k.at("unique_global_bytes").get<uint64_t>()},
                              {"requested_bytes", req},
                              {"weight_bytes", w_unique},
                              {"weight_sector_efficiency", nullptr},
                              {"shared_wavefronts", wf.actual},
                              {"shared_ideal_wavefronts", wf.ideal},
                              {"shared_wavefront_ratio", wavefront_ratio(wf)},
                              {"registers", nullptr},
                              {"spill_bytes", nullptr},
                              {"blocks_per_sm", nullptr},
                              {"resident_blocks_per_sm", nullptr},
                              {"in_flight_bytes_per_sm", nullptr}};
        if (w_sectors) row["weight_sector_efficiency"] = double(w_unique) / (32.0 * double(w_sectors));
        add_work_counts(row, k, w_unique);
        const auto& [us, terms] = kernel_us.at(l.kernel);
        row["projected_us"] = us;   // all its launches of the token
        row[prefetch ? "projected_us_without_prefetch" : "projected_us_prefetch"] = kernel_us_other.at(l.kernel);
        row["projected_us_prefetch_ahead"] = kernel_us_ahead.at(l.kernel);
        row["bound_by"] = terms.bound_by();
        row["terms_us"] = terms_json(terms);   // one launch
        auto r = regs.find(l.kernel);
        if (r != regs.end()) {
            const ptx::PtxasFunctionReport& f = r->second;
            row["registers"] = f.registers;
            row["spill_bytes"] = f.spill_store_bytes + f.spill_load_bytes;
            const int fit = blocks_fit(regs, gpu, l);
            row["blocks_per_sm"] = fit;
            // Blocks an SM holds at once during this launch: its share of the
            // grid, at most what fits; each warp's bytes in flight at its
            // waits, as emu counted them.
            const uint64_t share = (l.blocks + gpu.sms - 1) / uint64_t(gpu.sms);
            const uint64_t resident = std::min<uint64_t>(uint64_t(fit), share);
            row["resident_blocks_per_sm"] = resident;
            if (!row["in_flight_bytes_per_warp"].is_null())
                row["in_flight_bytes_per_sm"] =
                    row["in_flight_bytes_per_warp"].get<double>() * double(resident * ((l.threads + 31) / 32));
        }
        rows.push_back(row);
    }
    if (n_launch != c.launches.size())
        throw std::runtime_error("bench: emu counted " + std::to_string(n_launch) + " launches for a chain of " +
                                 std::to_string(c.launches.size()));
    const LaunchMode mode = c.schedule == Schedule::Graph ? LaunchMode::Graph : LaunchMode::Stream;
    const Projection p = project(costs, 1, gpu, mode);
    const PassTraffic t = pass_traffic(m);
    const double token_bytes = double(t.weights + t.lm_head + t.embd_row + kv_read_bytes(m, depth, 2));
    return {{"tokens", 1},
            {"depth", depth},
            {"n_layer", m.layers.size()},
            {"n_vocab", m.n_vocab},
            {"launches", n_launch},
            {"token_bytes", token_bytes},
            {"unique_bytes", unique},
            {"requested_bytes", requested},
            {"unique_over_weights", double(unique) / token_bytes},
            {"requested_over_weights", double(requested) / token_bytes},
            {"weight_bytes", weight_unique},
            {"sector_efficiency", weight_sectors ? double(weight_unique) / (32.0 * double(weight_sectors)) : 0.0},
            {"shared_wavefronts", wavefronts.actual},
            {"shared_ideal_wavefronts", wavefronts.ideal},
            {"shared_wavefront_ratio", wavefront_ratio(wavefronts)},
            {"launches_below_sm_count", below},
            {"registers_from", regs.empty() ? "no ptxas found" : "ptxas sm_90"},
            {"kernels", rows},
            {"projected", projected_json(p, gpu, c.schedule,
                                         prefetch ? "projected from emu's counts with the GEMVs prefetching their first "
                                                    "weights (--gpu-prefetch), not measured"
                                                  : "projected from emu's counts, not measured")},
            {"projected_prefetch",
             projected_json(project(other, 1, gpu, mode), gpu, c.schedule,
                            prefetch ? "projected from emu's counts without the weight prefetch, not measured"
                                     : "projected from emu's counts with each GEMV prefetching a 128-byte line per "
                                       "thread of its first weights (--gpu-prefetch), not measured")},
            // The same chain launched programmatically (--gpu-pdl): each launch's
            // assumed overhead instead of a graph node's (engine/projection.h).
            {"projected_pdl", c.schedule == Schedule::Persistent
                                  ? nlohmann::json(nullptr)
                                  : projected_json(project(costs, 1, gpu, LaunchMode::GraphPdl), gpu, c.schedule,
                                                   "projected from emu's counts with programmatic dependent launches "
                                                   "(--gpu-pdl, 0.6 us per launch assumed), not measured")}};
}

nlohmann::json counted_step(const Model& m, GpuArithmetic path, const GpuSpec& gpu, uint32_t depth, uint32_t batch,
                            bool prompt) {
    const uint32_t ctx = depth + kCountedContext, per_seq = cuda::kv_pages(ctx), seqs = prompt ? 1 : batch;
    if (batch == 0 || batch > cuda::CudaBackend::kMaxStep)
        throw std::invalid_argument("bench: a batch step of " + std::to_string(batch) + " tokens (1 to " +
                                    std::to_string(cuda::CudaBackend::kMaxStep) + ")");
    Counted c;
    c.kernels = with_emu_counters([&] {
        cuda::CudaBackend b(m, cuda::Driver::load(), ctx, Schedule::Graph, path, nullptr, cuda::GpuTuning{},
                            KvPages{per_seq * seqs, cuda::kKvPageSize});
        check_sms(b, gpu);
        // Each sequence on pages of its own (their K/V zero: the counts do
        // not depend on the values): one decode token each at `depth`, or
        // one sequence's `batch` prompt tokens from `depth` on.
        // Logits for each decode token, or the chunk's last.
        std::vector<std::vector<uint32_t>> tables(seqs, std::vector<uint32_t>(per_seq));
        const std::vector<TokenId> tokens(batch, 0);
        std::vector<float> logits(size_t(seqs) * b.n_vocab());
        std::vector<SeqStep> steps;
        for (uint32_t i = 0; i < seqs; ++i) {
            for (uint32_t j = 0; j < per_seq; ++j) tables[i][j] = i * per_seq + j;
            steps.push_back({tables[i], depth, {&tokens[i], prompt ? batch : 1}, logits.data() + size_t(i) * b.n_vocab(), 1});
        }
        b.step(steps);
        c.launches = b.step_launches(batch, seqs);
        for (uint64_t w : b.weight_buffers()) c.weights.insert(w);
    });
    // Registers from ptxas (sm_90) for the step's kernels; blocks per SM
    // from them. Each kernel's part of the step, and its GEMV columns.
    const cuda::DecodePlan plan = cuda::step_plan(cuda::decode_plan(m, ctx, cuda::quantized_gemvs(path), gpu.sms, true), batch);
    const std::map<std::string, ptx::PtxasFunctionReport> regs = ptxas_reports(plan, false);
    const ChainParts parts = chain_parts(plan);
    std::vector<LaunchCost> costs;
    std::map<std::string, nlohmann::json> rows;   // per kernel
    uint64_t weight_requested = 0, weight_read = 0, requested = 0;
    std::set<std::string> seen;
    for (const cuda::CudaBackend::Launch& l : c.launches) {
        const nlohmann::json& k = c.kernels.at(l.kernel);
        auto r = regs.find(l.kernel);
        costs.push_back(counted_launch_cost(k, l.blocks, l.threads, blocks_fit(regs, gpu, l)));
        const LaunchTerms t = launch_terms(costs.back(), gpu);
        nlohmann::json& row = rows[l.kernel];
        if (row.is_null())
            row = {{"kernel", l.kernel}, {"part", parts.part(l.kernel)}, {"launches", 0},
                   {"blocks", l.blocks}, {"threads", l.threads},
                   {"registers", r == regs.end() ? nlohmann::json(nullptr) : nlohmann::json(r->second.registers)},
                   {"projected_us", 0.0}};
        row["launches"] = row["launches"].get<uint64_t>() + 1;
        row["projected_us"] = row["projected_us"].get<double>() + t.bound_us();
        row["bound_by"] = t.bound_by();
        row["terms_us"] = terms_json(t);   // one launch
        if (!seen.insert(l.kernel).second) continue;
        // emu's counters are per kernel, summed over its launches in the
        // step; its distinct weight bytes count a matrix once however often
        // the step reads it (T / columns launches per matrix).
        const auto [w_unique, w_sectors] = weight_traffic(k, c.weights);
        weight_requested += 32 * w_sectors;
        const auto cols = parts.columns.find(l.kernel);
        const uint64_t w_read = w_unique * (cols == parts.columns.end() ? 1 : batch / cols->second);
        weight_read += w_read;
        row["weight_bytes"] = w_unique;
        row["weight_bytes_read"] = w_read;
        row["warp_instructions"] = k.at("warp_instructions");
        row["instructions_by_class"] = k.at("instructions_by_class");
        row["unique_bytes"] = k.at("unique_global_bytes");
        requested += 32 * (k.at("global_load_sectors").get<uint64_t>() + k.at("global_store_sectors").get<uint64_t>()) +
                     k.at("global_atomic_bytes").get<uint64_t>();
    }
    const Projection p = project(costs, batch, gpu, LaunchMode::Graph);
    const PassTraffic tr = pass_traffic(m);
    const double one_pass = double(tr.weights + tr.lm_head);
    nlohmann::json kernels = nlohmann::json::array();
    for (auto& [name, row] : rows) kernels.push_back(row);
    return {{"batch", batch},
            {"prompt", prompt},
            {"depth", depth},
            {"n_layer", m.layers.size()},
            {"n_vocab", m.n_vocab},
            {"launches", c.launches.size()},
            {"weight_bytes_one_pass", one_pass},
            {"weight_bytes_requested", weight_requested},   // 32-byte sectors the weight loads touched
            {"weight_bytes_read", weight_read},             // distinct bytes times the launches that read them
            {"weight_passes", double(weight_read) / one_pass},
            {"requested_bytes", requested},
            {"kv_bytes", double(kv_read_bytes(m, depth, 2)) * batch},   // decode tokens; a chunk's rows read up to depth + t
            {"kernels", kernels},
            {"projected", projected_json(p, gpu, Schedule::Graph,
                                         "projected from emu's counts of one batch step of " + std::to_string(batch) +
                                             (prompt ? " prompt tokens of one sequence" : " decode tokens") +
                                             " (graph schedule, paged KV), not measured")}};
}

std::string counted_kernel_table(const nlohmann::json& counted) {
    auto cell = [](const nlohmann::json& v, const char* fmt, double scale = 1.0) {
        if (v.is_null()) return std::string("n/a");
        char buf[64];
        std::snprintf(buf, sizeof buf, fmt, v.get<double>() * scale);
        return std::string(buf);
    };
    std::string out =
        "| kernel | launches | blocks | threads | regs | spill B | blocks/SM fit | unique MB | weight sector eff. | "
        "shared wavefronts / ideal | warp instr. / weight B | cvt instr. | waits / warp | in flight / warp B | "
        "in flight / SM KiB | load chain | projected us | bound by |\n"
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n";
    for (const nlohmann::json& r : counted.at("kernels")) {
        const double warps = r.at("blocks").get<double>() * std::ceil(r.at("threads").get<double>() / 32) *
                             r.at("launches").get<double>();
        out += "| " + r.at("kernel").get<std::string>() + " | " + cell(r.at("launches"), "%.0f") + " | " +
               cell(r.at("blocks"), "%.0f") + " | " + cell(r.at("threads"), "%.0f") + " | " +
               cell(r.at("registers"), "%.0f") + " | " + cell(r.at("spill_bytes"), "%.0f") + " | " +
               cell(r.at("blocks_per_sm"), "%.0f") + " | " + cell(r.at("unique_bytes"), "%.2f", 1e-6) + " | " +
               cell(r.at("weight_sector_efficiency"), "%.1f%%", 100.0) + " | " +
               cell(r.at("shared_wavefront_ratio"), "%.2f") + " | " + cell(r.at("instructions_per_weight_byte"), "%.3f") +
               " | " + cell(r.at("instructions_by_class").at("cvt"), "%.0f") + " | " +
               cell(nlohmann::json(r.at("load_waits").get<double>() / warps), "%.1f") + " | " +
               cell(r.at("in_flight_bytes_per_warp"), "%.0f") + " | " +
               cell(r.at("in_flight_bytes_per_sm"), "%.1f", 1.0 / 1024) + " | " +
               cell(r.at("dependent_load_chain"), "%.0f") + " | " + cell(r.at("projected_us"), "%.2f") + " | " +
               r.at("bound_by").get<std::string>() + " |\n";
    }
    return out;
}

}  // namespace ptxlm::cli
