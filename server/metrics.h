// GET /metrics: the server's counters in Prometheus' text exposition format
// (version 0.0.4): requests by endpoint and status, prompt and generated
// tokens, decode throughput, queue depth, active slots, KV use per slot.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "server/scheduler.h"

namespace ptxlm::server {

// Finished HTTP requests by (endpoint, status). The endpoint is one of the
// server's routes or "other", so the label set stays bounded.
class RequestCounter {
public:
    void count(const std::string& endpoint, int status);
    std::map<std::pair<std::string, int>, uint64_t> snapshot() const;

private:
    mutable std::mutex mu_;
    std::map<std::pair<std::string, int>, uint64_t> counts_;
};

std::string prometheus_text(const SchedulerStats& s, const std::map<std::pair<std::string, int>, uint64_t>& requests,
                            int parallel, int queue_capacity, bool ready);

}  // namespace ptxlm::server
