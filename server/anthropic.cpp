#include "server/anthropic.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "server/json_fields.h"

namespace ptxlm::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// The top-level fields this endpoint reads; any other is refused by name.
constexpr std::string_view kFields[] = {"model",       "max_tokens", "messages",       "system",  "stream",
                                        "temperature", "top_p",      "top_k",          "stop_sequences",
                                        "metadata",    "tools",      "tool_choice",    "thinking", "cache_control",
                                        "seed"};

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

// Every key of `obj` must be one of `known` (the error names the first other one); a null one counts
// as absent (clients send back the blocks they got with their unset fields as null).
void only_keys(const json& obj, std::initializer_list<std::string_view> known, const std::string& at) {
    for (const auto& [key, value] : obj.items()) {
        bool ok = value.is_null();
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

// The body again, with the client's key order (nlohmann::json sorts keys):
// tool schemas and tool_use inputs keep theirs. Parsed on first use.
class OrderedBody {
public:
    explicit OrderedBody(std::string_view text) : text_(text) {}
    const ordered_json& get() {
        if (!ordered_) ordered_ = ordered_json::parse(text_);
        return *ordered_;
    }

private:
    std::string_view text_;
    std::optional<ordered_json> ordered_;
};

void check_cache_control(const json& obj, const std::string& at) {
    if (const json* c = get(obj, "cache_control"); c && !c->is_object())
        wrong_type(at + ".cache_control", "an object", *c);
}

// A content block's type, after checking it is an object with a string type.
std::string block_type(const json& block, const std::string& at) {
    if (!block.is_object()) wrong_type(at, "an object (a content block)", block);
    const json* type = get(block, "type");
    if (!type || !type->is_string()) bad(at + ".type", "'" + at + ".type' must be a string (\"text\", ...)");
    return type->get<std::string>();
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& at) {
    bad(at + ".type", "unsupported content block type '" + type + "' in '" + at +
                          "': this server reads text blocks, tool_use blocks in assistant messages and tool_result "
                          "blocks in user messages (no images or documents)");
}

// A text content block {"type": "text", "text": ...}; `cache_control` is a
// no-op (the slots cache prefixes on their own).
std::string text_block(const json& block, const std::string& at) {
    const std::string t = block_type(block, at);
    if (t != "text") unsupported_block(t, at);
    only_keys(block, {"type", "text", "cache_control", "citations"}, at);
    if (const json* c = get(block, "citations"); c && !(c->is_array() && c->empty()))
        bad(at + ".citations", "'" + at + ".citations' is not supported by this server");
    check_cache_control(block, at);
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

// Anthropic's limit on tool names; at most as many tools as the chat endpoint takes.
constexpr size_t kMaxTools = 128;

// tools: [{name, description?, input_schema, cache_control?}] (client tools; their `type` absent or
// "custom") as the chat endpoint's [{type: "function", function: {name, description, parameters}}].
// Returns the names, in order.
std::vector<std::string> parse_tools(const json& body, OrderedBody& ordered, CompletionRequest& r) {
    std::vector<std::string> names;
    const json* t = get(body, "tools");
    if (!t) return names;
    if (!t->is_array()) wrong_type("tools", "an array", *t);
    if (t->size() > kMaxTools)
        bad("tools", "'tools' holds " + std::to_string(t->size()) + " tools; at most " + std::to_string(kMaxTools) +
                         " are allowed");
    ordered_json functions = ordered_json::array();
    for (size_t i = 0; i < t->size(); ++i) {
        const json& tool = (*t)[i];
        const std::string at = "tools[" + std::to_string(i) + "]";
        if (!tool.is_object()) wrong_type(at, "an object (a tool)", tool);
        if (const json* type = get(tool, "type"); type && *type != "custom")
            bad(at + ".type", "unsupported tool type " + type->dump() + " in '" + at +
                                  "': this server runs no server tools (web search, code execution, ...); a client "
                                  "tool has no type or \"custom\"");
        only_keys(tool, {"type", "name", "description", "input_schema", "cache_control"}, at);
        const std::string name = string_field(tool, "name", at + ".name");
        if (!valid_function_name(name)) bad(at + ".name", function_name_error(at + ".name", name));
        if (std::find(names.begin(), names.end(), name) != names.end())
            bad(at + ".name", "two tools are named '" + name + "'");
        names.push_back(name);
        const json* description = get(tool, "description");
        if (description && !description->is_string()) wrong_type(at + ".description", "a string", *description);
        const json& schema = required(tool, "input_schema", at + ".input_schema");
        if (!schema.is_object()) wrong_type(at + ".input_schema", "an object (a JSON Schema)", schema);
        if (const json* type = get(schema, "type"); !type || *type != "object")
            bad(at + ".input_schema.type", "'" + at + ".input_schema.type' must be \"object\"");
        check_cache_control(tool, at);
        const ordered_json& sent = ordered.get().at("tools").at(i);
        ordered_json function = {{"name", name}};
        if (description) function["description"] = sent.at("description");
        function["parameters"] = sent.at("input_schema");
        functions.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    if (!functions.empty()) r.tools = std::move(functions);
    return names;
}

// tool_choice: {"type": "auto" | "any" | "tool" (with "name") | "none", "disable_parallel_tool_use"?}.
void parse_tool_choice(const json& body, const std::vector<std::string>& names, CompletionRequest& r) {
    r.tool_choice = r.tools.is_null() ? "none" : "auto";
    const json* c = get(body, "tool_choice");
    if (!c) return;
    if (!c->is_object()) wrong_type("tool_choice", "an object ({\"type\": \"auto\"}, ...)", *c);
    only_keys(*c, {"type", "name", "disable_parallel_tool_use"}, "tool_choice");
    const json* type = get(*c, "type");
    const std::string t = type && type->is_string() ? type->get<std::string>() : "";
    std::string choice;
    if (t == "auto" || t == "none") {
        choice = t;
    } else if (t == "any") {
        choice = "required";
    } else if (t == "tool") {
        choice = string_field(*c, "name", "tool_choice.name");
        if (std::find(names.begin(), names.end(), choice) == names.end())
            bad("tool_choice", "'tool_choice' names the tool '" + choice + "', which is not in 'tools'");
    } else {
        bad("tool_choice", "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"" +
                               (type ? " (got " + type->dump() + ")" : std::string(" (it is missing)")));
    }
    if (t != "tool" && get(*c, "name"))
        bad("tool_choice.name", "'tool_choice.name' goes with {\"type\": \"tool\"} only");
    if (const json* d = get(*c, "disable_parallel_tool_use")) {
        if (!d->is_boolean()) wrong_type("tool_choice.disable_parallel_tool_use", "a boolean", *d);
        r.parallel_tool_calls = !d->get<bool>();
    }
    if (r.tools.is_null() && t == "any") bad("tool_choice", "'tool_choice' {\"type\": \"any\"} needs 'tools'");
    if (!r.tools.is_null()) r.tool_choice = choice;
}

// The tool_use blocks of the assistant turns so far: what a tool_result may answer.
struct ToolUse {
    std::string id, name;
};

// {"type": "tool_use", "id", "name", "input": {...}}: the call, its input as the client wrote it.
ChatToolCall tool_use_block(const json& block, const std::string& at, const ordered_json& sent) {
    only_keys(block, {"type", "id", "name", "input", "cache_control"}, at);
    ChatToolCall call;
    call.id = string_field(block, "id", at + ".id");
    if (call.id.empty()) bad(at + ".id", "'" + at + ".id' must not be empty");
    call.name = string_field(block, "name", at + ".name");
    const json& input = required(block, "input", at + ".input");
    if (!input.is_object()) wrong_type(at + ".input", "an object", input);
    check_cache_control(block, at);
    call.arguments = sent.at("input").dump();
    return call;
}

// {"type": "tool_result", "tool_use_id", "content"?: string or text blocks, "is_error"?}: a role "tool"
// message answering an earlier tool_use block.
ChatMessage tool_result_block(const json& block, const std::string& at, const std::vector<ToolUse>& uses) {
    only_keys(block, {"type", "tool_use_id", "content", "is_error", "cache_control"}, at);
    ChatMessage m{"tool", ""};
    m.tool_call_id = string_field(block, "tool_use_id", at + ".tool_use_id");
    const auto use = std::find_if(uses.begin(), uses.end(), [&](const ToolUse& u) { return u.id == m.tool_call_id; });
    if (use == uses.end())
        bad(at + ".tool_use_id", "'" + at + ".tool_use_id' (\"" + m.tool_call_id +
                                     "\") answers no tool_use block of an earlier assistant message");
    m.name = use->name;
    if (const json* c = get(block, "content")) m.content = text_content(*c, at + ".content");
    if (const json* e = get(block, "is_error")) {
        if (!e->is_boolean()) wrong_type(at + ".is_error", "a boolean", *e);
        if (e->get<bool>()) m.content = "Error: " + m.content;
    }
    check_cache_control(block, at);
    return m;
}

// One message's content as chat messages: the turn's text (text blocks joined by newlines) and, for
// an assistant, its tool_use blocks as tool_calls; a user's tool_result blocks as role "tool"
// messages, returned ahead of the turn (which is absent when the user sent only tool results).
// Thinking blocks of an earlier answer (the client sends back what it got) are dropped: Anthropic
// drops earlier turns' thinking too.
std::vector<ChatMessage> message_content(const json& content, const std::string& at, const std::string& role,
                                         const ordered_json& sent, std::vector<ToolUse>& uses) {
    if (content.is_string()) return {ChatMessage{role, content.get<std::string>()}};
    if (!content.is_array()) wrong_type(at, "a string or an array of content blocks", content);
    ChatMessage turn{role, ""};
    std::vector<ChatMessage> out;
    bool text = content.empty();   // whether the turn has text (an empty array: an empty turn)
    for (size_t j = 0; j < content.size(); ++j) {
        const json& block = content[j];
        const std::string bat = at + "[" + std::to_string(j) + "]";
        const std::string type = block_type(block, bat);
        if (type == "tool_use" || type == "tool_result") {
            const char* belongs = type == "tool_use" ? "assistant" : "user";
            if (role != belongs)
                bad(bat + ".type", "a " + type + " block belongs in " + (role == "user" ? "an assistant" : "a user") +
                                       " message ('" + bat + "' is in " + (role == "user" ? "a user" : "an assistant") +
                                       " message)");
            if (type == "tool_use") {
                turn.tool_calls.push_back(tool_use_block(block, bat, sent.at(j)));
                uses.push_back({turn.tool_calls.back().id, turn.tool_calls.back().name});
            } else {
                out.push_back(tool_result_block(block, bat, uses));
            }
        } else if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") {
            only_keys(block, {"type", "thinking", "signature", "data", "cache_control"}, bat);
        } else {
            const std::string t = text_block(block, bat);
            if (text) turn.content += '\n';
            turn.content += t;
            text = true;
        }
    }
    if (text || out.empty()) out.push_back(std::move(turn));
    return out;
}

void parse_conversation(const json& body, OrderedBody& ordered, CompletionRequest& r) {
    if (const json* s = get(body, "system")) {
        const std::string system = text_content(*s, "system");
        // An empty system prompt is no system prompt.
        if (!system.empty()) r.messages.push_back({"system", system});
    }
    const json& msgs = required(body, "messages", "messages");
    if (!msgs.is_array()) wrong_type("messages", "an array", msgs);
    if (msgs.empty()) bad("messages", "'messages' must hold at least one message");
    std::vector<ToolUse> uses;
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
        const json& content = required(m, "content", at + ".content");
        // Only a message with a tool_use block needs the key order (of its inputs).
        static const ordered_json kNone = ordered_json::array();
        const bool uses_tools = content.is_array() && std::any_of(content.begin(), content.end(), [](const json& b) {
            const json* type = b.is_object() ? get(b, "type") : nullptr;
            return type && *type == "tool_use";
        });
        const ordered_json& sent = uses_tools ? ordered.get().at("messages").at(i).at("content") : kNone;
        for (ChatMessage& msg : message_content(content, at + ".content", role, sent, uses)) {
            // Consecutive turns of one role are one turn, as Anthropic combines them.
            ChatMessage* last = r.messages.empty() ? nullptr : &r.messages.back();
            if (!last || last->role != msg.role || msg.role == "tool") {
                r.messages.push_back(std::move(msg));
                continue;
            }
            if (!last->content.empty() && !msg.content.empty()) last->content += '\n';
            last->content += msg.content;
            for (ChatToolCall& c : msg.tool_calls) last->tool_calls.push_back(std::move(c));
        }
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
    // Disabled thinking is the default: it changes nothing.
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
    // Not Anthropic's: the chat endpoint's seed, so that a sampled answer can be repeated.
    if (const json* s = get(body, "seed")) {
        if (!s->is_number_integer()) wrong_type("seed", "an integer", *s);
        p.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<int64_t>());
        r.seed_given = true;
    }
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

CompletionRequest parse_object(const json& body, std::string_view text, const RequestDefaults& defaults) {
    if (!body.is_object()) bad("", std::string("the request body must be a JSON object, not ") + fields::type_name(body));
    refuse_unsupported(body);
    CompletionRequest r;
    r.endpoint = Endpoint::Chat;
    r.gen.sampling = defaults.sampling;
    r.model = string_field(body, "model", "model");
    parse_generation(body, r);
    OrderedBody ordered(text);
    parse_conversation(body, ordered, r);
    parse_tool_choice(body, parse_tools(body, ordered, r), r);
    return r;
}

std::string alphanumerics(std::mt19937_64& rng, const char* prefix) {
    static const char* chars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    std::string s = prefix;
    for (int i = 0; i < 24; ++i) s += chars[rng() % 62];
    return s;
}

std::string random_id() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    return alphanumerics(rng, "msg_");
}

// JSON text; generated pieces that are not whole UTF-8 characters become U+FFFD.
std::string text_of(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse(const char* name, const json& data) {
    return std::string("event: ") + name + "\ndata: " + text_of(data) + "\n\n";
}

json stop_sequence(const Event& done) { return done.stop.empty() ? json(nullptr) : json(done.stop); }

json text_block_json(const std::string& text) { return {{"type", "text"}, {"text", text}}; }
// A reasoning block; Anthropic signs its own thinking, this server has no signature to give.
json thinking_block_json(const std::string& thinking) {
    return {{"type", "thinking"}, {"thinking", thinking}, {"signature", ""}};
}

}  // namespace

CompletionRequest parse_messages_request(std::string_view body, const RequestDefaults& defaults) {
    const json j = fields::parse_body(body);
    return fields::client_error([&] { return parse_object(j, body, defaults); });
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

const char* anthropic_stop_reason(const Event& done, bool called_tool) {
    if (!done.stop.empty()) return "stop_sequence";
    if (called_tool && done.finish == FinishReason::Stop) return "tool_use";
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

void MessageBuilder::set_output(const tools::Formats& f, bool parallel_tool_calls, uint64_t id_seed) {
    output_ = f;
    parallel_tool_calls_ = parallel_tool_calls;
    id_seed_ = id_seed;
    parser_ = parses() ? std::make_unique<tools::StreamParser>(f, new_id()) : nullptr;
}

std::function<std::string()> MessageBuilder::new_id() const {
    if (output_.tools == tools::Format::MistralJson || output_.tools == tools::Format::MistralArgs)
        return tools::id_source(output_.tools, id_seed_);
    auto rng = std::make_shared<std::mt19937_64>(id_seed_);
    return [rng] { return alphanumerics(*rng, "toolu_"); };
}

json MessageBuilder::message(const std::string& text, const Event& done) const {
    json content = json::array();
    bool called = false;
    if (!parses()) {
        content.push_back(text_block_json(text));
    } else {
        tools::Parsed p = tools::parse(output_, text, new_id());
        if (!parallel_tool_calls_ && p.calls.size() > 1) p.calls.resize(1);
        if (!p.reasoning.empty()) content.push_back(thinking_block_json(p.reasoning));
        if (!p.content.empty() || p.calls.empty()) content.push_back(text_block_json(p.content));
        // The parser checked that each call's arguments are a JSON object's text.
        for (const tools::ToolCall& c : p.calls)
            content.push_back(
                {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::parse(c.arguments)}});
        called = !p.calls.empty();
    }
    return {{"id", id_},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model_},
            {"content", std::move(content)},
            {"stop_reason", anthropic_stop_reason(done, called)},
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
    // The first block opens with its first final piece: it may be text, thinking or a tool_use.
    return sse("message_start", {{"type", "message_start"}, {"message", msg}}) + sse("ping", {{"type", "ping"}});
}

std::string MessageBuilder::stop_block() {
    if (open_ == Block::None) return "";
    open_ = Block::None;
    return sse("content_block_stop", {{"type", "content_block_stop"}, {"index", blocks_ - 1}});
}

std::string MessageBuilder::stream_piece(Block kind, const std::string& text) {
    std::string s;
    if (open_ != kind) {
        s += stop_block();
        open_ = kind;
        const json block = kind == Block::Text ? text_block_json("") : thinking_block_json("");
        s += sse("content_block_start",
                 {{"type", "content_block_start"}, {"index", blocks_++}, {"content_block", block}});
    }
    if (text.empty()) return s;
    const json delta = kind == Block::Text ? json{{"type", "text_delta"}, {"text", text}}
                                           : json{{"type", "thinking_delta"}, {"thinking", text}};
    return s + sse("content_block_delta", {{"type", "content_block_delta"}, {"index", blocks_ - 1}, {"delta", delta}});
}

std::string MessageBuilder::stream_delta(const tools::Delta& d) {
    // Within one delta the text came in this order: reasoning, content, calls.
    std::string s;
    if (!d.reasoning.empty()) s += stream_piece(Block::Thinking, d.reasoning);
    if (!d.content.empty()) s += stream_piece(Block::Text, d.content);
    for (const tools::CallDelta& c : d.calls) {
        if (!parallel_tool_calls_ && c.index > 0) continue;   // one call only
        // Each call arrives whole (tools::StreamParser): its block opens, takes all its input and stops.
        s += stop_block();
        const int index = blocks_++;
        const json block = {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}};
        s += sse("content_block_start", {{"type", "content_block_start"}, {"index", index}, {"content_block", block}});
        s += sse("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", index},
                                         {"delta", {{"type", "input_json_delta"}, {"partial_json", c.arguments}}}});
        s += sse("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
        called_ = true;
    }
    return s;
}

std::string MessageBuilder::stream_text(const std::string& text) {
    if (parser_) return stream_delta(parser_->feed(text));
    tools::Delta d;
    d.content = text;
    return stream_delta(d);
}

std::string MessageBuilder::stream_end(const Event& done) {
    std::string s;
    if (parser_) s += stream_delta(parser_->finish());
    // An answer with no block at all has an empty text block, as the whole message has.
    if (blocks_ == 0) s += stream_piece(Block::Text, "");
    s += stop_block();
    const json delta = {{"stop_reason", anthropic_stop_reason(done, called_)}, {"stop_sequence", stop_sequence(done)}};
    return s +
           sse("message_delta",
               {{"type", "message_delta"}, {"delta", delta}, {"usage", {{"output_tokens", done.completion_tokens}}}}) +
           sse("message_stop", {{"type", "message_stop"}});
}

std::string MessageBuilder::stream_error(const ApiError& e) { return sse("error", anthropic_error_json(e)); }

}  // namespace ptxlm::server
