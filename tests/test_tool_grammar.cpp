// Tool-call grammars against the tool-call parsers: for every format, the
// text a grammar lets a model write is what the format's parser reads as
// that call (name and arguments), wrong names and arguments that break the
// function's schema are refused, and prefix_rules renames rules only.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/chat_template.h"
#include "engine/grammar.h"
#include "engine/json_schema.h"
#include "engine/tool_grammar.h"

using namespace ptxlm;
using ojson = nlohmann::ordered_json;

namespace {

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "The weather.",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                  "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time"}}])");

bool complete(const GrammarText& g, std::string_view text) {
    grammar::Matcher m(grammar::Grammar::parse(g.gbnf));
    return m.accept(text) && m.can_end();
}

struct Case {
    tools::Format format;
    std::string weather;   // a well-formed call of get_weather(city: Paris, unit: c)
    std::string two;       // two calls: get_weather then get_time
    std::string bad_args;  // get_weather with unit "k"
};

const Case kCases[] = {
    {tools::Format::Hermes,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n"
     "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"k\"}}\n</tool_call>"},
    {tools::Format::Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}", "",
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"k\"}}"},
    {tools::Format::MistralJson,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}, \"id\": \"abc123XYZ\"}]",
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}, \"id\": \"abc123XYZ\"}, "
     "{\"name\": \"get_time\", \"arguments\": {}, \"id\": \"000000000\"}]",
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"k\"}, \"id\": \"abc123XYZ\"}]"},
    {tools::Format::MistralArgs, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"c\"}",
     "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"c\"}[TOOL_CALLS]get_time[ARGS]{}",
     "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"k\"}"},
    {tools::Format::Generic,
     "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}]}",
     "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}, "
     "{\"name\": \"get_time\", \"arguments\": {}}]}",
     "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"k\"}}]}"},
};

TEST(ToolGrammar, WhatTheGrammarAllowsTheParserReads) {
    for (const Case& c : kCases) {
        const std::string name = tools::format_name(c.format);
        const GrammarText required = tool_call_grammar(c.format, kTools, "required", true);
        EXPECT_TRUE(required.triggers.empty()) << name;
        EXPECT_TRUE(complete(required, c.weather)) << name << ": " << required.gbnf;
        EXPECT_FALSE(complete(required, c.bad_args)) << name;
        std::string wrong = c.weather;
        wrong.replace(wrong.find("get_weather"), 11, "get_wether");
        EXPECT_FALSE(complete(required, wrong)) << name;
        EXPECT_FALSE(complete(required, "Sure, the weather:")) << name;

        tools::Formats f;
        f.tools = c.format;
        const tools::Parsed p = tools::parse(f, c.weather, tools::id_source(c.format, 1));
        ASSERT_EQ(p.calls.size(), 1u) << name << ": " << c.weather;
        EXPECT_EQ(p.calls[0].name, "get_weather");
        EXPECT_EQ(ojson::parse(p.calls[0].arguments), ojson::parse(R"({"city": "Paris", "unit": "c"})")) << name;
        EXPECT_TRUE(p.content.empty()) << name << ": " << p.content;

        if (!c.two.empty()) {
            EXPECT_TRUE(complete(required, c.two)) << name;
            EXPECT_FALSE(complete(tool_call_grammar(c.format, kTools, "required", false), c.two)) << name;
            const tools::Parsed two = tools::parse(f, c.two, tools::id_source(c.format, 1));
            ASSERT_EQ(two.calls.size(), 2u) << name;
            EXPECT_EQ(two.calls[1].name, "get_time");
        }
        // Named: only that function.
        const GrammarText named = tool_call_grammar(c.format, kTools, "get_time", true);
        EXPECT_FALSE(complete(named, c.weather)) << name;
    }
}

TEST(ToolGrammar, AutoStartsAtTheFormatsTrigger) {
    for (const Case& c : kCases) {
        const GrammarText g = tool_call_grammar(c.format, kTools, "auto", true);
        if (c.format == tools::Format::Generic) {
            // One JSON object either way: no trigger, and a text answer allowed.
            EXPECT_TRUE(g.triggers.empty());
            EXPECT_TRUE(complete(g, "{\"response\": \"It is sunny.\"}"));
            EXPECT_TRUE(complete(g, c.weather));
            continue;
        }
        ASSERT_EQ(g.triggers.size(), 1u);
        EXPECT_EQ(c.weather.rfind(g.triggers[0], 0), 0u) << tools::format_name(c.format);
        EXPECT_TRUE(complete(g, c.weather));
    }
}

TEST(ToolGrammar, SchemaErrorsNameTheTool) {
    const ojson bad = ojson::parse(R"([{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "patternProperties": {"a": {}}}}}])");
    try {
        tool_call_grammar(tools::Format::Hermes, bad, "required", true);
        FAIL();
    } catch (const SchemaError& e) {
        EXPECT_NE(std::string(e.what()).find("tools[0].function.parameters"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("patternProperties"), std::string::npos) << e.what();
    }
    EXPECT_THROW(tool_call_grammar(tools::Format::Hermes, kTools, "nonesuch", true), std::invalid_argument);
}

TEST(ToolGrammar, PrefixRulesRenamesRulesOnly) {
    const std::string g =
        "root ::= item (\",\" item){0,3} # root item\n"
        "item ::= \"item\" [a-z-]+ | \"root\"\n";
    const std::string p = prefix_rules(g, "x-");
    EXPECT_EQ(p, "x-root ::= x-item (\",\" x-item){0,3} # root item\n"
                 "x-item ::= \"item\" [a-z-]+ | \"root\"\n");
    const auto accepts = [](const std::string& gbnf, std::string_view root, std::string_view s) {
        grammar::Matcher m(grammar::Grammar::parse(gbnf, root));
        return m.accept(s) && m.can_end();
    };
    for (const char* s : {"itemab", "root,itemz", "root,root,root,root", "item", "root,root,root,root,root"})
        EXPECT_EQ(accepts(g, "root", s), accepts(p, "x-root", s)) << s;
    EXPECT_FALSE(accepts(p, "x-root", "x-root"));   // literals were not renamed
}

// Each real template of a family with a tool-call format renders an earlier
// assistant call the way its models write one: the parser of the format the
// template is detected as reads that rendering back as the call.
TEST(ToolGrammar, TheParserReadsTheTemplatesOwnRenderingOfACall) {
    const std::filesystem::path dir = std::filesystem::path(PTXLM_SOURCE_DIR) / "tests/data/jinja_templates";
 const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
        "description": "The weather in a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
    int checked = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        std::ifstream in(entry.path());
        const std::string src((std::istreambuf_iterator<char>(in)), {});
        const tools::Formats f = tools::detect(src);
        if (f.tools == tools::Format::None) continue;
        const std::string name = entry.path().filename().string();
        const ChatTemplate t = ChatTemplate::from_jinja(src, name);
        std::vector<ChatMessage> msgs{{"user", "Weather in Paris?"}};
        const std::string before = t.render_marked(msgs, true, "<s>", "</s>", {tools, nullptr}).text;
        ChatMessage call("assistant", "");
        call.tool_calls.push_back({"abcDEF123", "get_weather", R"({"city": "Paris"})"});
        msgs.push_back(call);
        std::string after;
        try {
            after = t.render_marked(msgs, false, "<s>", "</s>", {tools, nullptr}).text;
        } catch (const std::invalid_argument& e) {
            ADD_FAILURE() << name << ": " << e.what();
            continue;
        }
        // The assistant's turn: what the conversation adds after the generation
        // prompt (up to where they differ: a prompt may open a reasoning block).
        size_t common = 0;
        while (common < before.size() && common < after.size() && before[common] == after[common]) ++common;
        if (common < before.size()) common = after.rfind('\n', common) + 1;   // "<think>" and "<tool_call>" share "<t"
        EXPECT_GE(common + 16, before.size()) << name << "\n" << before << "\n---\n" << after;
        std::string turn = after.substr(common);
        for (const char* end : {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>", "<|end|>"})
            if (const size_t at = turn.rfind(end); at != std::string::npos) turn.resize(at);
        tools::Formats read = f;
        read.starts_in_reasoning = false;
        const tools::Parsed p = tools::parse(read, turn, tools::id_source(f.tools, 1));
        ASSERT_EQ(p.calls.size(), 1u) << name << " (" << tools::format_name(f.tools) << "): " << turn;
        EXPECT_EQ(p.calls[0].name, "get_weather") << name;
        EXPECT_EQ(ojson::parse(p.calls[0].arguments), ojson::parse(R"({"city": "Paris"})")) << name;
        ++checked;
    }
    EXPECT_GE(checked, 10);
}

}  // namespace
