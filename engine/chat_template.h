// Chat templates: the model's own Jinja template (tokenizer.chat_template,
// rendered by engine/jinja as Hugging Face's apply_chat_template renders it),
// or one of the built-in families written in C++ for files without a
// template (gemma-3-270m's) and for --chat-template NAME. A family is
// byte-identical to its models' Jinja templates for plain text conversations
// (tests/py/check_templates.py); from_text still recognises the families in
// template text, for the tests that compare them.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/jinja.h"
#include "engine/tool_calls.h"

namespace ptxlm {

// A tool call an assistant message made (OpenAI's tool_calls[i]).
struct ChatToolCall {
    std::string id;
    std::string name;
    std::string arguments;   // a JSON object's text
};

struct ChatMessage {
    ChatMessage() = default;
    ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}

    std::string role;        // system, user, assistant, tool
    std::string content;
    std::vector<ChatToolCall> tool_calls;   // assistant
    std::string tool_call_id;               // tool: the call it answers
    std::string name;                       // tool: the function's name, when given
};

// Which template: --chat-template NAME, --chat-template-file PATH, or
// neither (the model's own).
struct TemplateChoice {
    std::string name;
    std::string file;
};

// The variables a chat template renders with, as Hugging Face passes them:
// `messages` (its message format), `tools` (none when null), and
// add_generation_prompt, bos_token, eos_token, then `kwargs`' keys (the
// caller's chat_template_kwargs; they may not replace those). Every string
// of the messages, tools and kwargs is the caller's data, except each
// message's role (which the caller has checked is one of a few known
// words); bos_token and eos_token are template text.
jinja::Value chat_context(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                          bool add_generation_prompt, std::string_view bos, std::string_view eos,
                          const nlohmann::ordered_json& kwargs = nullptr);
// Messages in Hugging Face's format: content (a string, empty for an
// assistant turn that only calls tools), tool_calls with their arguments as
// objects, tool_call_id and name on tool results.
nlohmann::ordered_json messages_json(std::span<const ChatMessage> msgs);

// What a conversation brings besides its messages.
struct ChatExtras {
    nlohmann::ordered_json tools;    // OpenAI's tools array; null: none
    nlohmann::ordered_json kwargs;   // more template variables (an object); null: none
};

class ChatTemplate {
public:
    enum class Family { ChatML, Gemma, Llama3, Llama2, Mistral, Phi3 };

    // Detects the family of a Jinja template. std::invalid_argument ("unrecognised
    // chat template (...); choose one with --chat-template NAME (...)") when it
    // is none of the known ones.
    static ChatTemplate from_text(std::string_view jinja_source);
    // "chatml", "gemma", "llama3", "llama2", "mistral", "phi3".
    static ChatTemplate by_name(std::string_view name);
    static std::vector<std::string> names();
    // A Jinja template: the model's own or a file's. `origin` names it in
    // errors ("the model's chat template", "chat template file t.jinja").
    // Throws std::invalid_argument for a syntax error, with its line.
    static ChatTemplate from_jinja(std::string_view source, std::string origin);
    // --chat-template NAME when given, else --chat-template-file, else the
    // file's template, else the architecture's built-in (gemma3 files often
    // carry no template: the real gemma-3-270m file has none). Throws naming
    // the flags.
    static ChatTemplate for_model(std::optional<std::string_view> template_text, std::string_view arch,
                                  const TemplateChoice& choice);
    static ChatTemplate for_model(std::optional<std::string_view> template_text, std::string_view arch,
                                  std::optional<std::string_view> override_name) {
        return for_model(template_text, arch, TemplateChoice{override_name ? std::string(*override_name) : "", ""});
    }

    bool is_jinja() const { return jinja_ != nullptr; }
    // A built-in's family (not meaningful for a Jinja template).
    Family family() const { return family_; }
    // The family's name; "jinja" for a Jinja template.
    std::string name() const;
    // A Jinja template's source (empty for a family).
    const std::string& source() const { return source_; }
    // A Jinja template that renders `tools` (a probe tool's name shows in
    // its output), and assistant tool calls; the output format its models
    // write (tools::detect). Families render neither.
    bool supports_tools() const { return supports_tools_; }
    // A file's named variant for conversations with tools
    // (tokenizer.chat_template.tool_use), when it has one: chat_prompt
    // renders those with it.
    const ChatTemplate* tool_variant() const { return tool_variant_.get(); }
    void set_tool_variant(ChatTemplate t) { tool_variant_ = std::make_shared<const ChatTemplate>(std::move(t)); }
    bool supports_tool_calls() const { return supports_tool_calls_; }
    const tools::Formats& formats() const { return formats_; }
    // A ChatML template's built-in system prompt, used when the conversation
    // has none (SmolLM2's, Qwen2.5's); empty if none.
    const std::string& default_system() const { return default_system_; }
    // A family's rendered text begins with the BOS token text (when one is
    // given): the caller must not add another BOS. (A Jinja template's
    // rendering says for itself; chat_prompt adds BOS only when absent.)
    bool starts_with_bos() const;

    // The prompt text. bos/eos are the tokenizer's BOS and EOS token texts,
    // written where the family's template writes them. Throws
    // std::invalid_argument for a conversation the template refuses (an
    // unknown role; roles out of order where the family requires
    // alternation).
    std::string render(std::span<const ChatMessage> msgs, bool add_generation_prompt, std::string_view bos = "",
                       std::string_view eos = "") const {
        return render_marked(msgs, add_generation_prompt, bos, eos).text;
    }
    // The same, with the byte ranges the template wrote (`code`): everything
    // but the messages' contents. Control tokens are read only there.
    jinja::Rendered render_marked(std::span<const ChatMessage> msgs, bool add_generation_prompt,
                                  std::string_view bos = "", std::string_view eos = "",
                                  const ChatExtras& extras = {}) const;

private:
    // Llama 3.1 and later open with a system header that names the
    // knowledge cutoff and a date: a fixed one ("26 Jul 2024" in 3.1) or
    // today's (3.2 asks strftime_now).
    enum class Llama3Header { None, FixedDate, Today };
    // Mistral v1 writes " [INST] sys\n\nuser [/INST] answer</s>" with the
    // system prompt in the first user turn; the Tekken form (Nemo) writes
    // "[INST]sys\n\nuser[/INST]answer</s>" with it in the last user turn.
    enum class MistralForm { V1, Tekken };

    explicit ChatTemplate(Family f) : family_(f) {}
    std::string render_llama3(std::span<const ChatMessage> msgs, bool gen, std::string_view bos) const;
    std::string render_mistral(std::span<const ChatMessage> msgs, std::string_view bos, std::string_view eos) const;

    jinja::Rendered render_jinja(std::span<const ChatMessage> msgs, bool gen, std::string_view bos,
                                 std::string_view eos, const ChatExtras& extras) const;
    void probe_capabilities();
    std::string render_family(std::span<const ChatMessage> msgs, bool gen, std::string_view bos,
                              std::string_view eos) const;

    Family family_;
    std::shared_ptr<const jinja::Template> jinja_;
    std::string origin_;                // a Jinja template's, for errors
    std::string source_;
    bool supports_tools_ = false, supports_tool_calls_ = false;
    std::shared_ptr<const ChatTemplate> tool_variant_;
    tools::Formats formats_;
    std::string default_system_;
    Llama3Header llama3_header_ = Llama3Header::None;
    std::string llama3_date_;           // FixedDate: the template's literal
    MistralForm mistral_form_ = MistralForm::V1;
};

}  // namespace ptxlm
