// Chat templates: the conversation formats of the supported model families,
// written in C++ (no Jinja interpreter). The family is detected from the
// file's tokenizer.chat_template; the output equals what the model's Jinja
// template renders for plain text conversations (tests/py/
// check_templates.py renders the real templates with jinja2 and compares).
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

    // Detects the family of a Jinja template. std::invalid_argument (naming
    // --chat-template) when it is none of the known ones.
    static ChatTemplate from_text(std::string_view jinja_source);
    // "chatml", "gemma", "llama3", "llama2", "mistral", "phi3".
    static ChatTemplate by_name(std::string_view name);
    static std::vector<std::string> names();
    // The override when given, else the file's template, else the
    // architecture's built-in (gemma3 files often carry no template).
    static ChatTemplate for_model(std::optional<std::string_view> template_text, std::string_view arch,
                                  std::optional<std::string_view> override_name);

    Family family() const { return family_; }
    std::string name() const;
    // A ChatML template's built-in system prompt, used when the conversation
    // has none (SmolLM2's, Qwen2.5's); empty if none.
    const std::string& default_system() const { return default_system_; }

    // The prompt text. bos/eos are the tokenizer's BOS and EOS token texts,
    // written where the family's template writes them. Throws
    // std::invalid_argument for a conversation the template refuses (an
    // unknown role; roles out of order where the family requires
    // alternation).
    std::string render(std::span<const ChatMessage> msgs, bool add_generation_prompt, std::string_view bos = "",
                       std::string_view eos = "") const;

private:
    explicit ChatTemplate(Family f) : family_(f) {}
    Family family_;
    std::string default_system_;
};

}  // namespace ptxlm
