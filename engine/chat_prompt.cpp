#include "engine/chat_prompt.h"

#include <algorithm>
#include <map>

namespace ptxlm {

ChatTemplate model_chat_template(const Model& m, std::string_view override_name) {
    std::optional<std::string_view> text = m.file.get_string("tokenizer.chat_template");
    std::optional<std::string_view> name;
    if (!override_name.empty()) name = override_name;
    return ChatTemplate::for_model(text, m.hp.arch, name);
}

std::string chat_template_names() {
    std::string s;
    for (const std::string& n : ChatTemplate::names()) s += (s.empty() ? "" : ", ") + n;
    return s;
}

namespace {

// Where each message's content sits in the rendered text (templates may trim
// it). Contents are found in order; one the template dropped is skipped.
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

}  // namespace

ChatPrompt chat_prompt(const Tokenizer& tok, const ChatTemplate& tmpl, std::span<const ChatMessage> msgs,
                       bool add_generation_prompt) {
    ChatPrompt p;
    const std::string bos_text = tok.bos() ? std::string(tok.text(*tok.bos())) : std::string();
    const std::string eos_text = tok.eos() ? std::string(tok.text(*tok.eos())) : std::string();
    p.text = tmpl.render(msgs, add_generation_prompt, bos_text, eos_text);

    // Special tokens by their first byte, longest first.
    std::map<unsigned char, std::vector<std::pair<std::string_view, TokenId>>> specials;
    for (TokenId id = 0; id < tok.n_vocab(); ++id)
        if (tok.is_special(id) && !tok.text(id).empty())
            specials[static_cast<unsigned char>(tok.text(id)[0])].emplace_back(tok.text(id), id);
    for (auto& [c, v] : specials)
        std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });

    const auto literal = content_ranges(p.text, msgs);
    size_t next_literal = 0;
    size_t frag_start = 0;
    auto flush = [&](size_t end) {
        if (end > frag_start) {
            std::vector<TokenId> ids = tok.encode(std::string_view(p.text).substr(frag_start, end - frag_start), false, false);
            p.tokens.insert(p.tokens.end(), ids.begin(), ids.end());
        }
    };
    for (size_t i = 0; i < p.text.size();) {
        while (next_literal < literal.size() && literal[next_literal].second <= i) ++next_literal;
        if (next_literal < literal.size() && literal[next_literal].first <= i) {
            i = literal[next_literal].second;   // user text: no special tokens inside
            continue;
        }
        auto it = specials.find(static_cast<unsigned char>(p.text[i]));
        bool matched = false;
        if (it != specials.end()) {
            // A special token may not reach into the next user text.
            const size_t limit = next_literal < literal.size() ? literal[next_literal].first : p.text.size();
            for (const auto& [s, id] : it->second) {
                if (i + s.size() <= limit && p.text.compare(i, s.size(), s) == 0) {
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
    flush(p.text.size());
    // BOS once: the template may have written it; otherwise add it as the
    // vocabulary asks.
    if (tok.add_bos() && tok.bos() && (p.tokens.empty() || p.tokens.front() != *tok.bos()))
        p.tokens.insert(p.tokens.begin(), *tok.bos());
    return p;
}

}  // namespace ptxlm
