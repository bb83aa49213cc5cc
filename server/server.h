// `ptxlm serve`: an OpenAI-compatible HTTP server over the engine.
//
// Threads: the caller's (waits for a signal, then shuts down), httplib's
// listener, a fixed pool of HTTP handler threads (parallel + queue + 4: every
// admitted request can hold one while it streams, and monitoring requests
// still find one), and the scheduler's engine thread, the only one that
// touches the model and the backends (server/scheduler.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "server/request.h"
#include "server/scheduler.h"

namespace ptxlm::server {

struct ServerOptions {
    EngineOptions engine;
    std::string host = "127.0.0.1";
    int port = 8080;                     // 0: any free port
    std::string api_key;                 // empty: no authentication
    std::vector<std::string> cors_origins;   // --cors-origin: "*" or exact origins; empty: no CORS headers
    size_t max_body = 4u << 20;          // request bodies above this get 413
    RequestDefaults defaults;
};

// Binds, prints "listening on http://HOST:PORT" on stdout, loads the model in
// the background and serves until SIGINT or SIGTERM (then: stop accepting,
// end in-flight streams with an error event, exit 0). Returns the exit code;
// throws std::runtime_error when the address cannot be bound, and the load's
// exception (ModelError, ...) when the model cannot be loaded.
int run_server(const ServerOptions& opt);

// The chat page served at GET / (server/chat_page.cpp).
const std::string& chat_page_html();

}  // namespace ptxlm::server
