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

#include "engine/json_schema.h"
#include "engine/tool_grammar.h"
#include "server/anthropic.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/server.h"
#include "server/utility.h"

namespace ptxlm::server {

using nlohmann::json;

namespace {

// The routes and their methods: a known path with another method is 405.
constexpr const char* kMessagesPath = "/v1/messages";   // Anthropic's Messages API, its errors in its shape

struct Route {
    const char* path;
    const char* method;
};
constexpr Route kRoutes[] = {{"/", "GET"},         {"/health", "GET"},
                             {"/tokenize", "POST"}, {"/detokenize", "POST"}, {"/apply-template", "POST"},
                             {"/props", "GET"},
                             {"/metrics", "GET"},  {"/v1/models", "GET"},
                             {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"},
                             {kMessagesPath, "POST"}};
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
void send_anthropic_error(httplib::Response& res, const ApiError& e) {
    send_json(res, anthropic_status(e), anthropic_error_json(e));
}

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

// A streamed response's server-sent events in its API's shape. Each call
// returns whole events ("data: ...\n\n"; Anthropic's with an "event:" line).
class StreamFormat {
public:
    virtual ~StreamFormat() = default;
    virtual std::string open() = 0;                     // before any text
    virtual std::string text(const Event& text) = 0;    // a Text event
    virtual std::string done(const Event& done) = 0;    // a choice's Done; after the last choice's, the stream's last events
    virtual std::string error(const ApiError& e) = 0;   // an error after the stream began: its last event
};

std::string sse_data(const std::string& data) { return "data: " + data + "\n\n"; }

// OpenAI's: `data: {chunk}` events, each choice's with its index, then
// `data: [DONE]` once every choice is done; an error is `data: {"error": ...}`.
class OpenAiStream : public StreamFormat {
public:
    OpenAiStream(const ResponseBuilder& out, int n, bool include_usage) : include_usage_(include_usage) {
        for (int i = 0; i < n; ++i) out_.push_back(out.for_choice(i));
    }
    std::string open() override {
        std::string s;
        if (out_[0].endpoint() == Endpoint::Chat)
            for (const ResponseBuilder& b : out_) s += sse_data(dump(b.role_chunk()));
        return s;
    }
    std::string text(const Event& ev) override {
        const json c = out_[size_t(ev.choice)].text_chunk(ev.text, ev.logprobs);
        return c.is_null() ? std::string() : sse_data(dump(c));
    }
    std::string done(const Event& ev) override {
        ResponseBuilder& b = out_[size_t(ev.choice)];
        std::string s;
        if (const json rest = b.flush_chunk(); !rest.is_null()) s += sse_data(dump(rest));
        s += sse_data(dump(b.final_chunk(ev)));
        if (ev.choice == 0) usage_ = ev;
        else usage_.completion_tokens += ev.completion_tokens;
        if (++done_ < out_.size()) return s;
        if (include_usage_) s += sse_data(dump(out_[0].usage_chunk(usage_)));
        return s + sse_data("[DONE]");
    }
    std::string error(const ApiError& e) override { return sse_data(dump(error_json(e))); }

private:
    std::vector<ResponseBuilder> out_;   // one per choice
    bool include_usage_;
    size_t done_ = 0;
    Event usage_;   // choice 0's Done with every choice's completion tokens
};

// Anthropic's: message_start ... message_stop, the content blocks as the
// builder's parser decides them, an error as `event: error` (server/anthropic.h).
class AnthropicStream : public StreamFormat {
public:
    explicit AnthropicStream(MessageBuilder out) : out_(std::move(out)) {}
    std::string open() override { return out_.stream_start(); }
    std::string text(const Event& ev) override { return ev.text.empty() ? "" : out_.stream_text(ev.text); }
    std::string done(const Event& ev) override { return out_.stream_end(ev); }
    std::string error(const ApiError& e) override { return MessageBuilder::stream_error(e); }

private:
    MessageBuilder out_;
};

// The handler's start, for the access log line (the same thread logs it).
thread_local std::chrono::steady_clock::time_point t_request_start;

class Http {
public:
    Http(const ServerOptions& opt, Scheduler& sched)
        : opt_(opt), sched_(sched), started_(std::time(nullptr)), cors_(opt.cors_origins) {
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
        svr_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            t_request_start = std::chrono::steady_clock::now();
            // A CORS preflight from an allowed origin, on a path with a route,
            // is answered here: browsers send no API key with it.
            if (req.method == "OPTIONS" && allowed_method(req.path) &&
                !cors_.allow_origin(req.get_header_value("Origin")).empty()) {
                res.status = 204;
                res.set_header("Access-Control-Allow-Methods", CorsPolicy::kAllowMethods);
                res.set_header("Access-Control-Allow-Headers", CorsPolicy::kAllowHeaders);
                res.set_header("Access-Control-Max-Age", CorsPolicy::kMaxAge);
                return httplib::Server::HandlerResponse::Handled;
            }
            return httplib::Server::HandlerResponse::Unhandled;
        });
        // Runs before every response's headers are written (errors and
        // streams included): an allowed Origin gets the CORS headers.
        svr_.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            const std::string allow = cors_.allow_origin(req.get_header_value("Origin"));
            if (allow.empty()) return;
            res.set_header("Access-Control-Allow-Origin", allow);
            res.set_header("Vary", "Origin");
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
        svr_.Post(kMessagesPath, [this](const httplib::Request& req, httplib::Response& res) {
            try {
                messages(req, res);
            } catch (const ApiError& e) {
                send_anthropic_error(res, e);
            } catch (const std::exception& e) {
                send_anthropic_error(res,
                                     ApiError(500, std::string("internal error: ") + e.what(), "", "server_error"));
            }
        });
        // llama.cpp server's utility endpoints (server/utility.h).
        svr_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(res, [&] {
                check_key(req);
                send_json(res, 200, tokenize_response(ready_model(), req.body));
            });
        });
        svr_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(res, [&] {
                check_key(req);
                send_json(res, 200, detokenize_response(ready_model(), req.body));
            });
        });
        svr_.Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(res, [&] {
                check_key(req);
                send_json(res, 200, apply_template_response(ready_model(), opt_, req.body));
            });
        });
        svr_.Get("/props", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(res, [&] {
                check_key(req);
                send_json(res, 200, props_response(ready_model(), opt_));
            });
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
                                                  " (this server has /v1/chat/completions, /v1/completions, "
                                                  "/v1/messages, /v1/models, "
                                                  "/health, /metrics, /tokenize, /detokenize, /apply-template, /props and /)",
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
        // /v1/messages answers in Anthropic's shape (a 405, a 413): the same status and message.
        if (req.path == kMessagesPath) {
            const json body = json::parse(res.body);
            send_anthropic_error(res, ApiError(res.status, body["error"]["message"].get<std::string>()));
        }
        return httplib::Server::HandlerResponse::Handled;
    }

    // Anthropic's clients send the key as `x-api-key`; `Authorization: Bearer` works too.
    void check_anthropic_key(const httplib::Request& req) const {
        if (opt_.api_key.empty()) return;
        const std::string key = req.get_header_value("x-api-key");
        if (key.empty() && !req.has_header("Authorization"))
            throw ApiError(401, "missing API key: send the header 'x-api-key: KEY' (or 'Authorization: Bearer KEY')",
                           "", "invalid_request_error", "invalid_api_key");
        if (key.empty()) return check_key(req);
        if (!same_key(key, opt_.api_key))
            throw ApiError(401, "invalid API key", "", "invalid_request_error", "invalid_api_key");
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

    // The prompt's ids; for a chat, how its answer is read (`output`).
    std::vector<TokenId> prompt_tokens(const CompletionRequest& r, const LoadedModel& m, tools::Formats* output) const {
        const Tokenizer& tok = *m.tokenizer;
        std::vector<TokenId> ids;
        if (r.endpoint == Endpoint::Chat) {
            ChatPrompt p = render_chat_prompt(m, r.messages, true, chat_options(r));   // as /apply-template renders it
            ids = std::move(p.tokens);
            if (output) *output = p.output;
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
        if (r.n > opt_.engine.parallel + opt_.engine.queue)
            throw ApiError(400,
                           "'n' asks for " + std::to_string(r.n) + " choices; this server runs at most " +
                               std::to_string(opt_.engine.parallel + opt_.engine.queue) +
                               " answers at once (--parallel + --queue)",
                           "n");
        std::deque<Event> backlog;
        tools::Formats output;
        const std::vector<std::shared_ptr<Job>> jobs = start_jobs(r, m, backlog, &output);
        ResponseBuilder out(ep, m.id, *m.tokenizer, r.logprobs);
        if (ep == Endpoint::Chat) out.set_output(output, r.parallel_tool_calls, random_seed());
        if (!r.stream) {
            std::vector<std::string> texts(jobs.size());
            std::vector<std::vector<TokenLogprob>> logprobs(jobs.size());
            const std::vector<Event> done = collect(jobs, std::move(backlog), texts, logprobs);
            ResponseBuilder first = out;
            json body = first.response(texts[0], logprobs[0], done[0]);
            Event usage = done[0];
            for (size_t i = 1; i < jobs.size(); ++i) {
                body["choices"].push_back(out.for_choice(int(i)).choice(texts[i], logprobs[i], done[i]));
                usage.completion_tokens += done[i].completion_tokens;
            }
            body["usage"] = usage_json(usage);
            send_json(res, 200, body);
            return;
        }
        stream(jobs, std::make_shared<OpenAiStream>(out, r.n, r.include_usage), std::move(backlog),
               std::move(in_flight), res);
    }

    // POST /v1/messages: Anthropic's Messages API over the chat path (server/anthropic.h).
    void messages(const httplib::Request& req, httplib::Response& res) {
        auto in_flight = std::make_shared<InFlight>(in_flight_);
        check_anthropic_key(req);
        const CompletionRequest r = parse_messages_request(req.body, opt_.defaults);
        const LoadedModel& m = ready_model();
        std::deque<Event> backlog;
        tools::Formats output;
        const std::vector<std::shared_ptr<Job>> jobs = start_jobs(r, m, backlog, &output);
        MessageBuilder out(m.id, uint32_t(jobs[0]->prompt.size()));
        out.set_output(output, r.parallel_tool_calls, random_seed());
        if (!r.stream) {
            std::vector<std::string> text(1);
            std::vector<std::vector<TokenLogprob>> logprobs(1);
            const std::vector<Event> done = collect(jobs, std::move(backlog), text, logprobs);
            send_json(res, 200, out.message(text[0], done[0]));
            return;
        }
        stream(jobs, std::make_shared<AnthropicStream>(std::move(out)), std::move(backlog), std::move(in_flight), res);
    }

    // Submits the request's jobs (r.n choices: one job each, seeds seed + i)
    // and waits until the first has a slot and its prompt has run: until
    // then, anything that fails is thrown and still gets a proper status
    // code. `backlog` receives the events that came meanwhile.
    std::vector<std::shared_ptr<Job>> start_jobs(const CompletionRequest& r, const LoadedModel& m,
                                                 std::deque<Event>& backlog, tools::Formats* output = nullptr) {
        tools::Formats formats;
        const std::vector<TokenId> prompt = prompt_tokens(r, m, &formats);
        if (output) *output = formats;
        const std::shared_ptr<const GrammarConstraint> constraint = answer_grammar(r, formats);
        for (const auto& [id, bias] : r.gen.sampling.logit_bias)
            if (uint32_t(id) >= m.model->n_vocab)
                throw ApiError(400, "'logit_bias' names the token id " + std::to_string(id) + "; the vocabulary has " +
                                        std::to_string(m.model->n_vocab) + " tokens",
                               "logit_bias");
        const uint64_t seed = r.seed_given ? r.gen.sampling.seed : random_seed();
        std::vector<std::shared_ptr<Job>> jobs;
        for (int i = 0; i < r.n; ++i) {
            auto job = std::make_shared<Job>();
            job->id = ++next_job_;
            job->prompt = prompt;
            job->gen = r.gen;
            job->gen.sampling.seed = seed + uint64_t(i);
            job->gen.grammar = constraint;
            job->logprobs = r.logprobs;
            job->choice = i;
            if (i > 0) job->first = jobs[0];
            jobs.push_back(std::move(job));
        }
        switch (sched_.submit(jobs)) {
            case Scheduler::Admit::Ok: break;
            case Scheduler::Admit::Loading: throw loading_error();
            case Scheduler::Admit::ShuttingDown: throw shutting_down_error();
            case Scheduler::Admit::Full:
                throw ApiError(503,
                               "the server is busy: " + std::to_string(opt_.engine.parallel) + " slot(s) and a queue of " +
                                   std::to_string(opt_.engine.queue) + " are taken; retry later",
                               "", "server_error", "server_busy");
        }
        // Every choice's events arrive on the first's channel. Until choice
        // 0 has started, the others have not (they wait for its prompt).
        try {
            for (bool started = false; !started;) {
                for (Event& ev : jobs[0]->channel.wait(std::chrono::seconds(1))) {
                    if (ev.kind == Event::Kind::Error && ev.choice == 0 && !started) throw *ev.error;
                    if (ev.choice == 0 && (ev.kind == Event::Kind::Done || ev.kind == Event::Kind::Started)) started = true;
                    if (ev.kind != Event::Kind::Started) backlog.push_back(std::move(ev));
                }
            }
        } catch (...) {
            cancel(jobs);   // the other choices have nobody to answer
            throw;
        }
        return jobs;
    }

    // The grammar a request's answer follows: its own (`grammar`,
    // response_format), or its tool calls' in the template's format
    // (tools::Format); none for plain text.
    static std::shared_ptr<const GrammarConstraint> answer_grammar(const CompletionRequest& r, const tools::Formats& f) {
        try {
            if (!r.grammar.empty()) return make_constraint({r.grammar, {}}, f);
            if (r.endpoint != Endpoint::Chat || r.tools.is_null() || r.tool_choice == "none") return nullptr;
            return make_constraint(tool_call_grammar(f.tools, r.tools, r.tool_choice, r.parallel_tool_calls), f);
        } catch (const SchemaError& e) {
            throw ApiError(400, e.what(), "tools");
        } catch (const grammar::GrammarError& e) {
            throw ApiError(400, e.what(), r.grammar.empty() ? "tools" : r.grammar_field);
        }
    }

    static void cancel(const std::vector<std::shared_ptr<Job>>& jobs) {
        for (const auto& j : jobs) j->cancel.store(true);
    }

    // The whole answer of every choice: its text and logprobs; returns the
    // choices' Done events. An error of any choice is thrown (the others cancelled).
    std::vector<Event> collect(const std::vector<std::shared_ptr<Job>>& jobs, std::deque<Event> events,
                               std::vector<std::string>& texts, std::vector<std::vector<TokenLogprob>>& logprobs) {
        std::vector<Event> done(jobs.size());
        for (size_t remaining = jobs.size();;) {
            while (!events.empty()) {
                Event ev = std::move(events.front());
                events.pop_front();
                const size_t c = size_t(ev.choice);
                if (ev.kind == Event::Kind::Text) {
                    texts[c] += ev.text;
                    for (auto& t : ev.logprobs) logprobs[c].push_back(std::move(t));
                } else if (ev.kind == Event::Kind::Error) {
                    cancel(jobs);
                    throw *ev.error;
                } else if (ev.kind == Event::Kind::Done) {
                    done[c] = std::move(ev);
                    if (--remaining == 0) return done;
                }
            }
            for (Event& ev : jobs[0]->channel.wait(std::chrono::seconds(1))) events.push_back(std::move(ev));
        }
    }

    // Server-sent events in `fmt`'s shape: its opening, one event per text
    // piece, its last events. An error after the stream began (shutdown, an
    // engine failure) is one error event, then the stream ends.
    void stream(std::vector<std::shared_ptr<Job>> jobs, std::shared_ptr<StreamFormat> fmt, std::deque<Event> backlog,
                std::shared_ptr<InFlight> in_flight, httplib::Response& res) {
        struct State {
            std::vector<std::shared_ptr<Job>> jobs;   // the choices; every event on jobs[0]'s channel
            std::shared_ptr<StreamFormat> fmt;
            std::deque<Event> events;
            std::shared_ptr<InFlight> in_flight;
            size_t remaining = 0;   // choices not done yet
            bool opened = false, finished = false;
        };
        const size_t n = jobs.size();
        auto st = std::make_shared<State>(
            State{std::move(jobs), std::move(fmt), std::move(backlog), std::move(in_flight), n});
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        res.set_chunked_content_provider(
            "text/event-stream",
            [st](size_t, httplib::DataSink& sink) {
                auto send = [&](const std::string& events) {
                    if (events.empty() || sink.write(events.data(), events.size())) return true;
                    cancel(st->jobs);   // the client is gone: free the slots
                    return false;
                };
                if (!st->opened) {
                    st->opened = true;
                    if (!send(st->fmt->open())) return false;
                }
                if (st->events.empty())
                    for (Event& ev : st->jobs[0]->channel.wait(std::chrono::milliseconds(250)))
                        st->events.push_back(std::move(ev));
                while (!st->events.empty()) {
                    Event ev = std::move(st->events.front());
                    st->events.pop_front();
                    if (ev.kind == Event::Kind::Text) {
                        if (!send(st->fmt->text(ev))) return false;
                    } else if (ev.kind == Event::Kind::Error) {
                        st->finished = true;
                        cancel(st->jobs);
                        send(st->fmt->error(*ev.error));
                        sink.done();
                        return true;
                    } else if (ev.kind == Event::Kind::Done) {
                        if (!send(st->fmt->done(ev))) return false;
                        if (--st->remaining > 0) continue;
                        st->finished = true;
                        sink.done();
                        return true;
                    }
                }
                return true;
            },
            [st](bool success) {
                // The response is gone (written, or the connection failed):
                // a job still generating has nobody to generate for.
                if (!success || !st->finished) cancel(st->jobs);
                st->in_flight.reset();
            });
    }

    const ServerOptions& opt_;
    Scheduler& sched_;
    std::time_t started_;
    CorsPolicy cors_;
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
