#include "engine/chat_template.h"

#include <stdexcept>

namespace ptxlm {

namespace {

struct Named { const char* name; ChatTemplate::Family family; };
constexpr Named kNames[] = {
    {"chatml", ChatTemplate::Family::ChatML}, {"gemma", ChatTemplate::Family::Gemma},
    {"llama3", ChatTemplate::Family::Llama3}, {"llama2", ChatTemplate::Family::Llama2},
    {"mistral", ChatTemplate::Family::Mistral}, {"phi3", ChatTemplate::Family::Phi3},
};

bool has(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

// Jinja's trim (Python's str.strip() on ASCII whitespace).
std::string trim(std::string_view s) {
    const char* ws = " \t\n\r\f\v";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
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
    }
    return {};
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
    std::string list;
    for (const Named& n : kNames) list += (list.empty() ? "" : ", ") + std::string(n.name);
    throw std::invalid_argument("--chat-template: '" + std::string(name) + "' is not a template (choose " + list + ")");
}

ChatTemplate ChatTemplate::from_text(std::string_view src) {
    if (has(src, "<|im_start|>")) {
        ChatTemplate t(Family::ChatML);
        t.default_system_ = chatml_default_system(src);
        return t;
    }
    if (has(src, "<start_of_turn>")) return ChatTemplate(Family::Gemma);
    if (has(src, "<|start_header_id|>")) return ChatTemplate(Family::Llama3);
    if (has(src, "<<SYS>>") && has(src, "[INST]")) return ChatTemplate(Family::Llama2);
    if (has(src, "[INST]")) return ChatTemplate(Family::Mistral);
    if (has(src, "<|user|>") && has(src, "<|end|>")) return ChatTemplate(Family::Phi3);
    std::string head(src.substr(0, 60));
    for (char& c : head)
        if (c == '\n') c = ' ';
    std::string list;
    for (const Named& n : kNames) list += (list.empty() ? "" : ", ") + std::string(n.name);
    throw std::invalid_argument("the model's chat template is not one ptxlm knows (\"" + head +
                                "...\"); choose one with --chat-template NAME (" + list + ")");
}

ChatTemplate ChatTemplate::for_model(std::optional<std::string_view> text, std::string_view arch,
                                     std::optional<std::string_view> override_name) {
    if (override_name) return by_name(*override_name);
    if (text) return from_text(*text);
    if (arch == "gemma3") return ChatTemplate(Family::Gemma);
    throw std::invalid_argument("the model carries no chat template; choose one with --chat-template NAME (" +
                                [] {
                                    std::string l;
                                    for (const Named& n : kNames) l += (l.empty() ? "" : ", ") + std::string(n.name);
                                    return l;
                                }() + ")");
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
        case Family::Gemma: {
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
        }
        case Family::Llama3:
            for (size_t i = 0; i < msgs.size(); ++i) {
                if (i == 0) out += bos;
                out += "<|start_header_id|>" + msgs[i].role + "<|end_header_id|>\n\n" + trim(msgs[i].content) + "<|eot_id|>";
            }
            if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            break;
        case Family::Llama2:
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
            check_alternation(msgs);
            out += bos;
            for (size_t i = 0; i < turns.size(); ++i) {
                const ChatMessage& m = turns[i];
                if (m.role == "user") {
                    if (i == 0 && has_system) out += " [INST] " + msgs[0].content + "\n\n" + m.content + " [/INST]";
                    else out += " [INST] " + m.content + " [/INST]";
                } else {
                    out.append(" ").append(m.content).append(eos);
                }
            }
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
