#include "engine/chat_prompt.h"

#include <algorithm>
#include <map>

namespace ptxlm {

ChatTemplate model_chat_template(const Model& m, const TemplateChoice& choice) {
    return ChatTemplate::for_model(m.file.get_string("tokenizer.chat_template"), m.hp.arch, choice);
}

std::string chat_template_names() {
    std::string s;
    for (const std::string& n : ChatTemplate::names()) s += (s.empty() ? "" : ", ") + n;
    return s;
}

ChatPrompt chat_prompt(const Tokenizer& tok, const ChatTemplate& tmpl, std::span<const ChatMessage> msgs,
                       bool add_generation_prompt) {
    ChatPrompt p;
    const std::string bos_text = tok.bos() ? std::string(tok.text(*tok.bos())) : std::string();
    const std::string eos_text = tok.eos() ? std::string(tok.text(*tok.eos())) : std::string();
    jinja::Rendered r = tmpl.render_marked(msgs, add_generation_prompt, bos_text, eos_text);
    p.text = std::move(r.text);

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
