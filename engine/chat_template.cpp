#include "engine/chat_template.h"

#include <ctime>
#include <stdexcept>

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

void check_roles(std::span<const ChatMessage> msgs) {
    for (size_t i = 0; i < msgs.size(); ++i) {
        const std::string& r = msgs[i].role;
        if (r != "system" && r != "user" && r != "assistant")
            throw std::invalid_argument("unknown chat role '" + r + "' (use system, user or assistant)");
        if (r == "system" && i != 0) throw std::invalid_argument("a system message may only come first");
    }
}

// After an optional system message, user and assistant must alternate,
// starting with the user (Gemma, Llama 2, Mistral).
void check_alternation(std::span<const ChatMessage> msgs) {
    const size_t first = !msgs.empty() && msgs[0].role == "system" ? 1 : 0;
    for (size_t i = first; i < msgs.size(); ++i)
        if ((msgs[i].role == "user") != ((i - first) % 2 == 0))
            throw std::invalid_argument("conversation roles must alternate user/assistant/user/... after the system message");
}

}  // namespace

std::vector<std::string> ChatTemplate::names() {
    std::vector<std::string> v;
    for (const Named& n : kNames) v.push_back(n.name);
    return v;
}

std::string ChatTemplate::name() const {
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

ChatTemplate ChatTemplate::for_model(std::optional<std::string_view> text, std::string_view arch,
                                     std::optional<std::string_view> override_name) {
    if (override_name) return by_name(*override_name);
    if (text && !text->empty()) return from_text(*text);
    for (const ArchDefault& d : kArchDefaults)
        if (arch == d.arch) return ChatTemplate(d.family);
    throw std::invalid_argument("the model (" + std::string(arch) +
                                ") carries no chat template; choose one with --chat-template NAME (" + name_list() +
                                ")");
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

std::string ChatTemplate::render(std::span<const ChatMessage> msgs, bool gen, std::string_view bos,
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
