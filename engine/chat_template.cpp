#include "engine/chat_template.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace ptxlm {

namespace {

struct Named { const char* name; ChatTemplate::Family family; };
constexpr Named kNames[] = {
    {"chatml", ChatTemplate::Family::ChatML}, {"gemma", ChatTemplate::Family::Gemma},
    {"llama3", ChatTemplate::Family::Llama3}, {"llama2", ChatTemplate::Family::Llama2},
    {"mistral", ChatTemplate::Family::Mistral}, {"phi3", ChatTemplate::Family::Phi3},
};

// Architectures whose files may lack a template, and the family their
// models are trained on.
struct ArchDefault { const char* arch; ChatTemplate::Family family; };
constexpr ArchDefault kArchDefaults[] = {
    {"gemma", ChatTemplate::Family::Gemma}, {"gemma2", ChatTemplate::Family::Gemma},
    {"gemma3", ChatTemplate::Family::Gemma}, {"phi3", ChatTemplate::Family::Phi3},
};

std::string name_list() {
    std::string l;
    for (const Named& n : kNames) l += (l.empty() ? "" : ", ") + std::string(n.name);
    return l;
}

bool has(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

// Jinja's trim (Python's str.strip() on ASCII whitespace).
std::string trim(std::string_view s) {
    const char* ws = " \t\n\r\f\v";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

// The first 60 bytes of a template for an error message: on one line, never
// cutting a UTF-8 sequence.
std::string head_of(std::string_view src) {
    size_t n = std::min<size_t>(src.size(), 60);
    while (n > 0 && n < src.size() && (static_cast<unsigned char>(src[n]) & 0xC0) == 0x80) --n;
    std::string h(src.substr(0, n));
    for (char& c : h)
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    return h + (n < src.size() ? "..." : "");
}

[[noreturn]] void unrecognised(std::string_view src, std::string_view why = "") {
    throw std::invalid_argument("unrecognised chat template (" + head_of(src) + ")" +
                                (why.empty() ? std::string() : ", " + std::string(why)) +
                                "; choose one with --chat-template NAME (" + name_list() + ")");
}

// A Jinja string literal's text with its escapes (\n, \t, \", \', \\) read.
std::string unescape(std::string_view lit) {
    std::string out;
    for (size_t i = 0; i < lit.size(); ++i) {
        if (lit[i] == '\\' && i + 1 < lit.size()) {
            const char c = lit[++i];
            out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
        } else {
            out += lit[i];
        }
    }
    return out;
}

// The literal of `'<|im_start|>system\n TEXT <|im_end|>\n'` in a ChatML
// template: its built-in system prompt.
std::string chatml_default_system(std::string_view src) {
    // The newline after "system" may be written as an escape or literally.
    for (const char* open : {"'<|im_start|>system\\n", "\"<|im_start|>system\\n", "'<|im_start|>system\n",
                             "\"<|im_start|>system\n"}) {
        const char quote = open[0];
        for (size_t at = src.find(open); at != std::string_view::npos; at = src.find(open, at + 1)) {
            const size_t b = at + std::string_view(open).size();
            const size_t e = src.find("<|im_end|>", b);
            if (e == std::string_view::npos) continue;
            std::string_view lit = src.substr(b, e - b);
            if (lit.empty() || lit.find(quote) != std::string_view::npos) continue;   // not one literal
            return unescape(lit);
        }
    }
    return {};
}

// `set date_string = "26 Jul 2024"` in a Llama 3.1 template.
std::optional<std::string> llama3_fixed_date(std::string_view src) {
    for (const char* open : {"set date_string = \"", "set date_string = '"}) {
        const size_t at = src.find(open);
        if (at == std::string_view::npos) continue;
        const size_t b = at + std::string_view(open).size();
        const size_t e = src.find(open[std::string_view(open).size() - 1], b);
        if (e != std::string_view::npos) return unescape(src.substr(b, e - b));
    }
    return std::nullopt;
}

// strftime_now("%d %b %Y") as Python's datetime.now() writes it (local time, C locale).
std::string today() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[32];
    const size_t n = std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
    return std::string(buf, n);
}

void check_known_roles(std::span<const ChatMessage> msgs, bool tool_role) {
    for (const ChatMessage& m : msgs)
        if (m.role != "system" && m.role != "user" && m.role != "assistant" && !(tool_role && m.role == "tool"))
            throw std::invalid_argument("unknown chat role '" + m.role + "' (use system, user, assistant" +
                                        (tool_role ? ", tool)" : ")"));
}

// The families' rule: roles known, a system message only first.
void check_roles(std::span<const ChatMessage> msgs) {
    check_known_roles(msgs, false);
    for (const ChatMessage& m : msgs)
        if (!m.tool_calls.empty()) throw std::invalid_argument("this chat template renders no tool calls");
    for (size_t i = 1; i < msgs.size(); ++i)
        if (msgs[i].role == "system") throw std::invalid_argument("a system message may only come first");
}

// Where each message's content sits in a family's rendering (families may
// trim it). Contents are found in order; one the family dropped is skipped.
std::vector<std::pair<size_t, size_t>> content_ranges(const std::string& text, std::span<const ChatMessage> msgs) {
    std::vector<std::pair<size_t, size_t>> ranges;
    size_t cursor = 0;
    for (const ChatMessage& m : msgs) {
        std::string_view c = m.content;
        size_t at = c.empty() ? std::string::npos : text.find(c, cursor);
        if (at == std::string::npos) {
            const size_t b = c.find_first_not_of(" \t\r\n");
            if (b == std::string_view::npos) continue;
            c = c.substr(b, c.find_last_not_of(" \t\r\n") - b + 1);
            at = text.find(c, cursor);
            if (at == std::string::npos) continue;
        }
        ranges.emplace_back(at, at + c.size());
        cursor = at + c.size();
    }
    return ranges;
}

// After an optional system message, user and assistant must alternate,
// starting with the user (Gemma, Llama 2, Mistral).
void check_alternation(std::span<const ChatMessage> msgs) {
    const size_t first = !msgs.empty() && msgs[0].role == "system" ? 1 : 0;
    for (size_t i = first; i < msgs.size(); ++i)
        if ((msgs[i].role == "user") != ((i - first) % 2 == 0))
            throw std::invalid_argument("conversation roles must alternate user/assistant/user/... after the system message");
}

std::string read_template_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::invalid_argument("--chat-template-file: cannot read " + path + ": " + std::strerror(errno));
    std::string s(std::istreambuf_iterator<char>(f), {});
    if (f.bad()) throw std::invalid_argument("--chat-template-file: cannot read " + path);
    return s;
}

}  // namespace

nlohmann::ordered_json messages_json(std::span<const ChatMessage> msgs) {
    using oj = nlohmann::ordered_json;
    oj out = oj::array();
    for (const ChatMessage& m : msgs) {
        // Content is always a string: templates that index or measure it
        // (Mistral's) fail on null, and those that test it take "" as none.
        oj j = {{"role", m.role}, {"content", m.content}};
        if (!m.tool_calls.empty()) {
            oj calls = oj::array();
            for (const ChatToolCall& c : m.tool_calls) {
                oj args = oj::parse(c.arguments, nullptr, false);
                if (args.is_discarded()) args = c.arguments;   // checked by the caller; kept as text otherwise
                calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", std::move(args)}}}});
            }
            j["tool_calls"] = std::move(calls);
        }
        if (m.role == "tool") {
            j["tool_call_id"] = m.tool_call_id;
            if (!m.name.empty()) j["name"] = m.name;
        }
        out.push_back(std::move(j));
    }
    return out;
}

jinja::Value chat_context(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                          bool add_generation_prompt, std::string_view bos, std::string_view eos,
                          const nlohmann::ordered_json& kwargs) {
    jinja::Value msgs = jinja::from_json(messages);
    if (msgs.is_list())
        for (jinja::Value& m : msgs.as_list())
            if (m.is_dict())
                if (const jinja::Value* r = m.as_dict().find("role"); r && r->is_string())
                    m.as_dict().set(jinja::Value("role"), jinja::Value::code(r->as_string()));
    jinja::Value ctx = jinja::Value::dict();
    jinja::Dict& d = ctx.as_dict();
    d.set(jinja::Value("messages"), std::move(msgs));
    d.set(jinja::Value("tools"), tools.is_null() ? jinja::Value(nullptr) : jinja::from_json(tools));
    d.set(jinja::Value("add_generation_prompt"), jinja::Value(add_generation_prompt));
    d.set(jinja::Value("bos_token"), jinja::Value::code(std::string(bos)));
    d.set(jinja::Value("eos_token"), jinja::Value::code(std::string(eos)));
    if (kwargs.is_object())
        for (const auto& [k, v] : kwargs.items()) {
            if (d.find(k)) throw std::invalid_argument("chat_template_kwargs may not set '" + k + "'");
            d.set(jinja::Value(k), jinja::from_json(v));
        }
    return ctx;
}

std::vector<std::string> ChatTemplate::names() {
    std::vector<std::string> v;
    for (const Named& n : kNames) v.push_back(n.name);
    return v;
}

std::string ChatTemplate::name() const {
    if (jinja_) return "jinja";
    for (const Named& n : kNames)
        if (n.family == family_) return n.name;
    return "?";
}

ChatTemplate ChatTemplate::by_name(std::string_view name) {
    for (const Named& n : kNames)
        if (name == n.name) return ChatTemplate(n.family);
    throw std::invalid_argument("--chat-template: '" + std::string(name) + "' is not a template (choose " + name_list() +
                                ")");
}

ChatTemplate ChatTemplate::from_text(std::string_view src) {
    // Constructs these families' plain-chat paths do not have: rendering
    // them as the base family would silently differ from the model's own.
    for (const char* foreign : {"[SYSTEM_PROMPT]", "<think>", "enable_thinking", "reasoning_content"})
        if (has(src, foreign)) unrecognised(src, "it uses " + std::string(foreign));

    if (has(src, "<|im_start|>")) {
        // Plain ChatML never writes BOS; those that do (LFM2, Hermes tool
        // use) add system text of their own.
        if (has(src, "bos_token")) unrecognised(src, "a ChatML variant that writes bos_token");
        ChatTemplate t(Family::ChatML);
        t.default_system_ = chatml_default_system(src);
        return t;
    }
    if (has(src, "<start_of_turn>")) return ChatTemplate(Family::Gemma);
    if (has(src, "<|start_header_id|>")) {
        ChatTemplate t(Family::Llama3);
        if (has(src, "Cutting Knowledge Date: December 2023")) {
            if (has(src, "strftime_now")) {
                t.llama3_header_ = Llama3Header::Today;
            } else if (std::optional<std::string> d = llama3_fixed_date(src)) {
                t.llama3_header_ = Llama3Header::FixedDate;
                t.llama3_date_ = *d;
            } else {
                unrecognised(src, "a Llama 3 system header without a date");
            }
        } else if (has(src, "function")) {
            // Firefunction, Functionary: a function-calling system prompt of their own.
            unrecognised(src, "a Llama 3 function-calling variant");
        }
        return t;
    }
    if (has(src, "[INST]")) {
        if (has(src, "<<SYS>>")) return ChatTemplate(Family::Llama2);
        ChatTemplate t(Family::Mistral);
        if (has(src, "' [INST] '") || has(src, "\" [INST] \"")) t.mistral_form_ = MistralForm::V1;
        else if (has(src, "\"[INST]\" +") || has(src, "'[INST]' +")) t.mistral_form_ = MistralForm::Tekken;
        else unrecognised(src, "an [INST] form other than Mistral v1 or Tekken");
        return t;
    }
    if (has(src, "<|user|>") && has(src, "<|end|>")) {
        // Phi-3.5 writes no BOS; those that do (Apriel) add a system prompt.
        if (has(src, "bos_token")) unrecognised(src, "a Phi-3 variant that writes bos_token");
        return ChatTemplate(Family::Phi3);
    }
    unrecognised(src);
}

ChatTemplate ChatTemplate::from_jinja(std::string_view source, std::string origin) {
    ChatTemplate t(Family::ChatML);
    try {
        t.jinja_ = std::make_shared<const jinja::Template>(jinja::Template::parse(source));
    } catch (const jinja::Error& e) {
        throw std::invalid_argument(origin + " does not parse (" + e.what() +
                                    "); choose a built-in one with --chat-template NAME (" + name_list() +
                                    ") or another with --chat-template-file F");
    }
    t.origin_ = std::move(origin);
    t.source_ = std::string(source);
    t.probe_capabilities();
    return t;
}

void ChatTemplate::probe_capabilities() {
    // As llama.cpp tells them: a probe tool's name, and a probe call's, show
    // in a rendering (a template that raises on them supports neither).
    const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
        "name": "ptxlm_probe_tool", "description": "A probe.",
        "parameters": {"type": "object", "properties": {"ptxlm_probe_arg": {"type": "string"}}}}}])");
    std::vector<ChatMessage> msgs{{"user", "Hi"}};
    try {
        supports_tools_ = render_jinja(msgs, true, "", "", {tools, nullptr}).text.find("ptxlm_probe_tool") != std::string::npos;
    } catch (const std::invalid_argument&) {
        supports_tools_ = false;
    }
    ChatMessage call("assistant", "");
    call.tool_calls.push_back({"call_ptxlm0", "ptxlm_probe_call", R"({"ptxlm_probe_arg": "x"})"});
    ChatMessage result("tool", "done");
    result.tool_call_id = "call_ptxlm0";
    msgs.push_back(std::move(call));
    msgs.push_back(std::move(result));
    try {
        supports_tool_calls_ =
            render_jinja(msgs, true, "", "", {tools, nullptr}).text.find("ptxlm_probe_call") != std::string::npos;
    } catch (const std::invalid_argument&) {
        supports_tool_calls_ = false;
    }
    formats_ = tools::detect(source_);
}

ChatTemplate ChatTemplate::for_model(std::optional<std::string_view> text, std::string_view arch,
                                     const TemplateChoice& choice) {
    if (!choice.name.empty() && !choice.file.empty())
        throw std::invalid_argument("--chat-template and --chat-template-file exclude each other");
    if (!choice.name.empty()) return by_name(choice.name);
    if (!choice.file.empty()) return from_jinja(read_template_file(choice.file), "the chat template file " + choice.file);
    if (text && !text->empty()) return from_jinja(*text, "the model's chat template");
    for (const ArchDefault& d : kArchDefaults)
        if (arch == d.arch) return ChatTemplate(d.family);
    throw std::invalid_argument("the model (" + std::string(arch) +
                                ") carries no chat template; choose one with --chat-template NAME (" + name_list() +
                                ") or --chat-template-file F");
}

bool ChatTemplate::starts_with_bos() const {
    switch (family_) {
        case Family::Gemma:
        case Family::Llama3:
        case Family::Llama2:
        case Family::Mistral: return true;
        case Family::ChatML:
        case Family::Phi3: return false;
    }
    return false;
}

std::string ChatTemplate::render_llama3(std::span<const ChatMessage> msgs, bool gen, std::string_view bos) const {
    auto turn = [](std::string_view role, std::string_view content) {
        return "<|start_header_id|>" + std::string(role) + "<|end_header_id|>\n\n" + trim(content) + "<|eot_id|>";
    };
    std::string out;
    if (llama3_header_ == Llama3Header::None) {
        // 3.0: BOS before the first turn only, no system turn unless given.
        if (!msgs.empty()) out += bos;
        for (const ChatMessage& m : msgs) out += turn(m.role, m.content);
    } else {
        // 3.1+: BOS and the system turn are always written, a given system
        // prompt (trimmed) after the dates.
        const bool has_system = !msgs.empty() && msgs[0].role == "system";
        out += bos;
        out += "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ";
        out += llama3_header_ == Llama3Header::Today ? today() : llama3_date_;
        out += "\n\n";
        if (has_system) out += trim(msgs[0].content);
        out += "<|eot_id|>";
        for (size_t i = has_system ? 1 : 0; i < msgs.size(); ++i) out += turn(msgs[i].role, msgs[i].content);
    }
    if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
}

std::string ChatTemplate::render_mistral(std::span<const ChatMessage> msgs, std::string_view bos,
                                         std::string_view eos) const {
    check_alternation(msgs);
    const bool has_system = !msgs.empty() && msgs[0].role == "system";
    const std::span<const ChatMessage> turns = has_system ? msgs.subspan(1) : msgs;
    const char* open = mistral_form_ == MistralForm::V1 ? " [INST] " : "[INST]";
    const char* close = mistral_form_ == MistralForm::V1 ? " [/INST]" : "[/INST]";
    std::string out(bos);
    for (size_t i = 0; i < turns.size(); ++i) {
        const ChatMessage& m = turns[i];
        if (m.role == "user") {
            // v1 puts the system prompt in the first user turn, Tekken in the
            // last message when that is a user turn (else nowhere).
            const bool with_system =
                has_system && (mistral_form_ == MistralForm::V1 ? i == 0 : i + 1 == turns.size());
            out += open;
            if (with_system) out += msgs[0].content + "\n\n";
            out += m.content + close;
        } else {
            if (mistral_form_ == MistralForm::V1) out += " ";
            out += m.content;
            out += eos;
        }
    }
    return out;
}

jinja::Rendered ChatTemplate::render_jinja(std::span<const ChatMessage> msgs, bool gen, std::string_view bos,
                                          std::string_view eos, const ChatExtras& extras) const {
    check_known_roles(msgs, true);
    try {
        return jinja_->render_marked(chat_context(messages_json(msgs), extras.tools, gen, bos, eos, extras.kwargs));
    } catch (const jinja::RaisedError& e) {
        throw std::invalid_argument("the chat template refused the conversation: " + e.message());
    } catch (const jinja::Error& e) {
        throw std::invalid_argument(origin_ + " failed: " + e.what());
    }
}

jinja::Rendered ChatTemplate::render_marked(std::span<const ChatMessage> msgs, bool gen, std::string_view bos,
                                            std::string_view eos, const ChatExtras& extras) const {
    if (jinja_) return render_jinja(msgs, gen, bos, eos, extras);
    if (!extras.tools.is_null()) throw std::invalid_argument("the built-in chat templates render no tools");
    jinja::Rendered r;
    r.text = render_family(msgs, gen, bos, eos);
    size_t at = 0;   // the family wrote everything but the contents
    for (const auto& [b, e] : content_ranges(r.text, msgs)) {
        if (b > at) r.code.emplace_back(at, b);
        at = e;
    }
    if (at < r.text.size()) r.code.emplace_back(at, r.text.size());
    return r;
}

std::string ChatTemplate::render_family(std::span<const ChatMessage> msgs, bool gen, std::string_view bos,
                                        std::string_view eos) const {
    check_roles(msgs);
    const bool has_system = !msgs.empty() && msgs[0].role == "system";
    const std::span<const ChatMessage> turns = has_system ? msgs.subspan(1) : msgs;
    std::string out;
    switch (family_) {
        case Family::ChatML:
            if (!has_system && !default_system_.empty() && !msgs.empty())
                out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
            for (const ChatMessage& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
            if (gen) out += "<|im_start|>assistant\n";
            break;
        case Family::Gemma:
            // The system prompt opens the first user turn, untrimmed.
            check_alternation(msgs);
            out += bos;
            for (size_t i = 0; i < turns.size(); ++i) {
                const ChatMessage& m = turns[i];
                out += "<start_of_turn>";
                out += m.role == "assistant" ? "model" : m.role;
                out += "\n";
                if (i == 0 && has_system) out += msgs[0].content + "\n\n";
                out += trim(m.content) + "<end_of_turn>\n";
            }
            if (gen) out += "<start_of_turn>model\n";
            break;
        case Family::Llama3:
            out = render_llama3(msgs, gen, bos);
            break;
        case Family::Llama2:
            // No generation prompt: the last [/INST] is where the answer goes.
            check_alternation(msgs);
            for (size_t i = 0; i < turns.size(); ++i) {
                const ChatMessage& m = turns[i];
                std::string content = m.content;
                if (i == 0 && has_system) content = "<<SYS>>\n" + msgs[0].content + "\n<</SYS>>\n\n" + m.content;
                if (m.role == "user") out += std::string(bos) + "[INST] " + trim(content) + " [/INST]";
                else out.append(" ").append(trim(content)).append(" ").append(eos);
            }
            break;
        case Family::Mistral:
            out = render_mistral(msgs, bos, eos);
            break;
        case Family::Phi3:
            for (const ChatMessage& m : msgs) {
                if (m.role == "system" && m.content.empty()) continue;
                out.append("<|").append(m.role).append("|>\n").append(m.content).append("<|end|>\n");
            }
            if (gen) out += "<|assistant|>\n";
            else out += eos;
            break;
    }
    return out;
}

}  // namespace ptxlm
