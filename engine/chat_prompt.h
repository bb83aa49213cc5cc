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

// Tools for a conversation: OpenAI's `tools` and `tool_choice`, and the
// template variables the caller adds (chat_template_kwargs).
struct ChatOptions {
    nlohmann::ordered_json tools;       // null: none
    std::string tool_choice = "auto";   // "auto", "none", "required" or a function's name
    nlohmann::ordered_json kwargs;      // an object, or null
    bool split_reasoning = true;        // false: a reasoning block stays in the answer's text
};

struct ChatPrompt {
    std::string text;                 // as rendered
    std::vector<TokenId> tokens;      // BOS included once
    // How to read the answer: the tool-call format (None without tools or
    // with tool_choice "none"; the template's own when it renders tools,
    // else Generic: the tools were described in a system message), the
    // reasoning block, and whether the prompt opened it.
    tools::Formats output;
};
// With tools and a template that renders none (a family, or a Jinja
// template without tools), or renders them for an answer format no parser
// here reads (tools::detect gives None), the conversation is given in the generic form:
// the tools and the JSON answer format described in the system message
// (tools::generic_tools_prompt), earlier tool calls as that JSON, tool
// results as user turns holding {"tool_response": ...}.
ChatPrompt chat_prompt(const Tokenizer& tok, const ChatTemplate& tmpl, std::span<const ChatMessage> msgs,
                       bool add_generation_prompt, const ChatOptions& options = {});
inline std::vector<TokenId> chat_prompt_tokens(const Tokenizer& tok, const ChatTemplate& tmpl,
                                               std::span<const ChatMessage> msgs, bool add_generation_prompt) {
    return chat_prompt(tok, tmpl, msgs, add_generation_prompt).tokens;
}

// The conversation in the generic tool form (see chat_prompt).
std::vector<ChatMessage> generic_tool_messages(std::span<const ChatMessage> msgs, const nlohmann::ordered_json& tools,
                                               std::string_view tool_choice);

}  // namespace ptxlm
