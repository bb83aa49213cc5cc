// Chat templates: names, detection, the per-model choice and its errors,
// and the formats ptxlm's two real models use. Byte-exactness against the
// real Jinja templates is tests/py/check_templates.py's job.
#include <gtest/gtest.h>

#include <functional>
#include <regex>
#include <cstdio>
#include <stdexcept>

#include "engine/chat_template.h"
#include "gguf/gguf.h"

using namespace ptxlm;

namespace {

const std::string kNameList = "chatml, gemma, llama3, llama2, mistral, phi3";

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "(no std::invalid_argument)";
}

std::string file_template(const char* model) {
    const gguf::File f = gguf::File::open(std::string(PTXLM_MODELS_DIR) + "/" + model);
    const std::optional<std::string_view> t = f.get_string("tokenizer.chat_template");
    return t ? std::string(*t) : std::string();
}

const std::string kSmolTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

TEST(ChatTemplate, NamesRoundTrip) {
    const std::vector<std::string> names = ChatTemplate::names();
    EXPECT_EQ(names, (std::vector<std::string>{"chatml", "gemma", "llama3", "llama2", "mistral", "phi3"}));
    for (const std::string& n : names) EXPECT_EQ(ChatTemplate::by_name(n).name(), n);
}

TEST(ChatTemplate, UnknownNameNamesTheFlagAndTheChoices) {
    const std::string e = error_of([] { ChatTemplate::by_name("vicuna"); });
    EXPECT_NE(e.find("--chat-template"), std::string::npos) << e;
    EXPECT_NE(e.find("'vicuna'"), std::string::npos) << e;
    EXPECT_NE(e.find(kNameList), std::string::npos) << e;
}

TEST(ChatTemplate, UnknownTemplateQuotesItsStartAndNamesTheFlag) {
    const std::string src = "{% for m in messages %}\n{{ m.content }}{% endfor %} and then much more text after sixty";
    const std::string e = error_of([&] { ChatTemplate::from_text(src); });
    EXPECT_EQ(e, "unrecognised chat template ({% for m in messages %} {{ m.content }}{% endfor %} and then...); "
                 "choose one with --chat-template NAME (" + kNameList + ")");
    // The quote never cuts a UTF-8 character in half.
    const std::string utf8(58, 'x');
    const std::string e2 = error_of([&] { ChatTemplate::from_text(utf8 + "日本"); });
    EXPECT_NE(e2.find("(" + utf8 + "...)"), std::string::npos) << e2;
}

TEST(ChatTemplate, LookalikeVariantsAreRefusedNotApproximated) {
    for (const char* src : {
             "{{ bos_token }}[SYSTEM_PROMPT]{{ system }}[/SYSTEM_PROMPT][INST]{{ m }}[/INST]",   // Mistral v7
             "{{ bos_token }}<|im_start|>system\nYou are LFM2<|im_end|>",                    // ChatML with BOS
             "<|im_start|>assistant\n<think>\n\n</think>\n\n",                               // Qwen3 thinking
             "{{ bos_token }}<|system|>\nYou are Apriel<|end|>\n<|user|>\n",                 // Phi-3 lookalike
             "<|start_header_id|>system<|end_header_id|>\n\nYou can call functions",         // Firefunction
             "[INST]{{ message['content'] }}[/INST]",                                        // unknown [INST] form
         }) {
        const std::string e = error_of([&] { ChatTemplate::from_text(src); });
        EXPECT_EQ(e.rfind("unrecognised chat template (", 0), 0u) << src << ": " << e;
        EXPECT_NE(e.find("--chat-template NAME"), std::string::npos) << e;
    }
}

TEST(ChatTemplate, ForModelPrefersTheOverrideThenTheFileThenTheArchitecture) {
    EXPECT_EQ(ChatTemplate::for_model(kSmolTemplate, "llama", "gemma").name(), "gemma");
    EXPECT_EQ(ChatTemplate::for_model(kSmolTemplate, "llama", std::nullopt).name(), "jinja");
    EXPECT_EQ(ChatTemplate::for_model(std::nullopt, "gemma3", std::nullopt).name(), "gemma");
    EXPECT_EQ(ChatTemplate::for_model("", "gemma3", std::nullopt).name(), "gemma");
    EXPECT_EQ(ChatTemplate::for_model(std::nullopt, "llama", "phi3").name(), "phi3");
    const std::string none = error_of([] { ChatTemplate::for_model(std::nullopt, "llama", std::nullopt); });
    EXPECT_NE(none.find("no chat template"), std::string::npos) << none;
    EXPECT_NE(none.find("--chat-template NAME (" + kNameList + ") or --chat-template-file F"), std::string::npos) << none;
    const std::string bad = error_of([] { ChatTemplate::for_model(std::nullopt, "gemma3", "zephyr"); });
    EXPECT_NE(bad.find("--chat-template"), std::string::npos) << bad;
}

TEST(ChatTemplate, Gemma3FileHasNoTemplateAndGetsGemma) {
    EXPECT_EQ(file_template("gemma-3-270m-q4_k_m.gguf"), "");
    const ChatTemplate t = ChatTemplate::for_model(std::nullopt, "gemma3", std::nullopt);
    EXPECT_TRUE(t.starts_with_bos());
    const std::vector<ChatMessage> msgs{{"system", "Be brief."}, {"user", "  Hi there \n"}, {"assistant", "Hello."},
                                        {"user", "Bye"}};
    EXPECT_EQ(t.render(msgs, true, "<bos>", "<eos>"),
              "<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n"
              "<start_of_turn>model\nHello.<end_of_turn>\n"
              "<start_of_turn>user\nBye<end_of_turn>\n"
              "<start_of_turn>model\n");
    EXPECT_EQ(t.render(std::span(msgs).subspan(1, 1), false, "<bos>"),
              "<bos><start_of_turn>user\nHi there<end_of_turn>\n");
}

TEST(ChatTemplate, SmolLM2CarriesItsDefaultSystemPrompt) {
    const std::string src = file_template("SmolLM2-135M-Instruct.Q4_1.gguf");
    ASSERT_FALSE(src.empty());
    // The family recognised in the text and the file's own Jinja render alike.
    for (const ChatTemplate& t : {ChatTemplate::from_text(src), ChatTemplate::for_model(src, "llama", std::nullopt)}) {
        const std::vector<ChatMessage> user{{"user", "Hi"}};
        EXPECT_EQ(t.render(user, true),
                  "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n") << t.name();
        const std::vector<ChatMessage> with_system{{"system", "Be brief."}, {"user", "Hi"}};
        EXPECT_EQ(t.render(with_system, false),
                  "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n") << t.name();
    }
    const ChatTemplate t = ChatTemplate::from_text(src);
    EXPECT_EQ(t.name(), "chatml");
    EXPECT_FALSE(t.starts_with_bos());
    EXPECT_EQ(t.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    const std::vector<ChatMessage> user{{"user", "Hi"}};
    EXPECT_EQ(t.render(user, true),
              "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    const std::vector<ChatMessage> with_system{{"system", "Be brief."}, {"user", "Hi"}};
    EXPECT_EQ(t.render(with_system, false), "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    EXPECT_EQ(ChatTemplate::by_name("chatml").default_system(), "");
}

TEST(ChatTemplate, Llama3DatedHeaders) {
    const std::vector<ChatMessage> msgs{{"user", "Hi"}};
    const ChatTemplate fixed = ChatTemplate::from_text(
        "{%- set date_string = \"26 Jul 2024\" %}{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}"
        "{{- \"Cutting Knowledge Date: December 2023\\n\" }}");
    EXPECT_EQ(fixed.render(msgs, true, "<|begin_of_text|>"),
              "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
              "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    const ChatTemplate today = ChatTemplate::from_text(
        "{%- set date_string = strftime_now(\"%d %b %Y\") %}<|start_header_id|>Cutting Knowledge Date: December 2023");
    const std::string out = today.render(msgs, false);
    EXPECT_TRUE(std::regex_search(out, std::regex("Today Date: [0-3][0-9] [A-Z][a-z]{2} 2[0-9]{3}\n\n<\\|eot_id\\|>")))
        << out;
    // Llama 3.0: no system header unless given.
    EXPECT_EQ(ChatTemplate::by_name("llama3").render(msgs, false, "<B>"),
              "<B><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, StartsWithBosPerFamily) {
    const std::vector<ChatMessage> msgs{{"system", "S"}, {"user", "U"}};
    for (const std::string& n : ChatTemplate::names()) {
        const ChatTemplate t = ChatTemplate::by_name(n);
        const std::string out = t.render(msgs, true, "<BOS>", "<EOS>");
        EXPECT_EQ(t.starts_with_bos(), out.rfind("<BOS>", 0) == 0) << n << ": " << out;
    }
}

TEST(ChatTemplate, RefusesConversationsTheTemplatesRefuse) {
    const std::vector<ChatMessage> two_users{{"user", "a"}, {"user", "b"}};
    for (const char* n : {"gemma", "llama2", "mistral"}) {
        const std::string e = error_of([&] { ChatTemplate::by_name(n).render(two_users, true); });
        EXPECT_NE(e.find("alternate"), std::string::npos) << n << ": " << e;
    }
    const std::vector<ChatMessage> tool{{"tool", "x"}};
    EXPECT_NE(error_of([&] { ChatTemplate::by_name("chatml").render(tool, true); }).find("'tool'"), std::string::npos);
    const std::vector<ChatMessage> late_system{{"user", "a"}, {"system", "b"}};
    EXPECT_NE(error_of([&] { ChatTemplate::by_name("chatml").render(late_system, true); }).find("system"),
              std::string::npos);
}

TEST(ChatTemplate, JinjaErrorsNameTheTemplateAndTheLine) {
    const std::string syntax = error_of([] { ChatTemplate::from_jinja("{% for m in messages %}\n{{ m.content }", "the model's chat template"); });
    EXPECT_EQ(syntax.rfind("the model's chat template does not parse (line 2: ", 0), 0u) << syntax;
    EXPECT_NE(syntax.find("--chat-template NAME (" + kNameList + ") or another with --chat-template-file F"),
              std::string::npos) << syntax;

    const ChatTemplate strict = ChatTemplate::from_jinja(
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}{{ m.content }}{% endfor %}", "the model's chat template");
    const std::vector<ChatMessage> sys{{"system", "s"}, {"user", "u"}};
    EXPECT_EQ(error_of([&] { strict.render(sys, true); }),
              "the chat template refused the conversation: System role not supported");
    const std::vector<ChatMessage> user{{"user", "u"}};
    EXPECT_EQ(strict.render(user, true), "u");

    const ChatTemplate broken = ChatTemplate::from_jinja("\n\n{{ messages[0].content | nosuchfilter }}", "the chat template file t.jinja");
    const std::string e = error_of([&] { broken.render(user, true); });
    EXPECT_EQ(e.rfind("the chat template file t.jinja failed: line 3: ", 0), 0u) << e;
    EXPECT_NE(e.find("nosuchfilter"), std::string::npos) << e;

    // Roles are template text (control tokens may be built from them), so
    // only known ones pass.
    const std::vector<ChatMessage> odd{{"<|im_start|>", "u"}};
    EXPECT_NE(error_of([&] { strict.render(odd, true); }).find("unknown chat role"), std::string::npos);
}

TEST(ChatTemplate, TemplateFileIsReadAndExcludesTheName) {
    const std::string path = ::testing::TempDir() + "ptxlm_template.jinja";
    {
        std::FILE* f = std::fopen(path.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        std::fputs("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}", f);
        std::fclose(f);
    }
    const ChatTemplate t = ChatTemplate::for_model(kSmolTemplate, "llama", TemplateChoice{"", path});
    EXPECT_TRUE(t.is_jinja());
    const std::vector<ChatMessage> msgs{{"user", "Hi"}, {"assistant", "Hello"}};
    EXPECT_EQ(t.render(msgs, true), "[user] Hi\n[assistant] Hello\n");
    std::remove(path.c_str());
    const std::string missing = error_of([&] { ChatTemplate::for_model(std::nullopt, "llama", TemplateChoice{"", path}); });
    EXPECT_EQ(missing.rfind("--chat-template-file: cannot read " + path, 0), 0u) << missing;
    const std::string both = error_of([&] { ChatTemplate::for_model(std::nullopt, "llama", TemplateChoice{"chatml", path}); });
    EXPECT_NE(both.find("exclude each other"), std::string::npos) << both;
}

}  // namespace
