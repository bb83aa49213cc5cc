#include "engine/chat_prompt.h"

#include <algorithm>
#include <map>

namespace ptxlm {

ChatTemplate model_chat_template(const Model& m, const TemplateChoice& choice) {
    ChatTemplate t = ChatTemplate::for_model(m.file.get_string("tokenizer.chat_template"), m.hp.arch, choice);
    if (choice.name.empty() && choice.file.empty())
        if (std::optional<std::string_view> v = m.file.get_string("tokenizer.chat_template.tool_use"); v && !v->empty())
            t.set_tool_variant(ChatTemplate::from_jinja(*v, "the model's tool_use chat template"));
    return t;
}

std::string chat_template_names() {
    std::string s;
    for (const std::string& n : ChatTemplate::names()) s += (s.empty() ? "" : ", ") + n;
    return s;
}

std::vector<ChatMessage> generic_tool_messages(std::span<const ChatMessage> msgs, const nlohmann::ordered_json& tools,
                                               std::string_view tool_choice) {
    using oj = nlohmann::ordered_json;
    std::vector<ChatMessage> out;
    const std::string prompt = tools::generic_tools_prompt(tools, tool_choice);
    if (!msgs.empty() && msgs[0].role == "system") out.emplace_back("system", msgs[0].content + "\n\n" + prompt);
    else out.emplace_back("system", prompt);
    for (size_t i = !msgs.empty() && msgs[0].role == "system" ? 1 : 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        ChatMessage g(m.role, m.content);
        if (!m.tool_calls.empty()) {
            oj calls = oj::array();
            for (const ChatToolCall& c : m.tool_calls) {
                oj args = oj::parse(c.arguments, nullptr, false);
                if (args.is_discarded()) args = c.arguments;
                calls.push_back({{"name", c.name}, {"arguments", std::move(args)}, {"id", c.id}});
            }
            g.content = oj{{"tool_calls", std::move(calls)}}.dump();
        } else if (m.role == "assistant") {
            g.content = oj{{"response", m.content}}.dump();
        }
        if (m.role == "tool") {
            oj r = {{"tool_call_id", m.tool_call_id}, {"content", m.content}};
            if (!m.name.empty()) r["tool"] = m.name;
            g.role = "user";
            g.content = oj{{"tool_response", std::move(r)}}.dump();
        }
        // Tool results and the next question become one user turn (templates
        // that alternate roles refuse two in a row).
        if (!out.empty() && out.back().role == "user" && g.role == "user") out.back().content += "\n" + g.content;
        else out.push_back(std::move(g));
    }
    return out;
}

ChatPrompt chat_prompt(const Tokenizer& tok, const ChatTemplate& chosen, std::span<const ChatMessage> msgs,
                       bool add_generation_prompt, const ChatOptions& options) {
    ChatPrompt p;
    const bool with_tools = !options.tools.is_null() && options.tool_choice != "none";
    const ChatTemplate& tmpl = with_tools && chosen.tool_variant() ? *chosen.tool_variant() : chosen;
    const std::string bos_text = tok.bos() ? std::string(tok.text(*tok.bos())) : std::string();
    const std::string eos_text = tok.eos() ? std::string(tok.text(*tok.eos())) : std::string();
    p.output = tmpl.formats();
    ChatExtras extras{nullptr, options.kwargs};
    std::vector<ChatMessage> generic;
    const bool use_tools = !options.tools.is_null() && options.tool_choice != "none";
    bool has_tool_turns = false;
    for (const ChatMessage& m : msgs) has_tool_turns = has_tool_turns || m.role == "tool" || !m.tool_calls.empty();
    // The template's own tool rendering only where its answer format is one
    // the parsers read (a template whose models write another format gets
    // the generic form, which is read and constrained consistently).
    const bool native = tmpl.supports_tools() && tmpl.formats().tools != tools::Format::None;
    if (use_tools && native && (!has_tool_turns || tmpl.supports_tool_calls())) {
        extras.tools = options.tools;
    } else if (use_tools || (has_tool_turns && !tmpl.supports_tool_calls())) {
        // The template cannot say it: the generic form (tools described in
        // the system message, calls as JSON).
        generic = generic_tool_messages(msgs, use_tools ? options.tools : nlohmann::ordered_json::array(),
                                        use_tools ? options.tool_choice : "none");
        msgs = generic;
        p.output.tools = tools::Format::Generic;
    }
    if (!use_tools) p.output.tools = tools::Format::None;
    if (!options.split_reasoning) p.output.reasoning = tools::Reasoning::None;
    jinja::Rendered r = tmpl.render_marked(msgs, add_generation_prompt, bos_text, eos_text, extras);
    p.text = std::move(r.text);
    p.output.starts_in_reasoning = add_generation_prompt && tools::prompt_opens_reasoning(p.output.reasoning, p.text);

    // Special tokens by their first byte, longest first.
    std::map<unsigned char, std::vector<std::pair<std::string_view, TokenId>>> specials;
    for (TokenId id = 0; id < tok.n_vocab(); ++id)
        if (tok.is_special(id) && !tok.text(id).empty())
            specials[static_cast<unsigned char>(tok.text(id)[0])].emplace_back(tok.text(id), id);
    for (auto& [c, v] : specials)
        std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });

    // A control token is read only where the template wrote every byte of
    // it; the text between control tokens is encoded as plain text.
    size_t frag_start = 0;
    auto flush = [&](size_t end) {
        if (end > frag_start) {
            std::vector<TokenId> ids = tok.encode(std::string_view(p.text).substr(frag_start, end - frag_start), false, false);
            p.tokens.insert(p.tokens.end(), ids.begin(), ids.end());
        }
    };
    for (const auto& [code_begin, code_end] : r.code) {
        for (size_t i = code_begin; i < code_end;) {
            auto it = specials.find(static_cast<unsigned char>(p.text[i]));
            bool matched = false;
            if (it != specials.end()) {
                for (const auto& [s, id] : it->second) {
                    if (i + s.size() <= code_end && p.text.compare(i, s.size(), s) == 0) {
                        flush(i);
                        p.tokens.push_back(id);
                        i += s.size();
                        frag_start = i;
                        matched = true;
                        break;
                    }
                }
            }
            if (!matched) ++i;
        }
    }
    flush(p.text.size());
    // BOS once: the template may have written it; otherwise add it as the
    // vocabulary asks.
    if (tok.add_bos() && tok.bos() && (p.tokens.empty() || p.tokens.front() != *tok.bos()))
        p.tokens.insert(p.tokens.begin(), *tok.bos());
    return p;
}

}  // namespace ptxlm
