// From a conversation to prompt tokens: the model's chat template renders the
// text, and the tokenizer reads control tokens only where the template wrote
// them (its own text and literals, BOS/EOS, roles; never message contents,
// whatever filters they pass through). "<|im_start|>" typed by a user stays
// plain text, never becomes a control token.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

namespace ptxlm {

// The template for `m`: --chat-template's family or --chat-template-file's
// Jinja when chosen, else the file's tokenizer.chat_template, else the
// architecture's built-in (gemma3 files often carry none). Throws with a
// message naming the flags.
ChatTemplate model_chat_template(const Model& m, const TemplateChoice& choice);

// "chatml, gemma, llama3, ..." for help texts.
std::string chat_template_names();

struct ChatPrompt {
    std::string text;                 // as rendered
    std::vector<TokenId> tokens;      // BOS included once
};
ChatPrompt chat_prompt(const Tokenizer& tok, const ChatTemplate& tmpl, std::span<const ChatMessage> msgs,
                       bool add_generation_prompt);
inline std::vector<TokenId> chat_prompt_tokens(const Tokenizer& tok, const ChatTemplate& tmpl,
                                               std::span<const ChatMessage> msgs, bool add_generation_prompt) {
    return chat_prompt(tok, tmpl, msgs, add_generation_prompt).tokens;
}

}  // namespace ptxlm
