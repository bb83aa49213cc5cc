#include "server/request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/grammar.h"
#include "engine/json_schema.h"
#include "engine/tool_grammar.h"
#include "server/json_fields.h"

namespace ptxlm::server {

using nlohmann::json;

ApiError::ApiError(int status, std::string message, std::string param, std::string type, std::string code)
    : std::runtime_error(std::move(message)),
      status_(status),
      type_(std::move(type)),
      param_(std::move(param)),
      code_(std::move(code)) {}

json error_json(const ApiError& e) {
    json err = {{"message", e.what()}, {"type", e.type()}, {"param", nullptr}, {"code", nullptr}};
    if (!e.param().empty()) err["param"] = e.param();
    if (!e.code().empty()) err["code"] = e.code();
    return {{"error", err}};
}

const char* endpoint_path(Endpoint e) {
    return e == Endpoint::Chat ? "/v1/chat/completions" : "/v1/completions";
}

const RequestFields& request_fields(Endpoint e) {
    // Both endpoints: sampling (OpenAI's and the common extensions top_k,
    // min_p, repeat_penalty), length, stops, streaming, logprobs, seed.
    static const RequestFields chat = {
        {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
         "presence_penalty", "frequency_penalty", "repeat_penalty", "seed", "stop", "stream", "stream_options",
         "logprobs", "top_logprobs", "logit_bias", "n", "tools", "tool_choice", "parallel_tool_calls",
         "response_format", "grammar", "chat_template_kwargs", "reasoning_format", "modalities"},
        {"user", "metadata", "store", "service_tier", "prediction"},
        {"functions", "function_call", "audio", "reasoning_effort", "web_search_options"},
    };
    static const RequestFields completion = {
        {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
         "frequency_penalty", "repeat_penalty", "seed", "stop", "stream", "stream_options", "logprobs", "logit_bias",
         "n", "echo", "best_of", "suffix", "tools", "response_format", "grammar"},
        {"user", "metadata", "store", "service_tier"},
        {},
    };
    return e == Endpoint::Chat ? chat : completion;
}

SamplerParams RequestDefaults::openai_sampling() {
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

namespace {

using fields::bad;
using fields::field;
using fields::type_name;
using fields::wrong_type;

std::string fmt(double v) {
    json j = v;
    return j.dump();
}

std::optional<double> number(const json& obj, const char* name, double lo, double hi, bool lo_open = false) {
    const json* v = field(obj, name);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong_type(name, "a number", *v);
    const double d = v->get<double>();
    // Checked as the float the sampler will hold (1e-300 is 0 there).
    if (!std::isfinite(d) || d > hi || (lo_open ? float(d) <= float(lo) : d < lo))
        bad(name, std::string("invalid '") + name + "': must be " + (lo_open ? "greater than " : "between ") + fmt(lo) +
                      (lo_open ? " and at most " : " and ") + fmt(hi) + " (got " + v->dump() + ")");
    return d;
}

std::optional<int64_t> integer(const json& obj, const char* name, int64_t lo, int64_t hi) {
    const json* v = field(obj, name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) wrong_type(name, "an integer", *v);
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        bad(name, std::string("invalid '") + name + "': must be at most " + std::to_string(hi));
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi)
        bad(name, std::string("invalid '") + name + "': must be between " + std::to_string(lo) + " and " +
                      std::to_string(hi) + " (got " + std::to_string(i) + ")");
    return i;
}

std::optional<bool> boolean(const json& obj, const char* name) {
    const json* v = field(obj, name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
    return v->get<bool>();
}

std::string role_of(const json& m, const std::string& at) {
    const json* r = field(m, "role");
    if (!r) bad(at + ".role", "missing required parameter: '" + at + ".role'");
    if (!r->is_string()) wrong_type(at + ".role", "a string", *r);
    const std::string role = r->get<std::string>();
    if (role == "developer") return "system";   // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
        bad(at + ".role", "unsupported role '" + role + "' in '" + at +
                              "' (supported: system, developer, user, assistant, tool)");
    return role;
}

std::string content_of(const json& m, const std::string& at, const std::string& role) {
    const json* c = field(m, "content");
    if (!c) {
        // An assistant turn may carry no content (OpenAI's tool-call turns).
        if (role == "assistant") return {};
        bad(at + ".content", "missing required parameter: '" + at + ".content'");
    }
    if (c->is_string()) return c->get<std::string>();
    if (!c->is_array()) wrong_type(at + ".content", "a string or an array of text parts", *c);
    // Text parts are joined with newlines; other part types (images, audio) are refused.
    std::string text;
    for (size_t i = 0; i < c->size(); ++i) {
        const json& part = (*c)[i];
        const std::string pat = at + ".content[" + std::to_string(i) + "]";
        if (!part.is_object()) wrong_type(pat, "an object", part);
        const json* type = field(part, "type");
        if (!type || !type->is_string()) bad(pat + ".type", "'" + pat + ".type' must be a string (\"text\")");
        if (type->get<std::string>() != "text")
            bad(pat + ".type", "unsupported content part type '" + type->get<std::string>() + "' in '" + pat +
                                   "': this server reads text parts only");
        const json* t = field(part, "text");
        if (!t) bad(pat + ".text", "missing required parameter: '" + pat + ".text'");
        if (!t->is_string()) wrong_type(pat + ".text", "a string", *t);
        if (i) text += '\n';
        text += t->get<std::string>();
    }
    return text;
}

const std::string& string_field(const json& obj, const char* name, const std::string& at) {
    const json* v = field(obj, name);
    if (!v) bad(at + "." + name, "missing required parameter: '" + at + "." + name + "'");
    if (!v->is_string()) wrong_type(at + "." + name, "a string", *v);
    return v->get_ref<const std::string&>();
}

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}].
std::vector<ChatToolCall> tool_calls_of(const json& m, const std::string& at) {
    std::vector<ChatToolCall> calls;
    const json* tc = field(m, "tool_calls");
    if (!tc) return calls;
    if (!tc->is_array()) wrong_type(at + ".tool_calls", "an array", *tc);
    for (size_t j = 0; j < tc->size(); ++j) {
        const json& c = (*tc)[j];
        const std::string cat = at + ".tool_calls[" + std::to_string(j) + "]";
        if (!c.is_object()) wrong_type(cat, "an object", c);
        if (const json* t = field(c, "type"); t && *t != "function")
            bad(cat + ".type", "'" + cat + ".type' must be \"function\"");
        const json* f = field(c, "function");
        if (!f) bad(cat + ".function", "missing required parameter: '" + cat + ".function'");
        if (!f->is_object()) wrong_type(cat + ".function", "an object", *f);
        ChatToolCall call;
        call.id = string_field(c, "id", cat);
        call.name = string_field(*f, "name", cat + ".function");
        call.arguments = string_field(*f, "arguments", cat + ".function");
        // Templates render the arguments as an object: they must be one.
        const json args = json::parse(call.arguments, nullptr, false);
        if (!args.is_object())
            bad(cat + ".function.arguments", "'" + cat + ".function.arguments' must be a JSON object's text");
        calls.push_back(std::move(call));
    }
    return calls;
}

void parse_messages(const json& body, CompletionRequest& r) {
    const json* msgs = field(body, "messages");
    if (!msgs) bad("messages", "missing required parameter: 'messages'");
    if (!msgs->is_array()) wrong_type("messages", "an array", *msgs);
    if (msgs->empty()) bad("messages", "'messages' must hold at least one message");
    std::vector<std::string> call_ids;   // of the assistant turns so far: what tool messages may answer
    for (size_t i = 0; i < msgs->size(); ++i) {
        const json& m = (*msgs)[i];
        const std::string at = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) wrong_type(at, "an object", m);
        const std::string role = role_of(m, at);
        ChatMessage msg{role, content_of(m, at, role)};
        if (role == "assistant") {
            msg.tool_calls = tool_calls_of(m, at);
            for (const ChatToolCall& c : msg.tool_calls) call_ids.push_back(c.id);
        } else if (field(m, "tool_calls")) {
            bad(at + ".tool_calls", "only assistant messages carry 'tool_calls'");
        }
        if (role == "tool") {
            msg.tool_call_id = string_field(m, "tool_call_id", at);
            if (std::find(call_ids.begin(), call_ids.end(), msg.tool_call_id) == call_ids.end())
                bad(at + ".tool_call_id", "'" + at + ".tool_call_id' (\"" + msg.tool_call_id +
                                              "\") answers no tool call of an earlier assistant message");
            if (const json* n = field(m, "name")) {
                if (!n->is_string()) wrong_type(at + ".name", "a string", *n);
                msg.name = n->get<std::string>();
            }
        }
        r.messages.push_back(std::move(msg));
    }
}

// OpenAI's limits: 128 functions, names of [a-zA-Z0-9_-]{1,64}.
constexpr size_t kMaxTools = 128;


// tools: [{type: "function", function: {name, description?, parameters?, strict?}}], kept as sent
// (`ordered`: the body with its key order, which templates and schemas keep).
void parse_tools(const json& body, const nlohmann::ordered_json& ordered, CompletionRequest& r) {
    const json* t = field(body, "tools");
    std::vector<std::string> names;
    if (t) {
        if (!t->is_array()) wrong_type("tools", "an array", *t);
        if (t->size() > kMaxTools)
            bad("tools", "'tools' holds " + std::to_string(t->size()) + " tools; at most " + std::to_string(kMaxTools) +
                             " are allowed");
        for (size_t i = 0; i < t->size(); ++i) {
            const json& tool = (*t)[i];
            const std::string at = "tools[" + std::to_string(i) + "]";
            if (!tool.is_object()) wrong_type(at, "an object", tool);
            const std::string& type = string_field(tool, "type", at);
            if (type != "function")
                bad(at + ".type", "unsupported tool type '" + type + "' in '" + at + "' (supported: function)");
            const json* f = field(tool, "function");
            if (!f) bad(at + ".function", "missing required parameter: '" + at + ".function'");
            if (!f->is_object()) wrong_type(at + ".function", "an object", *f);
            const std::string& name = string_field(*f, "name", at + ".function");
            if (!valid_function_name(name)) bad(at + ".function.name", function_name_error(at + ".function.name", name));
            if (std::find(names.begin(), names.end(), name) != names.end())
                bad(at + ".function.name", "two tools are named '" + name + "'");
            names.push_back(name);
            if (const json* d = field(*f, "description"); d && !d->is_string())
                wrong_type(at + ".function.description", "a string", *d);
            if (const json* p = field(*f, "parameters"); p && !p->is_object())
                wrong_type(at + ".function.parameters", "an object (a JSON Schema)", *p);
            if (const json* s = field(*f, "strict"); s && !s->is_boolean())
                wrong_type(at + ".function.strict", "a boolean", *s);
            for (const auto& [key, v] : f->items())
                if (!v.is_null() && key != "name" && key != "description" && key != "parameters" && key != "strict")
                    bad(at + ".function." + key, "unrecognized field '" + key + "' in '" + at + ".function'");
        }
        if (!t->empty()) r.tools = ordered.at("tools");
    }
    const json* c = field(body, "tool_choice");
    if (!c) {
        r.tool_choice = r.tools.is_null() ? "none" : "auto";
    } else if (c->is_string()) {
        r.tool_choice = c->get<std::string>();
        if (r.tool_choice != "none" && r.tool_choice != "auto" && r.tool_choice != "required")
            bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                               "{\"type\": \"function\", \"function\": {\"name\": ...}} (got \"" + r.tool_choice + "\")");
    } else if (c->is_object()) {
        const json* f = field(*c, "function");
        if (const json* ty = field(*c, "type"); !ty || *ty != "function" || !f || !f->is_object())
            bad("tool_choice", "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        r.tool_choice = string_field(*f, "name", "tool_choice.function");
        if (std::find(names.begin(), names.end(), r.tool_choice) == names.end())
            bad("tool_choice", "'tool_choice' names the function '" + r.tool_choice + "', which is not in 'tools'");
    } else {
        wrong_type("tool_choice", "a string or an object", *c);
    }
    if (r.tools.is_null() && r.tool_choice != "none" && r.tool_choice != "auto")
        bad("tool_choice", "'tool_choice' \"" + r.tool_choice + "\" needs 'tools'");
    if (r.tools.is_null()) r.tool_choice = "none";
    if (auto p = boolean(body, "parallel_tool_calls")) r.parallel_tool_calls = *p;
}

void parse_prompt(const json& body, CompletionRequest& r) {
    const json* p = field(body, "prompt");
    if (!p) bad("prompt", "missing required parameter: 'prompt'");
    if (p->is_string()) {
        r.prompt = p->get<std::string>();
        return;
    }
    if (!p->is_array()) wrong_type("prompt", "a string, an array of strings or an array of token ids", *p);
    if (p->empty()) bad("prompt", "'prompt' must not be an empty array");
    const json& first = (*p)[0];
    if (first.is_number_integer()) {
        std::vector<TokenId> ids;
        for (const json& t : *p) {
            if (!t.is_number_integer()) wrong_type("prompt", "an array of token ids (integers)", t);
            if (t.is_number_unsigned() ? t.get<uint64_t>() > uint64_t(std::numeric_limits<TokenId>::max())
                                       : t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<TokenId>::max())
                bad("prompt", "'prompt' holds a token id out of range: " + t.dump());
            ids.push_back(t.get<TokenId>());
        }
        r.prompt_ids = std::move(ids);
        return;
    }
    // A batch of prompts would need one choice each: this server answers one (n = 1).
    if (p->size() > 1)
        bad("prompt", "'prompt' holds " + std::to_string(p->size()) +
                          " prompts; this server answers one prompt per request (send them separately)");
    if (first.is_string()) {
        r.prompt = first.get<std::string>();
        return;
    }
    if (first.is_array()) {
        json inner = {{"prompt", first}};
        if (!first.empty() && first[0].is_number_integer()) {
            parse_prompt(inner, r);
            return;
        }
    }
    wrong_type("prompt", "a string, an array of strings or an array of token ids", first);
}

void parse_stop(const json& body, CompletionRequest& r) {
    const json* s = field(body, "stop");
    if (!s) return;
    std::vector<std::string> stops;
    if (s->is_string()) {
        stops.push_back(s->get<std::string>());
    } else if (s->is_array()) {
        if (s->size() > 4) bad("stop", "'stop' holds " + std::to_string(s->size()) + " strings; at most 4 are allowed");
        for (const json& x : *s) {
            if (!x.is_string()) wrong_type("stop", "a string or an array of strings", x);
            stops.push_back(x.get<std::string>());
        }
    } else {
        wrong_type("stop", "a string or an array of strings", *s);
    }
    for (const std::string& x : stops)
        if (x.empty()) bad("stop", "a stop string must not be empty");
    r.gen.stop = std::move(stops);
}

void parse_sampling(const json& body, CompletionRequest& r) {
    SamplerParams& p = r.gen.sampling;
    if (auto v = number(body, "temperature", 0, 2)) p.temperature = float(*v);
    if (auto v = number(body, "top_p", 0, 1, true)) p.top_p = float(*v);
    // top_k: 0 or -1 (vLLM's spelling) turn it off.
    if (auto v = integer(body, "top_k", -1, std::numeric_limits<int32_t>::max())) p.top_k = *v < 0 ? 0 : int32_t(*v);
    if (auto v = number(body, "min_p", 0, 1)) p.min_p = float(*v);
    if (auto v = number(body, "presence_penalty", -2, 2)) p.presence_penalty = float(*v);
    if (auto v = number(body, "frequency_penalty", -2, 2)) p.frequency_penalty = float(*v);
    if (auto v = number(body, "repeat_penalty", 0, 10, true)) p.repeat_penalty = float(*v);
    if (const json* s = field(body, "seed")) {
        if (!s->is_number_integer()) wrong_type("seed", "an integer", *s);
        p.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<int64_t>());
        r.seed_given = true;
    }
}

void parse_logit_bias(const json& body, CompletionRequest& r) {
    const json* b = field(body, "logit_bias");
    if (!b) return;
    if (!b->is_object()) wrong_type("logit_bias", "an object mapping token ids (as strings) to biases", *b);
    if (b->size() > kMaxLogitBias)
        bad("logit_bias", "'logit_bias' holds " + std::to_string(b->size()) + " tokens; at most " +
                              std::to_string(kMaxLogitBias) + " are allowed");
    for (const auto& [key, value] : b->items()) {
        int64_t id = -1;
        // Canonical decimal only: "05" and "5" would otherwise name one token twice.
        if (!key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos &&
            (key.size() == 1 || key[0] != '0'))
            id = std::stoll(key);
        if (id < 0 || id > std::numeric_limits<int32_t>::max())
            bad("logit_bias", "'logit_bias' keys are token ids written as decimal strings (got \"" + key + "\")");
        if (!value.is_number()) wrong_type("logit_bias", "a number for each token", value);
        const double v = value.get<double>();
        if (!std::isfinite(v) || v < -100 || v > 100)
            bad("logit_bias", "'logit_bias' values must be between -100 and 100 (got " + value.dump() + " for token " +
                                  key + ")");
        r.gen.sampling.logit_bias.emplace_back(int32_t(id), float(v));
    }
}

// Fields that are honoured only at one value (the one that changes nothing)
// and refused by name at any other.
void refuse_unsupported(const json& body, Endpoint ep) {
    if (ep == Endpoint::Completion)
        if (const json* t = field(body, "tools"); t && !(t->is_array() && t->empty()))
            bad("tools", "/v1/completions takes no tools (send them to /v1/chat/completions)");
    if (ep == Endpoint::Chat) {
        if (const json* m = field(body, "modalities"))
            if (!(m->is_array() && m->size() == 1 && (*m)[0] == "text"))
                bad("modalities", "only modalities [\"text\"] are supported");
    }
    if (ep == Endpoint::Completion) {
        if (boolean(body, "echo").value_or(false)) bad("echo", "echo is not supported by this server");
        if (auto b = integer(body, "best_of", 1, 128); b && *b != 1) bad("best_of", "only best_of = 1 is supported");
        if (const json* s = field(body, "suffix")) {
            if (!s->is_string()) wrong_type("suffix", "a string", *s);
            if (!s->get<std::string>().empty()) bad("suffix", "suffix (insertion) is not supported by this server");
        }
    }
}

// Every field of the body must be one the server reads, refuses at some
// values, or knows to be a no-op: anything else is refused by name rather
// than silently dropped (a misspelt "max_token" would otherwise change
// nothing and say nothing). A null field counts as absent.
// response_format (text, json_object, json_schema with its schema) and
// llama-server's `grammar` (GBNF): the grammar the answer follows, checked
// here so that a bad one is the client's 400. `ordered`: the body with its
// key order (a schema's property order is the answer's).
void parse_grammar(const json& body, const nlohmann::ordered_json& ordered, CompletionRequest& r) {
    if (const json* f = field(body, "response_format")) {
        if (!f->is_object()) wrong_type("response_format", "an object", *f);
        const json* type = field(*f, "type");
        if (!type || !type->is_string())
            bad("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
        const std::string t = type->get<std::string>();
        if (t == "json_object") {
            r.grammar = json_object_grammar();
        } else if (t == "json_schema") {
            const json* js = field(*f, "json_schema");
            if (!js || !js->is_object())
                bad("response_format", "'response_format.json_schema' must be an object with a 'schema'");
            for (const auto& [key, v] : js->items())
                if (key != "name" && key != "schema" && key != "strict" && key != "description")
                    bad("response_format", "unrecognized field 'response_format.json_schema." + key + "'");
            if (const json* n = field(*js, "name"); n && !n->is_string())
                wrong_type("response_format", "a string for 'json_schema.name'", *n);
            if (const json* s = field(*js, "strict"); s && !s->is_boolean())
                wrong_type("response_format", "a boolean for 'json_schema.strict'", *s);
            const json* schema = field(*js, "schema");
            if (!schema) bad("response_format", "missing required parameter: 'response_format.json_schema.schema'");
            if (!schema->is_object() && !schema->is_boolean())
                wrong_type("response_format", "an object (a JSON Schema) for 'json_schema.schema'", *schema);
            try {
                r.grammar = json_schema_to_gbnf(ordered.at("response_format").at("json_schema").at("schema"));
            } catch (const SchemaError& e) {
                bad("response_format", std::string("response_format's JSON Schema: ") + e.what());
            }
        } else if (t != "text") {
            bad("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\" (got \"" +
                                       t + "\")");
        }
        if (!r.grammar.empty()) r.grammar_field = "response_format";
    }
    if (const json* g = field(body, "grammar")) {
        if (!g->is_string()) wrong_type("grammar", "a string (GBNF)", *g);
        if (!r.grammar.empty()) bad("grammar", "'grammar' and a JSON 'response_format' exclude each other");
        r.grammar = g->get<std::string>();
        r.grammar_field = "grammar";
    }
    if (r.grammar.empty()) return;
    if (!r.tools.is_null() && r.tool_choice != "none")
        bad(r.grammar_field, "'" + r.grammar_field + "' and tools exclude each other (tool calls follow their own grammar)");
    try {
        grammar::Grammar::parse(r.grammar);
    } catch (const grammar::GrammarError& e) {
        bad(r.grammar_field, e.what());
    }
}

void check_fields(const json& body, Endpoint ep) {
    const RequestFields& known = request_fields(ep);
    for (const auto& [key, value] : body.items()) {
        if (value.is_null()) continue;
        const auto in = [&](const std::vector<std::string_view>& list) {
            return std::find(list.begin(), list.end(), key) != list.end();
        };
        if (in(known.honoured) || in(known.no_ops)) continue;
        if (in(known.refused))
            bad(key, "'" + key + "' is not supported by this server (it would change the output, so it is refused "
                                 "rather than ignored)");
        bad(key, "unrecognized request argument supplied: '" + key + "' (" + endpoint_path(ep) +
                     " reads the fields listed in README.md, \"Serving\")");
    }
}

CompletionRequest parse_object(Endpoint ep, const json& body, std::string_view text, const RequestDefaults& defaults) {
    if (!body.is_object()) bad("", std::string("the request body must be a JSON object, not ") + type_name(body));
    CompletionRequest r;
    r.endpoint = ep;
    r.gen.sampling = defaults.sampling;
    r.gen.max_tokens = defaults.max_tokens;
    if (const json* m = field(body, "model")) {
        if (!m->is_string()) wrong_type("model", "a string", *m);
        r.model = m->get<std::string>();
    }
    if (ep == Endpoint::Chat) parse_messages(body, r);
    else parse_prompt(body, r);
    check_fields(body, ep);
    refuse_unsupported(body, ep);
    if (ep == Endpoint::Chat) {
        // The tools' schemas keep the client's key order (templates print
        // them; a schema's property order is the answer's), which `body`
        // (sorted keys) has lost.
        nlohmann::ordered_json ordered;
        if (field(body, "tools") || field(body, "response_format") || field(body, "chat_template_kwargs"))
            ordered = nlohmann::ordered_json::parse(text);
        parse_tools(body, ordered, r);
        parse_grammar(body, ordered, r);
        if (const json* k = field(body, "chat_template_kwargs")) {
            if (!k->is_object()) wrong_type("chat_template_kwargs", "an object", *k);
            for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
                if (k->contains(reserved))
                    bad("chat_template_kwargs", std::string("'chat_template_kwargs' may not set '") + reserved + "'");
            r.chat_template_kwargs = ordered.at("chat_template_kwargs");
        }
        if (const json* f = field(body, "reasoning_format")) {
            if (!f->is_string() || (*f != "auto" && *f != "deepseek" && *f != "none"))
                bad("reasoning_format", "'reasoning_format' must be \"auto\", \"deepseek\" or \"none\"");
            r.split_reasoning = *f != "none";
        }
    } else {
        nlohmann::ordered_json ordered;
        if (field(body, "response_format")) ordered = nlohmann::ordered_json::parse(text);
        parse_grammar(body, ordered, r);
    }
    if (auto n = integer(body, "n", 1, kMaxChoices)) r.n = int(*n);

    constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
    std::optional<int64_t> max_tokens = integer(body, "max_tokens", 1, kMaxTokens);
    if (ep == Endpoint::Chat)
        if (auto v = integer(body, "max_completion_tokens", 1, kMaxTokens)) max_tokens = v;
    if (max_tokens) r.gen.max_tokens = int32_t(*max_tokens);

    parse_sampling(body, r);
    parse_logit_bias(body, r);
    parse_stop(body, r);

    r.stream = boolean(body, "stream").value_or(false);
    if (const json* so = field(body, "stream_options")) {
        if (!so->is_object()) wrong_type("stream_options", "an object", *so);
        r.include_usage = boolean(*so, "include_usage").value_or(false);
    }

    if (ep == Endpoint::Chat) {
        const bool lp = boolean(body, "logprobs").value_or(false);
        const std::optional<int64_t> top = integer(body, "top_logprobs", 0, 20);
        if (top && !lp) bad("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
        if (lp) r.logprobs = int(top.value_or(0));
    } else {
        if (auto v = integer(body, "logprobs", 0, 5)) r.logprobs = int(*v);
    }
    return r;
}

}  // namespace

bool valid_function_name(const std::string& n) {
    if (n.empty() || n.size() > 64 || n == "auto" || n == "none" || n == "required") return false;
    for (const char c : n)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
    return true;
}

std::string function_name_error(const std::string& param, const std::string& name) {
    return "'" + param + "' must be 1 to 64 letters, digits, '_' or '-', and not auto, none or required (got \"" +
           name + "\")";
}

CompletionRequest parse_request(Endpoint ep, std::string_view body, const RequestDefaults& defaults) {
    const json j = fields::parse_body(body);
    return fields::client_error([&] { return parse_object(ep, j, body, defaults); });
}

}  // namespace ptxlm::server
