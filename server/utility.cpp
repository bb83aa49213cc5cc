#include "server/utility.h"

#include <cctype>
#include <initializer_list>
#include <optional>

#include "server/json_fields.h"
#include "server/request.h"

namespace ptxlm::server {

using nlohmann::json;

namespace {

using fields::bad;
using fields::field;
using fields::type_name;
using fields::wrong_type;

// The body as a JSON object whose every field is one of `known`: a field the
// endpoint would not honour is refused rather than dropped.
json parse_body(std::string_view body, const char* endpoint, std::initializer_list<const char*> known) {
    json j = fields::parse_body(body);
    if (!j.is_object()) bad("", std::string("the request body must be a JSON object, not ") + type_name(j));
    for (const auto& [name, value] : j.items()) {
        bool found = false;
        for (const char* k : known) found = found || name == k;
        if (found) continue;
        std::string list;
        for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
        bad(name, "unrecognized request argument supplied: '" + name + "' (" + endpoint + " reads only " + list + ")");
    }
    return j;
}

bool boolean(const json& obj, const char* name, bool fallback) {
    const json* v = field(obj, name);
    if (!v) return fallback;
    if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
    return v->get<bool>();
}

const std::string& required_string(const json& obj, const char* name) {
    const json* v = field(obj, name);
    if (!v) bad(name, std::string("missing required parameter: '") + name + "'");
    if (!v->is_string()) wrong_type(name, "a string", *v);
    return v->get_ref<const std::string&>();
}

// The renderer's rendering of a probe conversation with a system message
// keeps the system text: the template has a place for it (llama.cpp's
// supports_system_role is detected the same way).
bool supports_system_role(const ChatTemplate& t, const Tokenizer& tok) {
    const std::string probe = "<ptxlm system probe>";
    const ChatMessage msgs[] = {{"system", probe}, {"user", "hi"}};
    try {
        const std::string bos = tok.bos() ? std::string(tok.text(*tok.bos())) : std::string();
        const std::string eos = tok.eos() ? std::string(tok.text(*tok.eos())) : std::string();
        return t.render(msgs, true, bos, eos).find(probe) != std::string::npos;
    } catch (const std::invalid_argument&) {
        return false;
    }
}

std::string build_info() {
    std::string s = "ptxlm (";
#if defined(__clang__)
    s += "clang " __clang_version__;
#elif defined(__GNUC__)
    s += "gcc " __VERSION__;
#else
    s += "unknown compiler";
#endif
#ifdef NDEBUG
    s += ", release)";
#else
    s += ", debug)";
#endif
    return s;
}

}  // namespace

ChatOptions chat_options(const CompletionRequest& r) {
    ChatOptions o;
    o.tools = r.tools;
    o.tool_choice = r.tool_choice;
    o.kwargs = r.chat_template_kwargs;
    o.split_reasoning = r.split_reasoning;
    return o;
}

ChatPrompt render_chat_prompt(const LoadedModel& m, std::span<const ChatMessage> msgs, bool add_generation_prompt,
                              const ChatOptions& options) {
    if (!m.chat_template)
        throw ApiError(500, "this model's chat template is not supported (" + m.template_error +
                                "); /v1/completions works, or restart the server with --chat-template NAME",
                       "", "server_error", "chat_template_unsupported");
    try {
        return chat_prompt(*m.tokenizer, *m.chat_template, msgs, add_generation_prompt, options);
    } catch (const std::invalid_argument& e) {
        throw ApiError(400, std::string("the conversation does not fit the model's chat template: ") + e.what(),
                       "messages");
    }
}

json tokenize_response(const LoadedModel& m, std::string_view body) {
    const json j = parse_body(body, "/tokenize", {"content", "add_special", "parse_special", "with_pieces"});
    const std::string& content = required_string(j, "content");
    // add_special: what llama.cpp's vocabulary adds as "special" (BOS, when
    // the vocabulary asks for it; none of ours asks for EOS).
    const bool add_special = boolean(j, "add_special", false);
    const bool parse_special = boolean(j, "parse_special", true);
    const bool with_pieces = boolean(j, "with_pieces", false);
    const Tokenizer& tok = *m.tokenizer;
    std::vector<TokenId> ids;
    try {
        ids = tok.encode(content, add_special && tok.add_bos(), parse_special);
    } catch (const std::invalid_argument& e) {
        throw ApiError(400, std::string("the content cannot be tokenized: ") + e.what(), "content");
    }
    if (!with_pieces) return {{"tokens", ids}};
    json tokens = json::array();
    for (TokenId id : ids) {
        // Control tokens show their text, as llama.cpp's pieces do. A piece
        // that is not whole UTF-8 on its own (a byte of a character split
        // across tokens) is given as its byte values.
        const std::string piece = tok.piece(id, true);
        json p;
        if (utf8_valid(piece)) {
            p = piece;
        } else {
            p = json::array();
            for (unsigned char c : piece) p.push_back(int(c));
        }
        tokens.push_back({{"id", id}, {"piece", std::move(p)}});
    }
    return {{"tokens", std::move(tokens)}};
}

json detokenize_response(const LoadedModel& m, std::string_view body) {
    const json j = parse_body(body, "/detokenize", {"tokens"});
    const json* t = field(j, "tokens");
    if (!t) bad("tokens", "missing required parameter: 'tokens'");
    if (!t->is_array()) wrong_type("tokens", "an array of token ids", *t);
    const Tokenizer& tok = *m.tokenizer;
    std::vector<TokenId> ids;
    ids.reserve(t->size());
    for (const json& v : *t) {
        if (!v.is_number_integer()) wrong_type("tokens", "an array of token ids (integers)", v);
        const bool in_vocab = v.is_number_unsigned() ? v.get<uint64_t>() < uint64_t(tok.n_vocab())
                                                     : v.get<int64_t>() >= 0 && v.get<int64_t>() < tok.n_vocab();
        if (!in_vocab)
            bad("tokens", "'tokens' holds the token id " + v.dump() + "; the vocabulary has ids 0 to " +
                              std::to_string(tok.n_vocab() - 1));
        ids.push_back(v.get<TokenId>());
    }
    // Control tokens are written as their text (llama.cpp's detokenize does
    // the same), so that tokenize then detokenize gives the text back.
    return {{"content", tok.decode(ids, true)}};
}

json apply_template_response(const LoadedModel& m, const ServerOptions& opt, std::string_view body) {
    const json j = parse_body(body, "/apply-template", {"messages", "model", "add_generation_prompt", "tools"});
    if (const json* mo = field(j, "model"); mo && !mo->is_string()) wrong_type("model", "a string", *mo);
    const bool add_generation_prompt = boolean(j, "add_generation_prompt", true);
    // The messages and tools go through the chat endpoint's own parser
    // (roles, content parts, tool definitions, the same errors naming the
    // field), with the key order the body gave.
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body);
    nlohmann::ordered_json chat = nlohmann::ordered_json::object();
    for (const char* k : {"messages", "tools"})
        if (ordered.contains(k)) chat[k] = ordered[k];
    const CompletionRequest r = parse_request(Endpoint::Chat, chat.dump(), opt.defaults);
    return {{"prompt", render_chat_prompt(m, r.messages, add_generation_prompt, chat_options(r)).text}};
}

json props_response(const LoadedModel& m, const ServerOptions& opt) {
    const SamplerParams& p = opt.defaults.sampling;
    // llama.cpp's names. A request without a seed gets a random one, which
    // llama.cpp reports as its "default seed" 4294967295.
    const json params = {{"temperature", p.temperature},
                         {"top_k", p.top_k},
                         {"top_p", p.top_p},
                         {"min_p", p.min_p},
                         {"repeat_last_n", p.penalty_last_n},
                         {"repeat_penalty", p.repeat_penalty},
                         {"presence_penalty", p.presence_penalty},
                         {"frequency_penalty", p.frequency_penalty},
                         {"seed", uint32_t(0xFFFFFFFF)},
                         {"max_tokens", opt.defaults.max_tokens},
                         {"n_predict", opt.defaults.max_tokens}};

    // The template's source when the file's own is in use; the family name
    // when --chat-template chose it or the architecture's built-in stands in.
    std::string chat_template;
    if (m.chat_template) chat_template = m.chat_template->is_jinja() ? m.chat_template->source() : m.chat_template->name();
    const bool system_role = m.chat_template && supports_system_role(*m.chat_template, *m.tokenizer);
    // Tools always work: a template that renders none gets the generic
    // form (engine/chat_prompt.h); these say what the template itself does.
    const ChatTemplate* t = m.chat_template ? &*m.chat_template : nullptr;
    const bool reasoning = t && t->formats().reasoning != tools::Reasoning::None;
    const json caps = {{"supports_tools", t && t->supports_tools()},
                       {"supports_tool_calls", t && t->supports_tool_calls()},
                       {"supports_parallel_tool_calls", t && t->supports_tool_calls()},
                       {"supports_system_role", system_role},
                       {"supports_reasoning", reasoning},
                       {"supports_preserve_reasoning", false}};

    const Tokenizer& tok = *m.tokenizer;
    return {{"default_generation_settings", {{"params", params}, {"n_ctx", m.n_ctx}}},
            {"total_slots", opt.engine.parallel},
            {"model_alias", m.id},
            {"model_path", opt.engine.model_path},
            {"n_ctx", m.n_ctx},
            {"modalities", {{"vision", false}, {"audio", false}}},
            {"chat_template", chat_template},
            {"chat_template_caps", caps},
            {"bos_token", tok.bos() ? std::string(tok.text(*tok.bos())) : std::string()},
            {"eos_token", tok.eos() ? std::string(tok.text(*tok.eos())) : std::string()},
            {"build_info", build_info()}};
}

std::string CorsPolicy::allow_origin(std::string_view origin) const {
    if (origin.empty()) return {};
    for (const std::string& o : origins_) {
        if (o == "*") return "*";
        if (o == origin) return o;
    }
    return {};
}

void check_cors_origin(std::string_view origin) {
    if (origin == "*") return;
    const std::string o(origin);
    auto fail = [&](const std::string& why) {
        throw std::invalid_argument("--cors-origin '" + o + "': " + why +
                                    "; give an origin as browsers send it (http://localhost:3000, "
                                    "https://example.com) or '*' for any");
    };
    size_t host_at = 0;
    if (origin.starts_with("http://")) host_at = 7;
    else if (origin.starts_with("https://")) host_at = 8;
    else fail("the scheme must be http:// or https://");
    const std::string_view rest = origin.substr(host_at);
    if (rest.empty()) fail("no host");
    if (rest.find('/') != std::string_view::npos) fail("an origin has no path (not even a trailing '/')");
    for (char c : rest)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '[' || c == ']'))
            fail(std::string("the character '") + c + "' cannot be in a host or port");
    // A port, when given, is the digits after the last ':' outside an IPv6 [address].
    const size_t bracket = rest.rfind(']'), colon = rest.rfind(':');
    const bool has_port = colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket);
    const std::string_view host = has_port ? rest.substr(0, colon) : rest;
    if (host.empty()) fail("no host");
    if (bracket == std::string_view::npos && host.find(':') != std::string_view::npos)
        fail("an IPv6 address must be in brackets ([::1])");
    if (has_port) {
        const std::string_view port = rest.substr(colon + 1);
        if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos ||
            std::stoi(std::string(port)) > 65535)
            fail("the port must be a number from 0 to 65535");
    }
}

}  // namespace ptxlm::server
