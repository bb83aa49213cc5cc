#include "server/anthropic.h"

#include <cmath>
#include <limits>
#include <random>

#include "server/json_fields.h"

namespace ptxlm::server {

using nlohmann::json;

namespace {

// The top-level fields this endpoint reads; any other is refused by name.
constexpr std::string_view kFields[] = {"model",       "max_tokens", "messages",       "system",  "stream",
                                        "temperature", "top_p",      "top_k",          "stop_sequences",
                                        "metadata",    "tools",      "tool_choice",    "thinking", "cache_control"};

using fields::bad;
using fields::wrong_type;
const json* get(const json& obj, std::string_view name) { return fields::field(obj, name); }

const json& required(const json& obj, std::string_view name, const std::string& param) {
    const json* v = get(obj, name);
    if (!v) bad(param, "missing required field: '" + param + "'");
    return *v;
}

std::string string_field(const json& obj, std::string_view name, const std::string& param) {
    const json& v = required(obj, name, param);
    if (!v.is_string()) wrong_type(param, "a string", v);
    return v.get<std::string>();
}

// Every key of `obj` must be one of `known` (the error names the first other one).
void only_keys(const json& obj, std::initializer_list<std::string_view> known, const std::string& at) {
    for (const auto& [key, value] : obj.items()) {
        bool ok = false;
        for (std::string_view k : known) ok = ok || key == k;
        if (!ok) bad(at + "." + key, "unknown field '" + at + "." + key + "'");
    }
}

// A number in [lo, hi] (lo excluded when lo_open), checked as the float the sampler holds.
std::optional<float> number(const json& body, const char* name, double lo, double hi, bool lo_open) {
    const json* v = get(body, name);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong_type(name, "a number", *v);
    const double d = v->get<double>();
    const bool below = lo_open ? float(d) <= float(lo) : d < lo;
    if (!std::isfinite(d) || below || d > hi)
        bad(name, std::string("invalid '") + name + "': must be " + (lo_open ? "greater than " : "between ") +
                      json(lo).dump() + (lo_open ? " and at most " : " and ") + json(hi).dump() + " (got " +
                      v->dump() + ")");
    return float(d);
}

int64_t integer(const json& v, const char* name, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) wrong_type(name, "an integer", v);
    const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi);
    const int64_t i = too_big ? hi : v.get<int64_t>();
    if (too_big || i < lo || i > hi)
        bad(name, std::string("invalid '") + name + "': must be between " + std::to_string(lo) + " and " +
                      std::to_string(hi) + " (got " + v.dump() + ")");
    return i;
}

// A text content block {"type": "text", "text": ...}; `cache_control` is a
// no-op (the slots cache prefixes on their own). Other block types are refused.
std::string text_block(const json& block, const std::string& at) {
    if (!block.is_object()) wrong_type(at, "an object (a content block)", block);
    const json* type = get(block, "type");
    if (!type || !type->is_string()) bad(at + ".type", "'" + at + ".type' must be a string (\"text\")");
    const std::string t = type->get<std::string>();
    if (t != "text")
        bad(at + ".type", "unsupported content block type '" + t + "' in '" + at +
                              "': this server reads text blocks only (no images, documents, tool_use or tool_result)");
    only_keys(block, {"type", "text", "cache_control", "citations"}, at);
    if (const json* c = get(block, "citations"); c && !(c->is_array() && c->empty()))
        bad(at + ".citations", "'" + at + ".citations' is not supported by this server");
    if (const json* c = get(block, "cache_control"); c && !c->is_object())
        wrong_type(at + ".cache_control", "an object", *c);
    return string_field(block, "text", at + ".text");
}

// A string, or an array of text blocks joined by newlines (as the chat endpoint joins text parts).
std::string text_content(const json& v, const std::string& at) {
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_array()) wrong_type(at, "a string or an array of content blocks", v);
    std::string text;
    for (size_t i = 0; i < v.size(); ++i) {
        if (i) text += '\n';
        text += text_block(v[i], at + "[" + std::to_string(i) + "]");
    }
    return text;
}

void parse_conversation(const json& body, CompletionRequest& r) {
    if (const json* s = get(body, "system")) {
        const std::string system = text_content(*s, "system");
        // An empty system prompt is no system prompt.
        if (!system.empty()) r.messages.push_back({"system", system});
    }
    const json& msgs = required(body, "messages", "messages");
    if (!msgs.is_array()) wrong_type("messages", "an array", msgs);
    if (msgs.empty()) bad("messages", "'messages' must hold at least one message");
    for (size_t i = 0; i < msgs.size(); ++i) {
        const json& m = msgs[i];
        const std::string at = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) wrong_type(at, "an object", m);
        only_keys(m, {"role", "content"}, at);
        const std::string role = string_field(m, "role", at + ".role");
        if (role == "system")
            bad(at + ".role", "the role 'system' is not allowed in '" + at + "': use the top-level 'system' field");
        if (role != "user" && role != "assistant")
            bad(at + ".role", "unsupported role '" + role + "' in '" + at + "' (roles: user, assistant)");
        std::string content = text_content(required(m, "content", at + ".content"), at + ".content");
        // Consecutive turns of one role are one turn, as Anthropic combines them.
        if (!r.messages.empty() && r.messages.back().role == role) r.messages.back().content += "\n" + content;
        else r.messages.push_back({role, std::move(content)});
    }
    // Anthropic continues a final assistant turn (a prefill); the chat
    // template here always opens a new turn, so that would answer differently.
    if (r.messages.back().role == "assistant")
        bad("messages[" + std::to_string(msgs.size() - 1) + "].role",
            "a final assistant message (a prefill for the answer to continue) is not supported; end with a user "
            "message");
}

void refuse_unsupported(const json& body) {
    for (const auto& [key, value] : body.items()) {
        bool known = false;
        for (std::string_view k : kFields) known = known || key == k;
        if (!known) bad(key, "unknown field '" + key + "' (this server's /v1/messages does not read it)");
    }
    // An empty tool list and disabled thinking are the defaults: they change nothing.
    if (const json* t = get(body, "tools"); t && !(t->is_array() && t->empty()))
        bad("tools", "'tools': tool use is not supported by this server yet");
    if (get(body, "tool_choice")) bad("tool_choice", "'tool_choice': tool use is not supported by this server yet");
    if (const json* t = get(body, "thinking")) {
        const json* type = t->is_object() ? get(*t, "type") : nullptr;
        if (!(type && *type == "disabled"))
            bad("thinking", "'thinking': extended thinking is not supported by this server");
    }
    // A prompt-cache hint: the slots cache prefixes on their own.
    if (const json* c = get(body, "cache_control"); c && !c->is_object()) wrong_type("cache_control", "an object", *c);
    if (const json* md = get(body, "metadata")) {
        if (!md->is_object()) wrong_type("metadata", "an object", *md);
        only_keys(*md, {"user_id"}, "metadata");
        if (const json* u = get(*md, "user_id"); u && !u->is_string()) wrong_type("metadata.user_id", "a string", *u);
    }
}

void parse_generation(const json& body, CompletionRequest& r) {
    // 0 is Anthropic's way to only warm the prompt cache: the prompt runs, nothing is generated.
    const json& mt = required(body, "max_tokens", "max_tokens");
    r.gen.max_tokens = int32_t(integer(mt, "max_tokens", 0, std::numeric_limits<int32_t>::max()));
    SamplerParams& p = r.gen.sampling;
    if (auto v = number(body, "temperature", 0, 1, false)) p.temperature = *v;
    if (auto v = number(body, "top_p", 0, 1, true)) p.top_p = *v;
    if (const json* v = get(body, "top_k"))   // 0: no cut
        p.top_k = int32_t(integer(*v, "top_k", 0, std::numeric_limits<int32_t>::max()));
    if (const json* s = get(body, "stop_sequences")) {
        if (!s->is_array()) wrong_type("stop_sequences", "an array of strings", *s);
        if (s->size() > kMaxStopSequences)
            bad("stop_sequences", "'stop_sequences' holds " + std::to_string(s->size()) + " strings; at most " +
                                      std::to_string(kMaxStopSequences) + " are allowed");
        for (const json& x : *s) {
            if (!x.is_string()) wrong_type("stop_sequences", "an array of strings", x);
            if (x.get_ref<const std::string&>().empty()) bad("stop_sequences", "a stop sequence must not be empty");
            r.gen.stop.push_back(x.get<std::string>());
        }
    }
    if (const json* s = get(body, "stream")) {
        if (!s->is_boolean()) wrong_type("stream", "a boolean", *s);
        r.stream = s->get<bool>();
    }
}

CompletionRequest parse_object(const json& body, const RequestDefaults& defaults) {
    if (!body.is_object()) bad("", std::string("the request body must be a JSON object, not ") + fields::type_name(body));
    refuse_unsupported(body);
    CompletionRequest r;
    r.endpoint = Endpoint::Chat;
    r.gen.sampling = defaults.sampling;
    r.model = string_field(body, "model", "model");
    parse_generation(body, r);
    parse_conversation(body, r);
    return r;
}

std::string random_id() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* chars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    std::string s = "msg_";
    for (int i = 0; i < 24; ++i) s += chars[rng() % 62];
    return s;
}

// JSON text; generated pieces that are not whole UTF-8 characters become U+FFFD.
std::string text_of(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse(const char* name, const json& data) {
    return std::string("event: ") + name + "\ndata: " + text_of(data) + "\n\n";
}

json stop_sequence(const Event& done) { return done.stop.empty() ? json(nullptr) : json(done.stop); }

}  // namespace

CompletionRequest parse_messages_request(std::string_view body, const RequestDefaults& defaults) {
    const json j = fields::parse_body(body);
    return fields::client_error([&] { return parse_object(j, defaults); });
}

int anthropic_status(const ApiError& e) {
    // Busy, loading or shutting down: Anthropic's "overloaded" status, which its clients retry.
    return e.status() == 503 ? 529 : e.status();
}

json anthropic_error_json(const ApiError& e) {
    const char* type = "api_error";
    switch (anthropic_status(e)) {
        case 401: type = "authentication_error"; break;
        case 403: type = "permission_error"; break;
        case 404: type = "not_found_error"; break;
        case 413: type = "request_too_large"; break;
        case 429: type = "rate_limit_error"; break;
        case 529: type = "overloaded_error"; break;
        default:
            if (e.status() < 500) type = "invalid_request_error";
    }
    return {{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}}}};
}

const char* anthropic_stop_reason(const Event& done) {
    if (!done.stop.empty()) return "stop_sequence";
    switch (done.finish) {
        case FinishReason::Length: return "max_tokens";
        case FinishReason::ContextFull: return "model_context_window_exceeded";
        default: return "end_turn";   // an end-of-turn token (or a cancelled job nobody reads)
    }
}

MessageBuilder::MessageBuilder(std::string model_id, uint32_t input_tokens)
    : id_(random_id()), model_(std::move(model_id)), input_tokens_(input_tokens) {}

json MessageBuilder::usage(uint32_t output_tokens) const {
    return {{"input_tokens", input_tokens_}, {"output_tokens", output_tokens}};
}

json MessageBuilder::message(const std::string& text, const Event& done) const {
    return {{"id", id_},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model_},
            {"content", json::array({{{"type", "text"}, {"text", text}}})},
            {"stop_reason", anthropic_stop_reason(done)},
            {"stop_sequence", stop_sequence(done)},
            {"usage", usage(done.completion_tokens)}};
}

std::string MessageBuilder::stream_start() const {
    const json msg = {{"id", id_},
                      {"type", "message"},
                      {"role", "assistant"},
                      {"model", model_},
                      {"content", json::array()},
                      {"stop_reason", nullptr},
                      {"stop_sequence", nullptr},
                      {"usage", usage(0)}};
    return sse("message_start", {{"type", "message_start"}, {"message", msg}}) +
           sse("content_block_start",
               {{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}}) +
           sse("ping", {{"type", "ping"}});
}

std::string MessageBuilder::stream_text(const std::string& text) const {
    return sse("content_block_delta",
               {{"type", "content_block_delta"}, {"index", 0}, {"delta", {{"type", "text_delta"}, {"text", text}}}});
}

std::string MessageBuilder::stream_end(const Event& done) const {
    const json delta = {{"stop_reason", anthropic_stop_reason(done)}, {"stop_sequence", stop_sequence(done)}};
    return sse("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}) +
           sse("message_delta",
               {{"type", "message_delta"}, {"delta", delta}, {"usage", {{"output_tokens", done.completion_tokens}}}}) +
           sse("message_stop", {{"type", "message_stop"}});
}

std::string MessageBuilder::stream_error(const ApiError& e) { return sse("error", anthropic_error_json(e)); }

}  // namespace ptxlm::server
