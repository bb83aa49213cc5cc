// Chat templates: the conversation formats of the supported model families,
// written in C++ (no Jinja interpreter). The family is detected from the
// file's tokenizer.chat_template; for plain text conversations the output is
// byte-identical to what the model's Jinja template renders (tests/py/
// check_templates.py renders the real templates with jinja2 and compares).
// A template that looks like a family but renders differently (Mistral's v7
// [SYSTEM_PROMPT] form, Qwen3's thinking blocks, ...) is refused rather than
// approximated: the user then picks a family with --chat-template.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ptxlm {

struct ChatMessage {
    std::string role;      // system, user, assistant
    std::string content;
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
    // The override when given, else the file's template, else the
    // architecture's built-in (gemma3 files often carry no template: the
    // real gemma-3-270m file has none). Throws naming --chat-template.
    static ChatTemplate for_model(std::optional<std::string_view> template_text, std::string_view arch,
                                  std::optional<std::string_view> override_name);

    Family family() const { return family_; }
    std::string name() const;
    // A ChatML template's built-in system prompt, used when the conversation
    // has none (SmolLM2's, Qwen2.5's); empty if none.
    const std::string& default_system() const { return default_system_; }
    // The rendered text begins with the BOS token text (when one is given):
    // the caller must not add another BOS.
    bool starts_with_bos() const;

    // The prompt text. bos/eos are the tokenizer's BOS and EOS token texts,
    // written where the family's template writes them. Throws
    // std::invalid_argument for a conversation the template refuses (an
    // unknown role; roles out of order where the family requires
    // alternation).
    std::string render(std::span<const ChatMessage> msgs, bool add_generation_prompt, std::string_view bos = "",
                       std::string_view eos = "") const;

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

    Family family_;
    std::string default_system_;
    Llama3Header llama3_header_ = Llama3Header::None;
    std::string llama3_date_;           // FixedDate: the template's literal
    MistralForm mistral_form_ = MistralForm::V1;
};

}  // namespace ptxlm
