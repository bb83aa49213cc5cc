// llama.cpp server's utility endpoints, in its request and response shapes,
// and the server's CORS policy. No HTTP here: http.cpp routes and
// authenticates, these functions read a body and answer JSON or throw
// ApiError (the field at fault in `param`).
//
//   POST /tokenize        {"content", "add_special", "parse_special", "with_pieces"} -> {"tokens": [...]}
//   POST /detokenize      {"tokens": [ids]} -> {"content": "..."}
//   POST /apply-template  {"messages", "add_generation_prompt"} -> {"prompt": "..."}
//   GET  /props           the server's defaults, slots, model and chat template
//
// As in the OpenAI parser, a null field counts as absent; unlike OpenAI's
// APIs, a field these endpoints do not know is refused (400 naming it), so
// that nothing a client asks for is silently dropped.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/chat_prompt.h"
#include "server/server.h"

namespace ptxlm::server {

nlohmann::json tokenize_response(const LoadedModel& m, std::string_view body);
nlohmann::json detokenize_response(const LoadedModel& m, std::string_view body);
nlohmann::json apply_template_response(const LoadedModel& m, const ServerOptions& opt, std::string_view body);
nlohmann::json props_response(const LoadedModel& m, const ServerOptions& opt);

// A conversation's prompt exactly as /v1/chat/completions renders and
// tokenizes it. ApiError 500 (chat_template_unsupported) when the model has no
// usable template, 400 naming `messages` when the template refuses the
// conversation (roles out of order, ...).
ChatPrompt render_chat_prompt(const LoadedModel& m, std::span<const ChatMessage> msgs, bool add_generation_prompt,
                              const ChatOptions& options = {});
// A chat request's tools, tool_choice and template variables.
ChatOptions chat_options(const CompletionRequest& r);

// CORS (--cors-origin). Empty: off, no CORS header on any response.
// "*" allows every origin; otherwise the exact origins listed.
class CorsPolicy {
public:
    explicit CorsPolicy(std::vector<std::string> origins) : origins_(std::move(origins)) {}
    bool enabled() const { return !origins_.empty(); }
    // The Access-Control-Allow-Origin value for a request's Origin header:
    // "*", the origin itself, or "" (no CORS headers: not allowed, or no Origin).
    std::string allow_origin(std::string_view origin) const;

    // What a preflight (OPTIONS) answer carries besides the origin.
    static constexpr const char* kAllowMethods = "GET, POST, OPTIONS";
    static constexpr const char* kAllowHeaders = "Authorization, Content-Type, x-api-key, anthropic-version";
    // Seconds a browser may cache the preflight (Chromium caps it at 7200).
    static constexpr const char* kMaxAge = "7200";

private:
    std::vector<std::string> origins_;
};

// Checks one --cors-origin value: "*", or scheme://host[:port] with scheme
// http or https and nothing after (no path, no trailing slash), as browsers
// send the Origin header. Throws std::invalid_argument saying what is wrong.
void check_cors_origin(std::string_view origin);

}  // namespace ptxlm::server
