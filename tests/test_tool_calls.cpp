// Tool calls and reasoning out of generated text (engine/tool_calls.h): detect() on llama.cpp's 70 real
// chat templates, parse() per format against expected results, the stream against parse() at every
// split (two pieces at every byte, random fragments, byte by byte) with a negative control, and the
// generic tools prompt.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tool_calls.h"

using namespace ptxlm::tools;

namespace {

std::function<std::string()> counter() {
    return [n = 0]() mutable { return "id" + std::to_string(n++); };
}

std::string read_file(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// --- detect() over the real templates.

struct Expected {
    Format tools;
    Reasoning reasoning;
    bool starts_in_reasoning;
};

// Every file of tests/data/jinja_templates. Tool formats: the families engine/tool_calls.h parses; the
// other tool-capable templates (Qwen3-Coder's <function=...>, GLM's <arg_key>, functionary, Command R,
// ...) are None, so the caller falls back to Generic. Reasoning: templates that strip or open a
// <think>/[THINK] block; starts_in_reasoning: a literal of the generation prompt opens the block (in
// some branch: enable_thinking and the like decide at render, see prompt_opens_reasoning). DeepSeek
// V3.2/V4 write the tag through a variable, which the source check does not follow.
const std::map<std::string, Expected> kTemplates = {
    {"Apertus-8B-Instruct", {Format::None, Reasoning::None, false}},
    {"Apriel-1.6-15b-Thinker-fixed", {Format::None, Reasoning::None, false}},
    {"Bielik-11B-v3.0-Instruct", {Format::Hermes, Reasoning::ThinkTags, true}},
    {"ByteDance-Seed-OSS", {Format::None, Reasoning::None, false}},
    {"Cohere2MoE", {Format::None, Reasoning::None, false}},
    {"CohereForAI-c4ai-command-r-plus-tool_use", {Format::None, Reasoning::None, false}},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", {Format::None, Reasoning::None, false}},
    {"GLM-4.6", {Format::None, Reasoning::ThinkTags, false}},
    {"GLM-4.7-Flash", {Format::None, Reasoning::ThinkTags, true}},
    {"GigaChat3-10B-A1.8B", {Format::None, Reasoning::None, false}},
    {"GigaChat3.1-10B-A1.8B", {Format::None, Reasoning::None, false}},
    {"HuggingFaceTB-SmolLM3-3B", {Format::None, Reasoning::ThinkTags, false}},
    {"Kimi-K2-Instruct", {Format::None, Reasoning::None, false}},
    {"Kimi-K2-Thinking", {Format::None, Reasoning::ThinkTags, false}},
    {"Kimi-K3", {Format::None, Reasoning::None, false}},
    {"LFM2-8B-A1B", {Format::None, Reasoning::None, false}},
    {"LFM2.5-8B-A1B", {Format::None, Reasoning::ThinkTags, false}},
    {"LFM2.5-Instruct", {Format::None, Reasoning::ThinkTags, false}},
    {"MiMo-VL", {Format::Hermes, Reasoning::None, false}},
    {"MiniMax-M1", {Format::None, Reasoning::None, false}},
    {"MiniMax-M2", {Format::None, Reasoning::ThinkTags, true}},
    {"MiniMax-M3", {Format::None, Reasoning::None, false}},
    {"Mistral-Small-3.2-24B-Instruct-2506", {Format::MistralArgs, Reasoning::None, false}},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", {Format::None, Reasoning::ThinkTags, true}},
    {"NVIDIA-Nemotron-Nano-v2", {Format::None, Reasoning::ThinkTags, true}},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", {Format::Hermes, Reasoning::None, false}},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", {Format::Hermes, Reasoning::None, false}},
    {"Qwen-QwQ-32B", {Format::Hermes, Reasoning::ThinkTags, true}},
    {"Qwen-Qwen2.5-7B-Instruct", {Format::Hermes, Reasoning::None, false}},
    {"Qwen-Qwen3-0.6B", {Format::Hermes, Reasoning::ThinkTags, false}},
    {"Qwen3-Coder", {Format::None, Reasoning::None, false}},
    {"Qwen3.5-4B", {Format::None, Reasoning::ThinkTags, true}},
    {"Reka-Edge", {Format::Hermes, Reasoning::ThinkTags, true}},
    {"Spark2.5", {Format::None, Reasoning::ThinkTags, true}},
    {"StepFun3.5-Flash", {Format::None, Reasoning::ThinkTags, true}},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", {Format::None, Reasoning::ThinkTags, true}},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", {Format::None, Reasoning::ThinkTags, true}},
    {"deepseek-ai-DeepSeek-V3.1", {Format::None, Reasoning::ThinkTags, true}},
    {"deepseek-ai-DeepSeek-V3.2", {Format::None, Reasoning::ThinkTags, false}},
    {"deepseek-ai-DeepSeek-V4-Flash-0731", {Format::None, Reasoning::ThinkTags, false}},
    {"deepseek-ai-DeepSeek-V4", {Format::None, Reasoning::ThinkTags, false}},
    {"fireworks-ai-llama-3-firefunction-v2", {Format::None, Reasoning::None, false}},
    {"google-gemma-2-2b-it", {Format::None, Reasoning::None, false}},
    {"google-gemma-4-31B-it-interleaved", {Format::None, Reasoning::None, false}},
    {"google-gemma-4-31B-it", {Format::None, Reasoning::None, false}},
    {"ibm-granite-granite-3.3-2B-Instruct", {Format::None, Reasoning::ThinkTags, false}},
    {"ibm-granite-granite-4.0", {Format::Hermes, Reasoning::None, false}},
    {"ibm-granite-granite-4.1", {Format::Hermes, Reasoning::None, false}},
    {"inclusionai-ling-3.0-flash", {Format::None, Reasoning::ThinkTags, true}},
    {"llama-cpp-deepseek-r1", {Format::None, Reasoning::ThinkTags, true}},
    {"llama-cpp-rwkv-world", {Format::None, Reasoning::ThinkTags, true}},
    {"meetkai-functionary-medium-v3.1", {Format::None, Reasoning::None, false}},
    {"meetkai-functionary-medium-v3.2", {Format::None, Reasoning::None, false}},
    {"meta-llama-Llama-3.1-8B-Instruct", {Format::Llama3, Reasoning::None, false}},
    {"meta-llama-Llama-3.2-3B-Instruct", {Format::Llama3, Reasoning::None, false}},
    {"meta-llama-Llama-3.3-70B-Instruct", {Format::Llama3, Reasoning::None, false}},
    {"microsoft-Phi-3.5-mini-instruct", {Format::None, Reasoning::None, false}},
    {"mistralai-Ministral-3-14B-Reasoning-2512", {Format::MistralArgs, Reasoning::MistralThink, false}},
    {"mistralai-Mistral-Nemo-Instruct-2407", {Format::MistralJson, Reasoning::None, false}},
    {"moonshotai-Kimi-K2", {Format::None, Reasoning::None, false}},
    {"muse-glimmer", {Format::None, Reasoning::None, false}},
    {"openai-gpt-oss-120b", {Format::None, Reasoning::None, false}},
    {"openbmb-MiniCPM5-1B", {Format::None, Reasoning::ThinkTags, true}},
    {"poolside-Laguna-S-2.1", {Format::None, Reasoning::ThinkTags, true}},
    {"poolside-Laguna-XS-2.1", {Format::None, Reasoning::ThinkTags, true}},
    {"poolside-Laguna-XS.2", {Format::None, Reasoning::ThinkTags, true}},
    {"tencent-Hy3", {Format::None, Reasoning::None, false}},
    {"unsloth-Apriel-1.5", {Format::None, Reasoning::None, false}},
    {"unsloth-mistral-Devstral-Small-2507", {Format::MistralArgs, Reasoning::None, false}},
    {"upstage-Solar-Open-100B", {Format::None, Reasoning::None, false}},
};

TEST(ToolCallsDetect, EveryRealTemplate) {
    const std::filesystem::path dir = std::filesystem::path(PTXLM_SOURCE_DIR) / "tests/data/jinja_templates";
    size_t seen = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (entry.path().extension() != ".jinja") continue;
        const std::string name = entry.path().stem().string();
        auto it = kTemplates.find(name);
        ASSERT_NE(it, kTemplates.end()) << "no expectation for " << name;
        const Formats f = detect(read_file(entry.path()));
        EXPECT_EQ(format_name(f.tools), format_name(it->second.tools)) << name;
        EXPECT_EQ(reasoning_name(f.reasoning), reasoning_name(it->second.reasoning)) << name;
        EXPECT_EQ(f.starts_in_reasoning, it->second.starts_in_reasoning) << name;
        ++seen;
    }
    EXPECT_EQ(seen, kTemplates.size());
    EXPECT_GE(seen, 70u);
}

TEST(ToolCallsDetect, PromptOpensReasoning) {
    EXPECT_TRUE(prompt_opens_reasoning(Reasoning::ThinkTags, "<|im_start|>assistant\n<think>\n"));
    EXPECT_FALSE(prompt_opens_reasoning(Reasoning::ThinkTags, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    EXPECT_FALSE(prompt_opens_reasoning(Reasoning::ThinkTags, "<think>x</think>user<|im_start|>assistant\n"));
    EXPECT_TRUE(prompt_opens_reasoning(Reasoning::MistralThink, "[INST]hi[/INST][THINK]"));
    EXPECT_FALSE(prompt_opens_reasoning(Reasoning::None, "<think>"));
}

// --- parse(): expected results per format.

struct Case {
    std::string name;
    Formats f;
    std::string text;
    Parsed want;
};

const Formats kHermes{Format::Hermes, Reasoning::None, false};
const Formats kHermesThink{Format::Hermes, Reasoning::ThinkTags, false};
const Formats kHermesOpen{Format::Hermes, Reasoning::ThinkTags, true};
const Formats kLlama{Format::Llama3, Reasoning::None, false};
const Formats kLlamaThink{Format::Llama3, Reasoning::ThinkTags, true};
const Formats kMJson{Format::MistralJson, Reasoning::None, false};
const Formats kMJsonThink{Format::MistralJson, Reasoning::MistralThink, false};
const Formats kMArgs{Format::MistralArgs, Reasoning::None, false};
const Formats kMArgsThink{Format::MistralArgs, Reasoning::MistralThink, false};
const Formats kGeneric{Format::Generic, Reasoning::None, false};
const Formats kGenericThink{Format::Generic, Reasoning::ThinkTags, false};
const Formats kNone{Format::None, Reasoning::None, false};

const std::string kParis = R"({"city": "Paris"})";
const std::string kUnicode = R"({"q": "caf\u00e9 \"quoted\" 東京 🙂 \\ back"})";
const std::string kHermesCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + kParis + "}\n</tool_call>";

std::vector<Case> cases() {
    const ToolCall weather{"id0", "get_weather", kParis};
    std::vector<Case> c = {
        // Hermes.
        {"hermes_single", kHermes, kHermesCall, {"", "", {weather}}},
        {"hermes_parallel", kHermes,
         kHermesCall + "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>",
         {"", "", {weather, {"id1", "get_time", R"({"tz": "CET"})"}}}},
        {"hermes_content_before", kHermes, "Let me check the weather.\n\n" + kHermesCall,
         {"Let me check the weather.", "", {weather}}},
        {"hermes_content_after", kHermes, kHermesCall + "\nDone.", {"Done.", "", {weather}}},
        {"hermes_reasoning", kHermesThink, "<think>\nThe user wants weather.\n</think>\n\n" + kHermesCall,
         {"", "The user wants weather.", {weather}}},
        {"hermes_reasoning_opened", kHermesOpen, "\nThe user wants weather.\n</think>\n\nSure. " + kHermesCall,
         {"Sure.", "The user wants weather.", {weather}}},
        {"hermes_call_in_reasoning", kHermesThink, "<think>maybe " + kHermesCall + "</think>ok",
         {"ok", "maybe " + kHermesCall, {}}},
        {"hermes_malformed", kHermes,
         "Hi <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
         {"Hi <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>", "", {}}},
        {"hermes_truncated", kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ",
         {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ", "", {}}},
        {"hermes_no_arguments", kHermes, "<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>",
         {"", "", {{"id0", "get_time", "{}"}}}},
        {"hermes_empty_arguments", kHermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
         {"", "", {{"id0", "get_time", "{}"}}}},
        {"hermes_unicode", kHermes, "<tool_call>\n{\"name\": \"search\", \"arguments\": " + kUnicode + "}\n</tool_call>",
         {"", "", {{"id0", "search", kUnicode}}}},
        {"hermes_close_tag_in_string", kHermes,
         "<tool_call>{\"name\": \"echo\", \"arguments\": {\"s\": \"</tool_call>\"}}</tool_call>",
         {"", "", {{"id0", "echo", R"({"s": "</tool_call>"})"}}}},
        {"hermes_string_arguments", kHermes,
         R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)", {"", "", {{"id0", "f", R"({"a": 1})"}}}},
        {"hermes_unclosed_at_end", kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}\n",
         {"", "", {{"id0", "f", "{}"}}}},
        {"hermes_broken_then_good", kHermes, "<tool_call>oops</tool_call>\n" + kHermesCall,
         {"<tool_call>oops</tool_call>", "", {weather}}},
        {"hermes_unknown_key", kHermes, "<tool_call>{\"name\": \"f\", \"x\": 1}</tool_call>",
         {"<tool_call>{\"name\": \"f\", \"x\": 1}</tool_call>", "", {}}},
        {"hermes_not_at_trigger", kHermes, "Use {\"name\": \"f\", \"arguments\": {}} like <tool> a < b.",
         {"Use {\"name\": \"f\", \"arguments\": {}} like <tool> a < b.", "", {}}},
        {"hermes_partial_trigger_at_end", kHermes, "a <tool_ca", {"a <tool_ca", "", {}}},
        {"hermes_reasoning_unclosed", kHermesThink, "  <think>\nstill thinking <tool_call>", 
         {"", "still thinking <tool_call>", {}}},
        {"hermes_think_not_at_start", kHermesThink, "x <think>y</think>", {"x <think>y</think>", "", {}}},
        {"hermes_empty_think", kHermesThink, "<think>\n\n</think>\n\nHello", {"Hello", "", {}}},
        // Llama 3.x.
        {"llama_single", kLlama, R"({"name": "get_weather", "parameters": {"city": "Paris"}})", {"", "", {weather}}},
        {"llama_python_tag", kLlama, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": " + kParis + "}",
         {"", "", {weather}}},
        {"llama_type_arguments", kLlama,
         "\n{\"type\": \"function\", \"name\": \"get_weather\", \"arguments\": " + kParis + "}\n", {"", "", {weather}}},
        {"llama_no_arguments", kLlama, R"({"name": "get_time", "parameters": {}})", {"", "", {{"id0", "get_time", "{}"}}}},
        {"llama_name_only_is_content", kLlama, R"({"name": "John"})", {R"({"name": "John"})", "", {}}},
        {"llama_unicode", kLlama, "{\"name\": \"search\", \"parameters\": " + kUnicode + "}",
         {"", "", {{"id0", "search", kUnicode}}}},
        {"llama_content_before", kLlama, "Sure: {\"name\": \"get_weather\", \"parameters\": " + kParis + "}",
         {"Sure: {\"name\": \"get_weather\", \"parameters\": " + kParis + "}", "", {}}},
        {"llama_text_after", kLlama, "{\"name\": \"get_weather\", \"parameters\": " + kParis + "} and more",
         {"{\"name\": \"get_weather\", \"parameters\": " + kParis + "} and more", "", {}}},
        {"llama_two_calls_are_content", kLlama,
         "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}",
         {"{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}", "", {}}},
        {"llama_builtin_python", kLlama, "<|python_tag|>brave_search.call(query=\"paris\")",
         {"<|python_tag|>brave_search.call(query=\"paris\")", "", {}}},
        {"llama_malformed", kLlama, R"({"name": "get_weather", "parameters": {"city": "Par)",
         {R"({"name": "get_weather", "parameters": {"city": "Par)", "", {}}},
        {"llama_reasoning", kLlamaThink, "Think.\n</think>\n\n{\"name\": \"get_weather\", \"parameters\": " + kParis + "}",
         {"", "Think.", {weather}}},
        {"llama_plain", kLlama, "  Paris is sunny. {\"x\": 1}", {"  Paris is sunny. {\"x\": 1}", "", {}}},
        // Mistral v3 / Nemo.
        {"mjson_single", kMJson, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + kParis + ", \"id\": \"a1b2c3d4e\"}]",
         {"", "", {{"a1b2c3d4e", "get_weather", kParis}}}},
        {"mjson_no_id", kMJson, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": " + kParis + "}]",
         {"", "", {weather}}},
        {"mjson_bad_id", kMJson, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + kParis + ", \"id\": \"x\"}]",
         {"", "", {weather}}},
        {"mjson_parallel", kMJson,
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + kParis +
             "}, {\"name\": \"get_time\", \"arguments\": {}, \"id\": \"Z9Y8X7W6V\"}]",
         {"", "", {weather, {"Z9Y8X7W6V", "get_time", "{}"}}}},
        {"mjson_content_before", kMJson, "Checking.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + kParis + "}]",
         {"Checking.", "", {weather}}},
        {"mjson_no_arguments", kMJson, "[TOOL_CALLS][{\"name\": \"get_time\"}]", {"", "", {{"id0", "get_time", "{}"}}}},
        {"mjson_unicode", kMJson, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": " + kUnicode + "}]",
         {"", "", {{"id0", "search", kUnicode}}}},
        {"mjson_malformed", kMJson, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\"}]",
         {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\"}]", "", {}}},
        {"mjson_one_bad_element", kMJson, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, 3]",
         {"[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, 3]", "", {}}},
        {"mjson_not_at_trigger", kMJson, "[{\"name\": \"get_weather\", \"arguments\": {}}]",
         {"[{\"name\": \"get_weather\", \"arguments\": {}}]", "", {}}},
        {"mjson_reasoning", kMJsonThink, "[THINK]Need weather.[/THINK][TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " +
             kParis + "}]", {"", "Need weather.", {weather}}},
        // Mistral Small 3.2 / Magistral / Ministral 3 / Devstral.
        {"margs_single", kMArgs, "[TOOL_CALLS]get_weather[ARGS]" + kParis, {"", "", {weather}}},
        {"margs_parallel", kMArgs, "[TOOL_CALLS]get_weather[ARGS]" + kParis + "[TOOL_CALLS]get_time[ARGS]{\"tz\": \"CET\"}",
         {"", "", {weather, {"id1", "get_time", R"({"tz": "CET"})"}}}},
        {"margs_call_id", kMArgs, "[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]" + kParis,
         {"", "", {{"a1b2c3d4e", "get_weather", kParis}}}},
        {"margs_content_before", kMArgs, "I will check.\n[TOOL_CALLS]get_weather[ARGS]" + kParis,
         {"I will check.", "", {weather}}},
        {"margs_content_after", kMArgs, "[TOOL_CALLS]get_weather[ARGS]" + kParis + "\nThen more.",
         {"Then more.", "", {weather}}},
        {"margs_reasoning", kMArgsThink, "[THINK]\nNeed weather.\n[/THINK]\n[TOOL_CALLS]get_weather[ARGS]" + kParis,
         {"", "Need weather.", {weather}}},
        {"margs_no_arguments", kMArgs, "[TOOL_CALLS]get_time[ARGS]{}", {"", "", {{"id0", "get_time", "{}"}}}},
        {"margs_unicode", kMArgs, "[TOOL_CALLS]search[ARGS]" + kUnicode, {"", "", {{"id0", "search", kUnicode}}}},
        {"margs_malformed", kMArgs, "[TOOL_CALLS]get_weather[ARGS]{\"city\": }", {"[TOOL_CALLS]get_weather[ARGS]{\"city\": }", "", {}}},
        {"margs_bad_name", kMArgs, "[TOOL_CALLS]get weather[ARGS]{}", {"[TOOL_CALLS]get weather[ARGS]{}", "", {}}},
        {"margs_no_args_tag", kMArgs, "[TOOL_CALLS]get_weather", {"[TOOL_CALLS]get_weather", "", {}}},
        {"margs_not_at_trigger", kMArgs, "get_weather[ARGS]{}", {"get_weather[ARGS]{}", "", {}}},
        // Generic.
        {"generic_single", kGeneric, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": " + kParis + "}]}",
         {"", "", {weather}}},
        {"generic_parallel", kGeneric,
         "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": " + kParis +
             "}, {\"name\": \"get_time\", \"arguments\": {}}]}",
         {"", "", {weather, {"id1", "get_time", "{}"}}}},
        {"generic_response", kGeneric, R"( {"response": "Hello \"you\" caf\u00e9"} )", {"Hello \"you\" café", "", {}}},
        {"generic_fenced", kGeneric, "```json\n{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": " + kParis + "}]}\n```",
         {"", "", {weather}}},
        {"generic_no_arguments", kGeneric, R"({"tool_calls": [{"name": "get_time"}]})", {"", "", {{"id0", "get_time", "{}"}}}},
        {"generic_unicode", kGeneric, "{\"tool_calls\": [{\"name\": \"search\", \"arguments\": " + kUnicode + "}]}",
         {"", "", {{"id0", "search", kUnicode}}}},
        {"generic_plain", kGeneric, "Just text.", {"Just text.", "", {}}},
        {"generic_malformed", kGeneric, R"({"tool_calls": [{"name": "f", "arguments": {]})",
         {R"({"tool_calls": [{"name": "f", "arguments": {]})", "", {}}},
        {"generic_other_object", kGeneric, R"({"answer": 42})", {R"({"answer": 42})", "", {}}},
        {"generic_text_before", kGeneric, R"(Here: {"response": "x"})", {R"(Here: {"response": "x"})", "", {}}},
        {"generic_reasoning", kGenericThink, "<think>hm</think>{\"response\": \"ok\"}", {"ok", "hm", {}}},
        // No tools.
        {"none_plain", kNone, kHermesCall, {kHermesCall, "", {}}},
    };
    return c;
}

class ParseCase : public ::testing::TestWithParam<Case> {};

void expect_parsed(const Parsed& got, const Parsed& want, const std::string& what) {
    EXPECT_EQ(got.content, want.content) << what;
    EXPECT_EQ(got.reasoning, want.reasoning) << what;
    ASSERT_EQ(got.calls.size(), want.calls.size()) << what;
    for (size_t i = 0; i < got.calls.size(); ++i) {
        EXPECT_EQ(got.calls[i].id, want.calls[i].id) << what << " call " << i;
        EXPECT_EQ(got.calls[i].name, want.calls[i].name) << what << " call " << i;
        EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments) << what << " call " << i;
    }
}

TEST_P(ParseCase, Parse) {
    const Case& c = GetParam();
    expect_parsed(parse(c.f, c.text, counter()), c.want, c.name);
    for (const ToolCall& call : c.want.calls) EXPECT_TRUE(nlohmann::json::parse(call.arguments).is_object());
}

// --- Streaming: the deltas, concatenated, equal parse(); every intermediate state is a prefix of it.

// A streaming parser under test: feed, then finish.
struct Streamer {
    std::function<Delta(std::string_view)> feed;
    std::function<Delta()> finish;
};

Streamer real_streamer(const Formats& f) {
    auto sp = std::make_shared<StreamParser>(f, counter());
    return {[sp](std::string_view t) { return sp->feed(t); }, [sp] { return sp->finish(); }};
}

// The negative control: a stream that holds nothing back. On each piece it parses the text so far as if
// complete and sends what grew; what it has sent cannot be taken back.
Streamer eager_streamer(const Formats& f) {
    struct State {
        std::string text;
        Parsed sent;
    };
    auto st = std::make_shared<State>();
    auto grow = [st, f]() {
        Parsed now = parse(f, st->text, counter());
        Delta d;
        if (now.content.starts_with(st->sent.content)) d.content = now.content.substr(st->sent.content.size());
        if (now.reasoning.starts_with(st->sent.reasoning)) d.reasoning = now.reasoning.substr(st->sent.reasoning.size());
        for (size_t i = st->sent.calls.size(); i < now.calls.size(); ++i)
            d.calls.push_back({i, now.calls[i].id, now.calls[i].name, now.calls[i].arguments});
        accumulate(st->sent, d);
        return d;
    };
    return {[st, grow](std::string_view t) { st->text += t; return grow(); }, grow};
}

// Feeds text in the pieces that `cuts` (increasing positions) make; returns "" when the stream matches
// want, else what went wrong.
std::string check_stream(Streamer s, std::string_view text, const std::vector<size_t>& cuts, const Parsed& want) {
    Parsed got;
    size_t prev = 0;
    auto check_delta = [&](const Delta& d, const std::string& where) -> std::string {
        for (const CallDelta& c : d.calls)
            if (c.index == got.calls.size() && (c.id.empty() || c.name.empty())) return where + ": a first call delta without id or name";
        accumulate(got, d);
        if (!want.content.starts_with(got.content)) return where + ": content \"" + got.content + "\" is not a prefix of the final content";
        if (!want.reasoning.starts_with(got.reasoning)) return where + ": reasoning is not a prefix of the final reasoning";
        if (got.calls.size() > want.calls.size()) return where + ": too many calls";
        return "";
    };
    for (size_t cut : cuts) {
        if (std::string e = check_delta(s.feed(text.substr(prev, cut - prev)), "after byte " + std::to_string(cut)); !e.empty())
            return e;
        prev = cut;
    }
    if (std::string e = check_delta(s.feed(text.substr(prev)), "after the last piece"); !e.empty()) return e;
    if (std::string e = check_delta(s.finish(), "at finish"); !e.empty()) return e;
    if (!(got == want)) return "the accumulated stream differs from parse(): content \"" + got.content + "\"";
    return "";
}

std::vector<std::vector<size_t>> split_plans(size_t n, uint32_t seed) {
    std::vector<std::vector<size_t>> plans;
    for (size_t i = 1; i < n; ++i) plans.push_back({i});   // two pieces, at every byte
    std::vector<size_t> bytes;
    for (size_t i = 1; i < n; ++i) bytes.push_back(i);
    plans.push_back(bytes);   // one byte at a time
    std::mt19937 rng(seed);
    for (int k = 0; k < 40; ++k) {   // random fragments of 1..8 bytes
        std::vector<size_t> cuts;
        for (size_t p = 1 + rng() % 8; p < n; p += 1 + rng() % 8) cuts.push_back(p);
        plans.push_back(cuts);
    }
    return plans;
}

TEST_P(ParseCase, StreamEqualsParse) {
    const Case& c = GetParam();
    const Parsed want = parse(c.f, c.text, counter());
    for (const auto& plan : split_plans(c.text.size(), 1234)) {
        std::string err = check_stream(real_streamer(c.f), c.text, plan, want);
        ASSERT_EQ(err, "") << c.name << " split into " << plan.size() + 1 << " pieces, first cut "
                           << (plan.empty() ? 0 : plan[0]);
    }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }
INSTANTIATE_TEST_SUITE_P(Formats, ParseCase, ::testing::ValuesIn(cases()), case_name);

// The check has teeth: a stream that does not hold back fails it wherever a trigger is split.
TEST(ToolCallsStream, NegativeControlFails) {
    size_t failed = 0, checked = 0;
    for (const Case& c : cases()) {
        if (c.want.calls.empty() && c.want.reasoning.empty()) continue;
        const Parsed want = parse(c.f, c.text, counter());
        bool any = false;
        for (const auto& plan : split_plans(c.text.size(), 99))
            if (!check_stream(eager_streamer(c.f), c.text, plan, want).empty()) any = true;
        failed += any;
        ++checked;
    }
    EXPECT_GT(checked, 20u);
    EXPECT_EQ(failed, checked) << "a case where an eager stream passes cannot tell holding back from not";
}

TEST(ToolCallsStream, HoldsBackPartialTriggers) {
    StreamParser h(kHermes, counter());
    EXPECT_EQ(h.feed("Hello <tool_").content, "Hello");   // the space and the partial tag wait
    EXPECT_EQ(h.feed("x").content, " <tool_x");           // not a tag after all
    Delta d = h.feed(" then " + kHermesCall.substr(0, 20));
    EXPECT_EQ(d.content, " then");
    EXPECT_TRUE(d.calls.empty());
    d = h.feed(kHermesCall.substr(20));
    ASSERT_EQ(d.calls.size(), 1u);
    EXPECT_EQ(d.calls[0].name, "get_weather");
    EXPECT_EQ(d.calls[0].arguments, kParis);
    EXPECT_TRUE(h.finish().empty());

    StreamParser t(kHermesThink, counter());
    EXPECT_TRUE(t.feed("<thi").empty());
    EXPECT_EQ(t.feed("nk>\nabc </th").reasoning, "abc");
    EXPECT_EQ(t.feed("ink>\n\nHi").content, "Hi");

    StreamParser m(kMArgs, counter());
    EXPECT_EQ(m.feed("ok [TOOL_CA").content, "ok");
    EXPECT_TRUE(m.feed("LLS]get_weather[AR").empty());
    EXPECT_EQ(m.feed("GS]{\"city\": \"Par").calls.size(), 0u);
    EXPECT_EQ(m.feed("is\"}").calls.size(), 1u);   // the object closed: the call is final

    StreamParser l(kLlama, counter());
    EXPECT_TRUE(l.feed("{\"name\": \"f\", \"parameters\": {}}").empty());   // text after it would make it content
    EXPECT_EQ(l.finish().calls.size(), 1u);
    StreamParser lc(kLlama, counter());
    EXPECT_EQ(lc.feed("Paris").content, "Paris");   // not "{" first: content streams at once
}

TEST(ToolCallsStream, FeedAfterFinishIsIgnored) {
    StreamParser s(kHermes, counter());
    EXPECT_EQ(s.feed("a").content, "a");
    EXPECT_TRUE(s.finish().empty());
    EXPECT_TRUE(s.feed("b").empty());
}

// Random text built from the formats' pieces: stream equals parse for every format.
TEST(ToolCallsStream, RandomPiecesEveryFormat) {
    const std::vector<std::string> pieces = {
        "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<think>", "</think>", "[THINK]",
        "[/THINK]", "<|python_tag|>", "```", "{", "}", "[", "]", "\"name\"", ": ", "\"f\"", ", ", "\"arguments\"",
        "{\"a\": 1}", "\n", " ", "text", "é", "\"", "\\", "get_weather", "a1b2c3d4e", "\"response\"",
        "\"tool_calls\"", "{\"name\": \"f\", \"arguments\": {}}"};
    const std::vector<Formats> formats = {kHermes, kHermesThink, kHermesOpen, kLlama, kLlamaThink, kMJson,
                                          kMJsonThink, kMArgs, kMArgsThink, kGeneric, kGenericThink, kNone};
    std::mt19937 rng(42);
    size_t calls = 0;
    for (int iter = 0; iter < 600; ++iter) {
        std::string text;
        for (int k = 0, n = 1 + int(rng() % 14); k < n; ++k) text += pieces[rng() % pieces.size()];
        for (const Formats& f : formats) {
            const Parsed want = parse(f, text, counter());
            calls += want.calls.size();
            for (const ToolCall& c : want.calls) ASSERT_TRUE(nlohmann::json::parse(c.arguments).is_object());
            std::vector<size_t> cuts;
            for (size_t p = 1 + rng() % 5; p < text.size(); p += 1 + rng() % 5) cuts.push_back(p);
            ASSERT_EQ(check_stream(real_streamer(f), text, cuts, want), "")
                << format_name(f.tools) << "/" << reasoning_name(f.reasoning) << ": " << text;
        }
    }
    EXPECT_GT(calls, 0u);
}

TEST(ToolCallsIds, SeededAndShaped) {
    auto a = id_source(Format::Hermes, 5), b = id_source(Format::Hermes, 5);
    const std::string id = a();
    EXPECT_EQ(id, b());
    ASSERT_EQ(id.size(), 29u);
    EXPECT_TRUE(id.starts_with("call_"));
    auto m = id_source(Format::MistralArgs, 5);
    const std::string mid = m();
    ASSERT_EQ(mid.size(), 9u);
    for (char ch : mid) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)));
    EXPECT_NE(a(), id);
    // The seeded source gives the stream and parse() the same ids.
    const std::string text = kHermesCall + kHermesCall;
    Parsed whole = parse(kHermes, text, id_source(Format::Hermes, 9));
    StreamParser sp(kHermes, id_source(Format::Hermes, 9));
    Parsed streamed;
    for (char ch : text) accumulate(streamed, sp.feed(std::string_view(&ch, 1)));
    accumulate(streamed, sp.finish());
    EXPECT_EQ(streamed, whole);
    ASSERT_EQ(whole.calls.size(), 2u);
    EXPECT_NE(whole.calls[0].id, whole.calls[1].id);
}

// --- The generic tools prompt.

TEST(ToolCallsPrompt, DescribesToolsAndAnswerFormat) {
    const auto tools = nlohmann::ordered_json::parse(R"([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"name": "get_time", "description": "The time now", "parameters": {"type": "object", "properties": {}}},
        {"type": "function", "function": {"description": "no name: skipped"}}
    ])");
    const std::string p = generic_tools_prompt(tools, "auto");
    EXPECT_NE(p.find("get_weather"), std::string::npos);
    EXPECT_NE(p.find("Weather in a city"), std::string::npos);
    EXPECT_NE(p.find(tools[0]["function"]["parameters"].dump()), std::string::npos);
    EXPECT_NE(p.find("get_time"), std::string::npos);
    EXPECT_NE(p.find("The time now"), std::string::npos);
    EXPECT_NE(p.find(tools[1]["parameters"].dump()), std::string::npos);
    EXPECT_EQ(p.find("no name"), std::string::npos);
    EXPECT_NE(p.find("{\"tool_calls\": [{\"name\""), std::string::npos);
    EXPECT_NE(p.find("{\"response\": "), std::string::npos);

    const std::string req = generic_tools_prompt(tools, "required");
    EXPECT_NE(req.find("must call at least one tool"), std::string::npos);
    EXPECT_EQ(req.find("{\"response\": "), std::string::npos);
    const std::string named = generic_tools_prompt(tools, "get_time");
    EXPECT_NE(named.find("must call the tool \"get_time\""), std::string::npos);
    EXPECT_NE(named.find("{\"tool_calls\": [{\"name\": \"get_time\""), std::string::npos);
    const std::string none = generic_tools_prompt(tools, "none");
    EXPECT_EQ(none.find("{\"tool_calls\""), std::string::npos);

    // An answer in the format the prompt asks for parses back.
    const Parsed back = parse(kGeneric, R"({"tool_calls": [{"name": "get_time", "arguments": {}}]})", counter());
    ASSERT_EQ(back.calls.size(), 1u);
    EXPECT_EQ(back.calls[0].name, "get_time");
}

}  // namespace
