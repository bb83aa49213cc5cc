#include "server/metrics.h"

#include <cstdio>

namespace ptxlm::server {

void RequestCounter::count(const std::string& endpoint, int status) {
    std::lock_guard lk(mu_);
    ++counts_[{endpoint, status}];
}

std::map<std::pair<std::string, int>, uint64_t> RequestCounter::snapshot() const {
    std::lock_guard lk(mu_);
    return counts_;
}

namespace {

struct Writer {
    std::string out;
    void head(const char* name, const char* type, const char* help) {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    }
    void value(const std::string& series, double v) {
        char buf[64];
        std::snprintf(buf, sizeof buf, " %.17g\n", v);
        out += series + buf;
    }
    void metric(const char* name, const char* type, const char* help, double v) {
        head(name, type, help);
        value(name, v);
    }
};

}  // namespace

std::string prometheus_text(const SchedulerStats& s, const std::map<std::pair<std::string, int>, uint64_t>& requests,
                            int parallel, int queue_capacity, bool ready) {
    Writer w;
    w.head("ptxlm_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
    for (const auto& [key, n] : requests)
        w.value("ptxlm_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"}",
                double(n));
    w.metric("ptxlm_prompt_tokens_total", "counter", "Prompt tokens evaluated (reused cached prefixes excluded).",
             double(s.prompt_tokens));
    w.metric("ptxlm_prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's KV cache.",
             double(s.prompt_tokens_cached));
    w.metric("ptxlm_prompt_seconds_total", "counter", "Time spent evaluating prompts.", s.prompt_seconds);
    w.metric("ptxlm_generated_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
    w.metric("ptxlm_decode_seconds_total", "counter", "Engine time spent in generation steps (all slots).",
             s.decode_seconds);
    w.metric("ptxlm_generated_tokens_per_second", "gauge",
             "Generated tokens per second of engine decode time, all slots together, since start.",
             s.decode_seconds > 0 ? double(s.generated_tokens) / s.decode_seconds : 0.0);
    w.metric("ptxlm_queue_depth", "gauge", "Requests admitted and waiting for a slot.", double(s.queued));
    w.metric("ptxlm_queue_capacity", "gauge", "Requests that may wait for a slot (--queue).", double(queue_capacity));
    w.metric("ptxlm_slots_active", "gauge", "Slots generating for a request.", double(s.active));
    w.metric("ptxlm_slots_total", "gauge", "Slots (--parallel).", double(parallel));
    w.metric("ptxlm_ready", "gauge", "1 when the model is loaded and requests are served.", ready ? 1.0 : 0.0);
    w.head("ptxlm_kv_cache_tokens", "gauge", "Positions a slot's KV cache holds.");
    for (size_t i = 0; i < s.slots.size(); ++i)
        w.value("ptxlm_kv_cache_tokens{slot=\"" + std::to_string(i) + "\"}", double(s.slots[i].kv_tokens));
    w.head("ptxlm_kv_cache_usage_ratio", "gauge", "Share of a slot's context its KV cache holds.");
    for (size_t i = 0; i < s.slots.size(); ++i)
        w.value("ptxlm_kv_cache_usage_ratio{slot=\"" + std::to_string(i) + "\"}",
                s.slots[i].n_ctx ? double(s.slots[i].kv_tokens) / s.slots[i].n_ctx : 0.0);
    if (s.batched) {
        w.metric("ptxlm_kv_pages_total", "gauge", "Pages of the slots' shared KV pool.", double(s.kv_pages));
        w.metric("ptxlm_kv_page_positions", "gauge", "Positions a KV page holds (of every layer).", double(s.kv_page_size));
        w.head("ptxlm_kv_pages", "gauge", "KV pages by state: used (held by a slot), cached (findable, held by none), free.");
        w.value("ptxlm_kv_pages{state=\"used\"}", double(s.kv_pages_used));
        w.value("ptxlm_kv_pages{state=\"cached\"}", double(s.kv_pages_cached));
        w.value("ptxlm_kv_pages{state=\"free\"}", double(s.kv_pages_free));
        w.metric("ptxlm_batch_steps_total", "counter", "Batched steps (every running slot's next token, prompt chunks).",
                 double(s.steps));
        w.metric("ptxlm_batch_step_tokens_total", "counter", "Tokens the batched steps evaluated.", double(s.step_tokens));
        w.head("ptxlm_batch_step_sequences", "histogram", "Batched steps by the sequences they evaluated.");
        uint64_t below = 0;
        for (size_t i = 0; i < s.step_sequences.size(); ++i) {
            below += s.step_sequences[i];
            w.value("ptxlm_batch_step_sequences_bucket{le=\"" + std::to_string(SchedulerStats::kStepBuckets[i]) + "\"}",
                    double(below));
        }
        w.value("ptxlm_batch_step_sequences_bucket{le=\"+Inf\"}", double(below));
        w.value("ptxlm_batch_step_sequences_count", double(below));
        w.head("ptxlm_sequences", "gauge",
               "Sequences with work by state: running (holding their KV pages), waiting (preempted for pages).");
        w.value("ptxlm_sequences{state=\"running\"}", double(s.running));
        w.value("ptxlm_sequences{state=\"waiting\"}", double(s.waiting));
        w.metric("ptxlm_preemptions_total", "counter",
                 "Sequences preempted for KV pages (their tokens recomputed when they resume).", double(s.preemptions));
        w.metric("ptxlm_prefix_cache_hit_tokens_total", "counter",
                 "Prompt tokens whose K/V were found in the pool's pages.", double(s.prefix_hit_tokens));
    }
    return w.out;
}

}  // namespace ptxlm::server
