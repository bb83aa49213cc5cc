// The HTTP side of the server, and the only file that sees cpp-httplib:
// routes, authentication, error bodies, server-sent events, the handler
// thread pool, signals and shutdown.
//
// A completion request is parsed and tokenized on its handler thread, then
// submitted to the scheduler; the handler waits for the job's Started event
// (so that anything failing up to prefill still gets its own status code),
// then either collects the answer or streams it as server-sent events. A
// stream whose write fails (the client went away) sets the job's cancel
// flag: the engine drops it before its next token.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <random>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/metrics.h"
#include "server/openai.h"
#include "server/server.h"

namespace ptxlm::server {

using nlohmann::json;

namespace {

// The routes and their methods: a known path with another method is 405.
struct Route {
    const char* path;
    const char* method;
};
constexpr Route kRoutes[] = {{"/", "GET"},         {"/health", "GET"},
                             {"/metrics", "GET"},  {"/v1/models", "GET"},
                             {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}};
constexpr const char* kModelPrefix = "/v1/models/";

// The metrics label of a path: a route, or "other" (bounded cardinality).
std::string endpoint_label(const std::string& path) {
    for (const Route& r : kRoutes)
        if (path == r.path) return path;
    if (path.starts_with(kModelPrefix)) return "/v1/models/{id}";
    return "other";
}

const char* allowed_method(const std::string& path) {
    for (const Route& r : kRoutes)
        if (path == r.path) return r.method;
    if (path.starts_with(kModelPrefix)) return "GET";
    return nullptr;
}

void send_json(httplib::Response& res, int status, const json& j) {
    res.status = status;
    res.set_content(dump(j), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), error_json(e)); }

ApiError loading_error() { return ApiError(503, "the model is loading; retry shortly", "", "unavailable_error", "loading"); }
ApiError shutting_down_error() {
    return ApiError(503, "the server is shutting down", "", "server_error", "shutting_down");
}

bool same_key(const std::string& a, const std::string& b) {
    // Constant time in the key's contents (the length is not secret).
    if (a.size() != b.size()) return false;
    unsigned char d = 0;
    for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
    return d == 0;
}

uint64_t random_seed() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    return rng();
}

// The handler's start, for the access log line (the same thread logs it).
thread_local std::chrono::steady_clock::time_point t_request_start;

class Http {
public:
    Http(const ServerOptions& opt, Scheduler& sched) : opt_(opt), sched_(sched), started_(std::time(nullptr)) {
        const size_t threads = size_t(opt.engine.parallel + opt.engine.queue + 4);
        svr_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
        svr_.set_payload_max_length(opt.max_body);
        // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which lets a
        // second server bind the same port and share its connections.
        svr_.set_socket_options([](socket_t sock) {
            int yes = 1;
            setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        });
        svr_.set_tcp_nodelay(true);   // one small SSE event per token: send each at once
        // An idle keep-alive connection holds a handler thread: not for long.
        svr_.set_keep_alive_timeout(2);
        svr_.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
            t_request_start = std::chrono::steady_clock::now();
            return httplib::Server::HandlerResponse::Unhandled;
        });
        svr_.set_logger([this](const httplib::Request& req, const httplib::Response& res) { log(req, res); });
        svr_.set_error_handler(httplib::Server::HandlerWithResponse(
            [this](const httplib::Request& req, httplib::Response& res) { return on_error(req, res); }));
        svr_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "unknown error";
            try {
                if (ep) std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            send_error(res, ApiError(500, "internal error: " + what, "", "server_error"));
        });
        svr_.Get("/", [](const httplib::Request&, httplib::Response& res) {
            res.set_content(chat_page_html(), "text/html; charset=utf-8");
        });
        svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) { health(res); });
        svr_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { models(res, nullptr); });
        svr_.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
            const std::string id = req.matches[1];
            models(res, &id);
        });
        svr_.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(res, [&] { metrics(req, res); });
        });
        svr_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(res, [&] { completion(Endpoint::Chat, req, res); });
        });
        svr_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(res, [&] { completion(Endpoint::Completion, req, res); });
        });
    }

    int bind() {
        if (opt_.port == 0) {
            const int port = svr_.bind_to_any_port(opt_.host);
            if (port <= 0) throw std::runtime_error("cannot listen on " + opt_.host + " (any port)");
            return port;
        }
        if (!svr_.bind_to_port(opt_.host, opt_.port))
            throw std::runtime_error("cannot listen on " + opt_.host + ":" + std::to_string(opt_.port) +
                                     " (in use, or not an address of this machine?); --port 0 picks a free port");
        return opt_.port;
    }
    bool listen() { return svr_.listen_after_bind(); }
    void stop() { svr_.stop(); }
    // Completion responses not yet fully written (a stream until its last byte).
    int in_flight() const { return in_flight_.load(); }

private:
    template <class Fn> static void guarded(httplib::Response& res, Fn&& fn) {
        try {
            fn();
        } catch (const ApiError& e) {
            send_error(res, e);
        }
    }

    void log(const httplib::Request& req, const httplib::Response& res) {
        requests_.count(endpoint_label(req.path), res.status);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_request_start).count();
        std::fprintf(stderr, "ptxlm serve: %s %s %d %.1f ms\n", req.method.c_str(), req.path.c_str(), res.status, ms);
    }

    httplib::Server::HandlerResponse on_error(const httplib::Request& req, httplib::Response& res) {
        // Our handlers write their own bodies; this fills httplib's bare statuses.
        if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 404) {
            if (const char* m = allowed_method(req.path)) {
                res.set_header("Allow", m);
                send_error(res, ApiError(405, "method " + req.method + " is not allowed on " + req.path + " (use " + m + ")",
                                         "", "invalid_request_error", "method_not_allowed"));
            } else {
                send_error(res, ApiError(404, "no route " + req.method + " " + req.path +
                                                  " (this server has /v1/chat/completions, /v1/completions, /v1/models, "
                                                  "/health, /metrics and /)",
                                         "", "invalid_request_error", "not_found"));
            }
        } else if (res.status == 413) {
            send_error(res, ApiError(413, "the request body is larger than this server's limit of " +
                                              std::to_string(opt_.max_body) + " bytes (--max-body)",
                                     "", "invalid_request_error", "request_too_large"));
        } else {
            const int status = res.status;
            send_error(res, ApiError(status, "the request failed with HTTP status " + std::to_string(status) +
                                                 (status == 400 ? " (malformed HTTP request)" : ""),
                                     "", status >= 500 ? "server_error" : "invalid_request_error"));
        }
        return httplib::Server::HandlerResponse::Handled;
    }

    void check_key(const httplib::Request& req) const {
        if (opt_.api_key.empty()) return;
        const std::string auth = req.get_header_value("Authorization");
        const std::string bearer = "Bearer ";
        if (auth.size() > bearer.size() && auth.compare(0, bearer.size(), bearer) == 0 &&
            same_key(auth.substr(bearer.size()), opt_.api_key))
            return;
        throw ApiError(401, auth.empty() ? "missing API key: send the header 'Authorization: Bearer KEY'"
                                         : "invalid API key",
                       "", "invalid_request_error", "invalid_api_key");
    }

    // The loaded model, or the 503 that says why there is none.
    const LoadedModel& ready_model() const {
        switch (sched_.state()) {
            case Scheduler::State::Loading: throw loading_error();
            case Scheduler::State::Ready: return *sched_.model();
            default: throw shutting_down_error();
        }
    }

    void health(httplib::Response& res) {
        switch (sched_.state()) {
            case Scheduler::State::Loading: send_error(res, loading_error()); return;
            case Scheduler::State::Ready: send_json(res, 200, {{"status", "ok"}}); return;
            default: send_error(res, shutting_down_error()); return;
        }
    }

    void models(httplib::Response& res, const std::string* id) {
        guarded(res, [&] {
            const LoadedModel& m = ready_model();
            const json meta = {{"n_ctx", m.n_ctx},
                               {"n_ctx_train", m.model->hp.n_ctx_train},
                               {"n_vocab", m.model->n_vocab},
                               {"arch", m.model->hp.arch},
                               {"size", m.model->weight_bytes()},
                               {"backend", m.backend},
                               {"slots", opt_.engine.parallel},
                               {"chat_template", m.chat_template ? m.chat_template->name() : ""}};
            const json model = {{"id", m.id},       {"object", "model"}, {"created", int64_t(started_)},
                                {"owned_by", "ptxlm"}, {"context_length", m.n_ctx}, {"meta", meta}};
            if (!id) {
                send_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
                return;
            }
            if (*id != m.id)
                throw ApiError(404, "the model '" + *id + "' does not exist; this server serves '" + m.id + "'", "model",
                               "invalid_request_error", "model_not_found");
            send_json(res, 200, model);
        });
    }

    void metrics(const httplib::Request& req, httplib::Response& res) {
        check_key(req);
        const SchedulerStats s = sched_.stats();
        res.set_content(prometheus_text(s, requests_.snapshot(), opt_.engine.parallel, opt_.engine.queue,
                                        sched_.state() == Scheduler::State::Ready),
                        "text/plain; version=0.0.4; charset=utf-8");
    }

    std::vector<TokenId> prompt_tokens(const CompletionRequest& r, const LoadedModel& m) const {
        const Tokenizer& tok = *m.tokenizer;
        std::vector<TokenId> ids;
        if (r.endpoint == Endpoint::Chat) {
            if (!m.chat_template)
                throw ApiError(500, "this model's chat template is not supported (" + m.template_error +
                                        "); /v1/completions works, or restart the server with --chat-template NAME",
                               "", "server_error", "chat_template_unsupported");
            try {
                ids = chat_prompt_tokens(tok, *m.chat_template, r.messages, true);
            } catch (const std::invalid_argument& e) {
                throw ApiError(400, std::string("the conversation does not fit the model's chat template: ") + e.what(),
                               "messages");
            }
        } else if (r.prompt_ids) {
            ids = *r.prompt_ids;
            for (TokenId t : ids)
                if (t >= tok.n_vocab())
                    throw ApiError(400, "'prompt' holds the token id " + std::to_string(t) + "; the vocabulary has " +
                                            std::to_string(tok.n_vocab()) + " tokens",
                                   "prompt");
        } else {
            try {
                ids = tok.encode(r.prompt, tok.add_bos(), false);
            } catch (const std::invalid_argument& e) {
                throw ApiError(400, std::string("the prompt cannot be tokenized: ") + e.what(), "prompt");
            }
        }
        const char* param = r.endpoint == Endpoint::Chat ? "messages" : "prompt";
        if (ids.empty()) throw ApiError(400, "the prompt is empty", param);
        // One position must stay free for the first generated token.
        if (ids.size() >= m.n_ctx)
            throw ApiError(400,
                           "the prompt is " + std::to_string(ids.size()) + " tokens long and the context holds " +
                               std::to_string(m.n_ctx) + " (one position must stay free to generate): " +
                               std::to_string(ids.size() - m.n_ctx + 1) +
                               " tokens too many; shorten it, or restart the server with a larger -c",
                           param, "invalid_request_error", "context_length_exceeded");
        return ids;
    }

    // Counts a completion response in flight until released (a stream hands
    // it to its content provider, which releases it when the response is gone).
    struct InFlight {
        std::atomic<int>* n;
        explicit InFlight(std::atomic<int>& c) : n(&c) { ++*n; }
        InFlight(const InFlight&) = delete;
        InFlight& operator=(const InFlight&) = delete;
        ~InFlight() {
            if (n) --*n;
        }
    };

    void completion(Endpoint ep, const httplib::Request& req, httplib::Response& res) {
        auto in_flight = std::make_shared<InFlight>(in_flight_);
        check_key(req);
        const CompletionRequest r = parse_request(ep, req.body, opt_.defaults);
        const LoadedModel& m = ready_model();
        auto job = std::make_shared<Job>();
        job->id = ++next_job_;
        job->prompt = prompt_tokens(r, m);
        job->gen = r.gen;
        if (!r.seed_given) job->gen.sampling.seed = random_seed();
        job->logprobs = r.logprobs;
        switch (sched_.submit(job)) {
            case Scheduler::Admit::Ok: break;
            case Scheduler::Admit::Loading: throw loading_error();
            case Scheduler::Admit::ShuttingDown: throw shutting_down_error();
            case Scheduler::Admit::Full:
                throw ApiError(503,
                               "the server is busy: " + std::to_string(opt_.engine.parallel) + " slot(s) and a queue of " +
                                   std::to_string(opt_.engine.queue) + " are taken; retry later",
                               "", "server_error", "server_busy");
        }
        // Until the job has a slot and its prompt is evaluated, anything that
        // fails still gets a proper status code.
        std::deque<Event> backlog;
        for (bool started = false; !started;) {
            for (Event& ev : job->channel.wait(std::chrono::seconds(1))) {
                if (ev.kind == Event::Kind::Error && !started) throw *ev.error;
                if (ev.kind == Event::Kind::Done) started = true;
                if (ev.kind == Event::Kind::Started) started = true;
                else backlog.push_back(std::move(ev));
            }
        }
        auto out = std::make_shared<ResponseBuilder>(ep, m.id, *m.tokenizer, r.logprobs);
        if (!r.stream) {
            collect(*job, *out, std::move(backlog), res);
            return;
        }
        stream(job, out, std::move(backlog), r.include_usage, std::move(in_flight), res);
    }

    void collect(Job& job, ResponseBuilder& out, std::deque<Event> events, httplib::Response& res) {
        std::string text;
        std::vector<TokenLogprob> logprobs;
        for (;;) {
            while (!events.empty()) {
                Event ev = std::move(events.front());
                events.pop_front();
                if (ev.kind == Event::Kind::Text) {
                    text += ev.text;
                    for (auto& t : ev.logprobs) logprobs.push_back(std::move(t));
                } else if (ev.kind == Event::Kind::Error) {
                    throw *ev.error;
                } else if (ev.kind == Event::Kind::Done) {
                    send_json(res, 200, out.response(text, logprobs, ev));
                    return;
                }
            }
            for (Event& ev : job.channel.wait(std::chrono::seconds(1))) events.push_back(std::move(ev));
        }
    }

    // Server-sent events: `data: {json}\n\n` per chunk, then `data: [DONE]`.
    // An error after the stream began (shutdown, an engine failure) is one
    // `data: {"error": ...}` event, then the stream ends.
    void stream(std::shared_ptr<Job> job, std::shared_ptr<ResponseBuilder> out, std::deque<Event> backlog,
                bool include_usage, std::shared_ptr<InFlight> in_flight, httplib::Response& res) {
        struct State {
            std::shared_ptr<Job> job;
            std::shared_ptr<ResponseBuilder> out;
            std::deque<Event> events;
            bool include_usage;
            std::shared_ptr<InFlight> in_flight;
            bool opened = false, finished = false;
        };
        auto st = std::make_shared<State>(
            State{std::move(job), std::move(out), std::move(backlog), include_usage, std::move(in_flight)});
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        res.set_chunked_content_provider(
            "text/event-stream",
            [st](size_t, httplib::DataSink& sink) {
                auto send = [&](const std::string& data) {
                    const std::string ev = "data: " + data + "\n\n";
                    if (sink.write(ev.data(), ev.size())) return true;
                    st->job->cancel.store(true);   // the client is gone: free the slot
                    return false;
                };
                if (!st->opened) {
                    st->opened = true;
                    if (st->out->endpoint() == Endpoint::Chat && !send(dump(st->out->role_chunk()))) return false;
                }
                if (st->events.empty())
                    for (Event& ev : st->job->channel.wait(std::chrono::milliseconds(250)))
                        st->events.push_back(std::move(ev));
                while (!st->events.empty()) {
                    Event ev = std::move(st->events.front());
                    st->events.pop_front();
                    if (ev.kind == Event::Kind::Text) {
                        if (!send(dump(st->out->text_chunk(ev.text, ev.logprobs)))) return false;
                    } else if (ev.kind == Event::Kind::Error) {
                        st->finished = true;
                        send(dump(error_json(*ev.error)));
                        sink.done();
                        return true;
                    } else if (ev.kind == Event::Kind::Done) {
                        st->finished = true;
                        if (!send(dump(st->out->final_chunk(ev)))) return false;
                        if (st->include_usage && !send(dump(st->out->usage_chunk(ev)))) return false;
                        if (!send("[DONE]")) return false;
                        sink.done();
                        return true;
                    }
                }
                return true;
            },
            [st](bool success) {
                // The response is gone (written, or the connection failed):
                // a job still generating has nobody to generate for.
                if (!success || !st->finished) st->job->cancel.store(true);
                st->in_flight.reset();
            });
    }

    const ServerOptions& opt_;
    Scheduler& sched_;
    std::time_t started_;
    httplib::Server svr_;
    RequestCounter requests_;
    std::atomic<uint64_t> next_job_{0};
    std::atomic<int> in_flight_{0};
};

}  // namespace

int run_server(const ServerOptions& opt) {
    // SIGINT and SIGTERM are taken by sigtimedwait below: block them before
    // any thread starts, so every thread inherits the mask. A write to a
    // closed connection must fail, not kill the process.
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    signal(SIGPIPE, SIG_IGN);

    Scheduler sched(opt.engine);
    Http http(opt, sched);
    const int port = http.bind();
    std::printf("listening on http://%s:%d\n", opt.host.c_str(), port);
    std::fflush(stdout);
    sched.start();   // loads the model while /health answers 503
    std::thread listener([&http] { http.listen(); });
    std::fprintf(stderr, "ptxlm serve: listening on http://%s:%d, loading %s\n", opt.host.c_str(), port,
                 opt.engine.model_path.c_str());

    bool reported_ready = false, failed = false;
    for (;;) {
        const timespec tick{0, 100 * 1000 * 1000};
        const int sig = sigtimedwait(&sigs, nullptr, &tick);
        if (sig > 0) {
            std::fprintf(stderr, "ptxlm serve: %s: shutting down\n", strsignal(sig));
            break;
        }
        const Scheduler::State s = sched.state();
        if (s == Scheduler::State::Failed) {
            failed = true;
            break;
        }
        if (s == Scheduler::State::Ready && !reported_ready) {
            reported_ready = true;
            std::fprintf(stderr, "ptxlm serve: ready\n");
        }
    }
    // End every admitted job (streams get an error event; requests arriving
    // now get 503), let the streams write their last event, then stop
    // accepting: httplib ends a chunked response unfinished once stopped.
    sched.shutdown();
    const auto t0 = std::chrono::steady_clock::now();
    while (http.in_flight() > 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    http.stop();
    listener.join();
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (failed) sched.rethrow_load_error();
    return 0;
}

}  // namespace ptxlm::server
