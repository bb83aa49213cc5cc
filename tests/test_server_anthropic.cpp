// Anthropic's Messages API (server/anthropic.h): the /v1/messages parser
// field by field (types, ranges, required fields, the refused ones, unknown
// fields by name), system and content blocks, tools, tool_choice and the
// tool_use / tool_result blocks as the chat request's fields, the message
// and stream shapes with each stop_reason (tool_use blocks, thinking blocks,
// the stream's block indexes), errors in Anthropic's shape, the stop string
// the engine reports, and a fuzz pass of random and malformed bodies that
// may only ever raise ApiError (400).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <tuple>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "server/anthropic.h"
#include "tests/request_fuzz_util.h"

using namespace ptxlm;
using namespace ptxlm::server;
using nlohmann::json;

namespace {

const json kUser = json::array({{{"role", "user"}, {"content", "hi"}}});

// A minimal valid body, with `extra` merged in (a null value removes the field).
json body_with(const json& extra = json::object()) {
    json b = {{"model", "claude-x"}, {"max_tokens", 16}, {"messages", kUser}};
    for (const auto& [k, v] : extra.items()) {
        if (v.is_null()) b.erase(k);
        else b[k] = v;
    }
    return b;
}

CompletionRequest parse(const json& body) { return parse_messages_request(body.dump(), RequestDefaults{}); }

// The error a body gets: its status and param; {0, ""} when it parses.
std::pair<int, std::string> error_of(const std::string& body) {
    try {
        parse_messages_request(body, RequestDefaults{});
        return {0, ""};
    } catch (const ApiError& e) {
        return {e.status(), e.param()};
    }
}
std::pair<int, std::string> error_of(const json& body) { return error_of(body.dump()); }
std::string message_of(const json& body) {
    try {
        parse(body);
    } catch (const ApiError& e) {
        return e.what();
    }
    return "";
}

using Err = std::pair<int, std::string>;

TEST(ServerAnthropic, FieldsAreRead) {
    const CompletionRequest r = parse(body_with({{"system", "be brief"},
                                                 {"temperature", 0.25},
                                                 {"top_p", 0.5},
                                                 {"top_k", 7},
                                                 {"stop_sequences", {"\n\n", "END"}},
                                                 {"stream", true},
                                                 {"metadata", {{"user_id", "u-1"}}},
                                                 {"max_tokens", 9}}));
    EXPECT_EQ(r.endpoint, Endpoint::Chat);
    EXPECT_EQ(r.model, "claude-x");
    EXPECT_EQ(r.gen.max_tokens, 9);
    EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 0.25f);
    EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.5f);
    EXPECT_EQ(r.gen.sampling.top_k, 7);
    EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"\n\n", "END"}));
    EXPECT_TRUE(r.stream);
    EXPECT_FALSE(r.seed_given);
    EXPECT_EQ(r.logprobs, -1);
    const CompletionRequest seeded = parse(body_with({{"seed", 42}}));
    EXPECT_TRUE(seeded.seed_given);
    EXPECT_EQ(seeded.gen.sampling.seed, 42u);
    ASSERT_EQ(r.messages.size(), 2u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[0].content, "be brief");
    EXPECT_EQ(r.messages[1].role, "user");
    EXPECT_EQ(r.messages[1].content, "hi");
}

TEST(ServerAnthropic, DefaultsAreTheServers) {
    RequestDefaults d;
    d.sampling.temperature = 0.7f;
    d.sampling.top_k = 40;
    const CompletionRequest r = parse_messages_request(body_with().dump(), d);
    EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 0.7f);
    EXPECT_EQ(r.gen.sampling.top_k, 40);
    EXPECT_TRUE(r.gen.stop.empty());
    EXPECT_FALSE(r.stream);
    ASSERT_EQ(r.messages.size(), 1u);   // no system field: no system message
    // Null counts as absent.
    json with_nulls = body_with();
    for (const char* f : {"system", "temperature", "top_p", "top_k", "stop_sequences", "stream", "metadata", "tools",
                          "tool_choice", "thinking"})
        with_nulls[f] = nullptr;
    const CompletionRequest n = parse_messages_request(with_nulls.dump(), d);
    EXPECT_FLOAT_EQ(n.gen.sampling.temperature, 0.7f);
    EXPECT_EQ(n.messages.size(), 1u);
}

TEST(ServerAnthropic, SystemAsStringAndAsBlocks) {
    const json blocks = json::array({{{"type", "text"}, {"text", "one"}},
                                     {{"type", "text"}, {"text", "two"}, {"cache_control", {{"type", "ephemeral"}}}}});
    const CompletionRequest r = parse(body_with({{"system", blocks}}));
    ASSERT_EQ(r.messages.size(), 2u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[0].content, "one\ntwo");
    // An empty system prompt is none.
    EXPECT_EQ(parse(body_with({{"system", ""}})).messages.size(), 1u);
    EXPECT_EQ(error_of(body_with({{"system", 5}})), Err(400, "system"));
    EXPECT_EQ(error_of(body_with({{"system", json::array({{{"type", "image"}}})}})), Err(400, "system[0].type"));
    EXPECT_EQ(error_of(body_with({{"system", json::array({{{"type", "text"}}})}})), Err(400, "system[0].text"));
    EXPECT_EQ(error_of(body_with({{"system", json::array({"text"})}})), Err(400, "system[0]"));
}

TEST(ServerAnthropic, ContentBlocksAreJoinedAndTurnsCombined) {
    const json msgs = json::array(
        {{{"role", "user"},
          {"content", json::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}})}},
         {{"role", "assistant"}, {"content", "c"}},
         {{"role", "user"}, {"content", "d"}},
         {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "e"}}})}}});
    const CompletionRequest r = parse(body_with({{"messages", msgs}}));
    ASSERT_EQ(r.messages.size(), 3u);
    EXPECT_EQ(r.messages[0].content, "a\nb");
    EXPECT_EQ(r.messages[1].role, "assistant");
    EXPECT_EQ(r.messages[1].content, "c");
    EXPECT_EQ(r.messages[2].content, "d\ne");   // consecutive user turns: one turn
}

TEST(ServerAnthropic, EachFieldsTypeAndRange) {
    const std::vector<std::pair<json, std::string>> cases = {
        {{{"model", nullptr}}, "model"},
        {{{"model", 3}}, "model"},
        {{{"max_tokens", nullptr}}, "max_tokens"},
        {{{"max_tokens", -5}}, "max_tokens"},
        {{{"max_tokens", 1.5}}, "max_tokens"},
        {{{"max_tokens", "16"}}, "max_tokens"},
        {{{"max_tokens", uint64_t(1) << 40}}, "max_tokens"},
        {{{"max_tokens", std::numeric_limits<uint64_t>::max()}}, "max_tokens"},
        {{{"messages", nullptr}}, "messages"},
        {{{"messages", "hi"}}, "messages"},
        {{{"messages", json::array()}}, "messages"},
        {{{"messages", json::array({"hi"})}}, "messages[0]"},
        {{{"messages", json::array({{{"content", "hi"}}})}}, "messages[0].role"},
        {{{"messages", json::array({{{"role", 1}, {"content", "hi"}}})}}, "messages[0].role"},
        {{{"messages", json::array({{{"role", "system"}, {"content", "hi"}}})}}, "messages[0].role"},
        {{{"messages", json::array({{{"role", "tool"}, {"content", "hi"}}})}}, "messages[0].role"},
        {{{"messages", json::array({{{"role", "user"}}})}}, "messages[0].content"},
        {{{"messages", json::array({{{"role", "user"}, {"content", 4}}})}}, "messages[0].content"},
        {{{"messages", json::array({{{"role", "user"}, {"content", "x"}, {"name", "bob"}}})}}, "messages[0].name"},
        {{{"messages", json::array({{{"role", "user"}, {"content", json::array({{{"text", "x"}}})}}})}},
         "messages[0].content[0].type"},
        {{{"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", 1}}})}}})}},
         "messages[0].content[0].text"},
        {{{"messages",
           json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "x"}, {"z", 1}}})}}})}},
         "messages[0].content[0].z"},
        {{{"temperature", "hot"}}, "temperature"},
        {{{"temperature", -0.1}}, "temperature"},
        {{{"temperature", 1.5}}, "temperature"},   // Anthropic's range is 0..1
        {{{"top_p", 0}}, "top_p"},
        {{{"top_p", 1.01}}, "top_p"},
        {{{"top_p", true}}, "top_p"},
        {{{"top_k", -1}}, "top_k"},
        {{{"top_k", 2.5}}, "top_k"},
        {{{"stop_sequences", "END"}}, "stop_sequences"},
        {{{"stop_sequences", {1}}}, "stop_sequences"},
        {{{"stop_sequences", {""}}}, "stop_sequences"},
        {{{"stop_sequences", json(std::vector<std::string>(kMaxStopSequences + 1, "x"))}}, "stop_sequences"},
        {{{"stream", "yes"}}, "stream"},
        {{{"seed", "42"}}, "seed"},
        {{{"seed", 4.5}}, "seed"},
        {{{"stream", 1}}, "stream"},
        {{{"metadata", "u"}}, "metadata"},
        {{{"cache_control", "ephemeral"}}, "cache_control"},
        {{{"metadata", {{"user_id", 5}}}}, "metadata.user_id"},
        {{{"metadata", {{"session", "s"}}}}, "metadata.session"},
    };
    for (const auto& [extra, param] : cases) EXPECT_EQ(error_of(body_with(extra)), Err(400, param)) << extra.dump();
    // The boundaries themselves are accepted.
    for (const json& ok : {json{{"temperature", 0}}, json{{"temperature", 1}}, json{{"top_p", 1}}, json{{"top_k", 0}},
                           json{{"max_tokens", 0}}, json{{"max_tokens", std::numeric_limits<int32_t>::max()}},
                           json{{"stop_sequences", json(std::vector<std::string>(kMaxStopSequences, "x"))}},
                           json{{"metadata", json::object()}}, json{{"metadata", {{"user_id", nullptr}}}},
                           json{{"cache_control", {{"type", "ephemeral"}}}}})
        EXPECT_EQ(error_of(body_with(ok)), Err(0, "")) << ok.dump();
    // The message names the field.
    EXPECT_NE(message_of(body_with({{"temperature", 1.5}})).find("'temperature'"), std::string::npos);
    EXPECT_NE(message_of(body_with({{"max_tokens", nullptr}})).find("'max_tokens'"), std::string::npos);
}

TEST(ServerAnthropic, UnknownAndUnsupportedFieldsAreRefusedByName) {
    EXPECT_EQ(error_of(body_with({{"frequency_penalty", 1}})), Err(400, "frequency_penalty"));
    EXPECT_EQ(error_of(body_with({{"service_tier", "auto"}})), Err(400, "service_tier"));
    EXPECT_NE(message_of(body_with({{"bogus", 1}})).find("unknown field 'bogus'"), std::string::npos);

    EXPECT_EQ(error_of(body_with({{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}})),
              Err(400, "thinking"));
    EXPECT_EQ(error_of(body_with({{"thinking", "on"}})), Err(400, "thinking"));
    // What equals the defaults changes nothing and is accepted.
    EXPECT_EQ(error_of(body_with({{"tools", json::array()}})), Err(0, ""));
    EXPECT_EQ(error_of(body_with({{"thinking", {{"type", "disabled"}}}})), Err(0, ""));

    // Content blocks a user message cannot hold name the block's type.
    for (const char* type : {"image", "document", "tool_use", "thinking", "server_tool_use"}) {
        const json msgs = json::array({{{"role", "user"}, {"content", json::array({{{"type", type}}})}}});
        EXPECT_EQ(error_of(body_with({{"messages", msgs}})), Err(400, "messages[0].content[0].type")) << type;
        EXPECT_NE(message_of(body_with({{"messages", msgs}})).find(type), std::string::npos) << type;
    }
    // A final assistant turn would be continued by Anthropic (a prefill): refused.
    const json prefill =
        json::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "The"}}});
    EXPECT_EQ(error_of(body_with({{"messages", prefill}})), Err(400, "messages[1].role"));
}

// Tools: `body` with a raw JSON text as `key` (nlohmann::json would sort its keys).
std::string with_raw(const json& body, const std::string& key, const std::string& raw) {
    std::string s = body.dump();
    s.pop_back();
    return s + ",\"" + key + "\":" + raw + "}";
}

const json kTools = json::array({{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}},
                                 {{"name", "get_time"}, {"input_schema", {{"type", "object"}}}}});

TEST(ServerAnthropic, ToolsBecomeFunctions) {
    const std::string tools = R"([{"name": "get_weather", "description": "The weather.", "input_schema":
        {"type": "object", "properties": {"unit": {"type": "string"}, "city": {"type": "string"}}, "required": ["city"]},
        "cache_control": {"type": "ephemeral"}}, {"type": "custom", "name": "get-time_2", "input_schema": {"type": "object"}}])";
    const CompletionRequest r = parse_messages_request(with_raw(body_with(), "tools", tools), RequestDefaults{});
    const auto want = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
        "description": "The weather.", "parameters": {"type": "object", "properties": {"unit": {"type": "string"},
        "city": {"type": "string"}}, "required": ["city"]}}}, {"type": "function", "function": {"name": "get-time_2",
        "parameters": {"type": "object"}}}])");
    EXPECT_EQ(r.tools.dump(), want.dump());   // the schema's key order kept
    EXPECT_EQ(r.tool_choice, "auto");
    EXPECT_TRUE(r.parallel_tool_calls);
    // No tools, or an empty list: none.
    EXPECT_TRUE(parse(body_with()).tools.is_null());
    EXPECT_EQ(parse(body_with()).tool_choice, "none");
    EXPECT_TRUE(parse(body_with({{"tools", json::array()}})).tools.is_null());
    EXPECT_EQ(parse(body_with({{"tools", json::array()}, {"tool_choice", {{"type", "auto"}}}})).tool_choice, "none");
}

TEST(ServerAnthropic, ToolChoiceVariants) {
    const std::vector<std::tuple<json, std::string, bool>> cases = {
        {{{"type", "auto"}}, "auto", true},
        {{{"type", "any"}}, "required", true},
        {{{"type", "tool"}, {"name", "get_time"}}, "get_time", true},
        {{{"type", "none"}}, "none", true},
        {{{"type", "any"}, {"disable_parallel_tool_use", true}}, "required", false},
        {{{"type", "tool"}, {"name", "get_weather"}, {"disable_parallel_tool_use", true}}, "get_weather", false},
        {{{"type", "auto"}, {"disable_parallel_tool_use", false}}, "auto", true},
    };
    for (const auto& [choice, want, parallel] : cases) {
        const CompletionRequest r = parse(body_with({{"tools", kTools}, {"tool_choice", choice}}));
        EXPECT_EQ(r.tool_choice, want) << choice.dump();
        EXPECT_EQ(r.parallel_tool_calls, parallel) << choice.dump();
    }
    // Without tools, auto and none are no tool use.
    EXPECT_EQ(parse(body_with({{"tool_choice", {{"type", "auto"}}}})).tool_choice, "none");
    EXPECT_EQ(parse(body_with({{"tool_choice", {{"type", "none"}}}})).tool_choice, "none");
}

TEST(ServerAnthropic, ToolAndToolChoiceErrors) {
    const json schema = {{"type", "object"}};
    const std::vector<std::pair<json, std::string>> cases = {
        {{{"tools", "get_weather"}}, "tools"},
        {{{"tools", {5}}}, "tools[0]"},
        {{{"tools", {{{"input_schema", schema}}}}}, "tools[0].name"},
        {{{"tools", {{{"name", "get weather"}, {"input_schema", schema}}}}}, "tools[0].name"},
        {{{"tools", {{{"name", std::string(65, 'f')}, {"input_schema", schema}}}}}, "tools[0].name"},
        {{{"tools", {{{"name", ""}, {"input_schema", schema}}}}}, "tools[0].name"},
        {{{"tools", {kTools[0], kTools[0]}}}, "tools[1].name"},
        {{{"tools", {{{"name", "f"}}}}}, "tools[0].input_schema"},
        {{{"tools", {{{"name", "f"}, {"input_schema", "object"}}}}}, "tools[0].input_schema"},
        {{{"tools", {{{"name", "f"}, {"input_schema", {{"type", "string"}}}}}}}, "tools[0].input_schema.type"},
        {{{"tools", {{{"name", "f"}, {"input_schema", json::object()}}}}}, "tools[0].input_schema.type"},
        {{{"tools", {{{"name", "f"}, {"input_schema", schema}, {"description", 5}}}}}, "tools[0].description"},
        {{{"tools", {{{"name", "f"}, {"input_schema", schema}, {"cache_control", "x"}}}}}, "tools[0].cache_control"},
        {{{"tools", {{{"name", "f"}, {"input_schema", schema}, {"parameters", schema}}}}}, "tools[0].parameters"},
        {{{"tools", {{{"type", "web_search_20250305"}, {"name", "web_search"}}}}}, "tools[0].type"},
        {{{"tools", json(std::vector<json>(129, kTools[0]))}}, "tools"},
        {{{"tools", kTools}, {"tool_choice", "auto"}}, "tool_choice"},
        {{{"tools", kTools}, {"tool_choice", json::object()}}, "tool_choice"},
        {{{"tools", kTools}, {"tool_choice", {{"type", "function"}}}}, "tool_choice"},
        {{{"tools", kTools}, {"tool_choice", {{"type", "required"}}}}, "tool_choice"},
        {{{"tools", kTools}, {"tool_choice", {{"type", "tool"}, {"name", "get_moon"}}}}, "tool_choice"},
        {{{"tools", kTools}, {"tool_choice", {{"type", "tool"}}}}, "tool_choice.name"},
        {{{"tools", kTools}, {"tool_choice", {{"type", "auto"}, {"name", "get_time"}}}}, "tool_choice.name"},
        {{{"tools", kTools}, {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", "yes"}}}},
         "tool_choice.disable_parallel_tool_use"},
        {{{"tools", kTools}, {"tool_choice", {{"type", "any"}, {"x", 1}}}}, "tool_choice.x"},
        {{{"tool_choice", {{"type", "any"}}}}, "tool_choice"},
        {{{"tool_choice", {{"type", "tool"}, {"name", "get_time"}}}}, "tool_choice"},
    };
    for (const auto& [extra, param] : cases) EXPECT_EQ(error_of(body_with(extra)), Err(400, param)) << extra.dump();
    // The messages say what is wrong.
    EXPECT_NE(message_of(body_with({{"tools", kTools}, {"tool_choice", {{"type", "tool"}, {"name", "get_moon"}}}}))
                  .find("'get_moon'"),
              std::string::npos);
    EXPECT_NE(message_of(body_with({{"tools", kTools}, {"tool_choice", {{"type", "function"}}}})).find("\"function\""),
              std::string::npos);
    EXPECT_NE(message_of(body_with({{"tools", {{{"name", "a.b"}, {"input_schema", schema}}}}})).find("a.b"),
              std::string::npos);
}

TEST(ServerAnthropic, ToolUseAndToolResultBlocks) {
    // Raw text: the tool_use input's key order ("zone" before "city") is the arguments'.
    const std::string messages = R"([
        {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Two tools.", "signature": ""},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"zone": "CET", "city": "Paris"}},
            {"type": "tool_use", "id": "toolu_b", "name": "get_time", "input": {}, "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "22 degrees"},
            {"type": "text", "text": "Thanks."},
            {"type": "tool_result", "tool_use_id": "toolu_b", "is_error": true,
             "content": [{"type": "text", "text": "no"}, {"type": "text", "text": "clock"}]}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_c", "name": "get_time", "input": {"zone": "UTC"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_c", "is_error": false}]}])";
    json body = body_with({{"tools", kTools}});
    body.erase("messages");
    const CompletionRequest r = parse_messages_request(with_raw(body, "messages", messages), RequestDefaults{});
    ASSERT_EQ(r.messages.size(), 7u);
    EXPECT_EQ(r.messages[0].role, "user");
    const ChatMessage& a = r.messages[1];
    EXPECT_EQ(a.role, "assistant");
    EXPECT_EQ(a.content, "Let me look.");   // the thinking block is dropped
    ASSERT_EQ(a.tool_calls.size(), 2u);
    EXPECT_EQ(a.tool_calls[0].id, "toolu_a");
    EXPECT_EQ(a.tool_calls[0].name, "get_weather");
    EXPECT_EQ(a.tool_calls[0].arguments, R"({"zone":"CET","city":"Paris"})");
    EXPECT_EQ(a.tool_calls[1].arguments, "{}");
    // The turn's tool results first (in order), then its text.
    const std::vector<std::tuple<std::string, std::string, std::string, std::string>> want = {
        {"tool", "toolu_a", "get_weather", "22 degrees"},
        {"tool", "toolu_b", "get_time", "Error: no\nclock"},
        {"user", "", "", "Thanks."},
        {"assistant", "", "", ""},
        {"tool", "toolu_c", "get_time", ""},
    };
    for (size_t i = 0; i < want.size(); ++i) {
        const ChatMessage& m = r.messages[i + 2];
        EXPECT_EQ(std::tie(m.role, m.tool_call_id, m.name, m.content), want[i]) << i;
    }
    ASSERT_EQ(r.messages[5].tool_calls.size(), 1u);
    EXPECT_EQ(r.messages[5].tool_calls[0].arguments, R"({"zone":"UTC"})");
    // Tool results end the conversation: the answer follows them.
    EXPECT_EQ(r.messages.back().role, "tool");
}

TEST(ServerAnthropic, ToolBlockErrors) {
    const json use = {{"type", "tool_use"}, {"id", "toolu_a"}, {"name", "get_weather"}, {"input", json::object()}};
    const json result = {{"type", "tool_result"}, {"tool_use_id", "toolu_a"}, {"content", "22"}};
    auto conv = [&](const json& assistant_block, const json& user_block) {
        return json::array({{{"role", "user"}, {"content", "hi"}},
                            {{"role", "assistant"}, {"content", json::array({assistant_block})}},
                            {{"role", "user"}, {"content", json::array({user_block})}}});
    };
    auto with = [](json block, const json& extra) {
        for (const auto& [k, v] : extra.items()) {
            if (v.is_null()) block.erase(k);
            else block[k] = v;
        }
        return block;
    };
    EXPECT_EQ(error_of(body_with({{"messages", conv(use, result)}})), Err(0, ""));
    const std::vector<std::pair<json, std::string>> cases = {
        // A tool_result answering no earlier tool_use, and one answering a later one.
        {conv(use, with(result, {{"tool_use_id", "toolu_z"}})), "messages[2].content[0].tool_use_id"},
        {json::array({{{"role", "user"}, {"content", json::array({result})}},
                      {{"role", "assistant"}, {"content", json::array({use})}},
                      {{"role", "user"}, {"content", "and?"}}}),
         "messages[0].content[0].tool_use_id"},
        // Blocks in the wrong role's message.
        {json::array({{{"role", "user"}, {"content", json::array({use})}}}), "messages[0].content[0].type"},
        {conv(result, {{"type", "text"}, {"text", "x"}}), "messages[1].content[0].type"},
        {json::array({{{"role", "user"}, {"content", json::array({{{"type", "thinking"}, {"thinking", "x"}}})}}}),
         "messages[0].content[0].type"},
        // A tool_use block's fields.
        {conv(with(use, {{"input", "{}"}}), result), "messages[1].content[0].input"},
        {conv(with(use, {{"input", nullptr}}), result), "messages[1].content[0].input"},
        {conv(with(use, {{"id", nullptr}}), result), "messages[1].content[0].id"},
        {conv(with(use, {{"id", ""}}), result), "messages[1].content[0].id"},
        {conv(with(use, {{"name", 3}}), result), "messages[1].content[0].name"},
        {conv(with(use, {{"x", 1}}), result), "messages[1].content[0].x"},
        // A tool_result block's fields.
        {conv(use, with(result, {{"tool_use_id", nullptr}})), "messages[2].content[0].tool_use_id"},
        {conv(use, with(result, {{"is_error", "yes"}})), "messages[2].content[0].is_error"},
        {conv(use, with(result, {{"content", 22}})), "messages[2].content[0].content"},
        {conv(use, with(result, {{"content", json::array({{{"type", "image"}}})}})),
         "messages[2].content[0].content[0].type"},
        {conv(use, with(result, {{"x", 1}})), "messages[2].content[0].x"},
    };
    for (const auto& [msgs, param] : cases)
        EXPECT_EQ(error_of(body_with({{"messages", msgs}})), Err(400, param)) << msgs.dump();
    EXPECT_NE(message_of(body_with({{"messages", conv(use, with(result, {{"tool_use_id", "toolu_z"}}))}}))
                  .find("toolu_z"),
              std::string::npos);
    EXPECT_NE(message_of(body_with({{"messages", json::array({{{"role", "user"}, {"content", json::array({use})}}})}}))
                  .find("assistant message"),
              std::string::npos);
}

TEST(ServerAnthropic, MalformedBodies) {
    for (const char* body : {"", "{", "null", "[]", "42", "\"text\"", "{\"a\":1}{", "\xff\xfe",
                             "{\"model\":\"m\",\"max_tokens\":1,"
                             "\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}"})
        EXPECT_EQ(error_of(std::string(body)).first, 400) << body;
}

Event done_event(FinishReason why, std::string stop = {}) {
    Event e;
    e.kind = Event::Kind::Done;
    e.finish = why;
    e.stop = std::move(stop);
    e.prompt_tokens = 12;
    e.completion_tokens = 5;
    return e;
}

TEST(ServerAnthropic, StopReasons) {
    EXPECT_STREQ(anthropic_stop_reason(done_event(FinishReason::Stop)), "end_turn");
    EXPECT_STREQ(anthropic_stop_reason(done_event(FinishReason::Stop, "END")), "stop_sequence");
    EXPECT_STREQ(anthropic_stop_reason(done_event(FinishReason::Length)), "max_tokens");
    EXPECT_STREQ(anthropic_stop_reason(done_event(FinishReason::ContextFull)), "model_context_window_exceeded");
}

TEST(ServerAnthropic, MessageShape) {
    const MessageBuilder b("llama-tiny", 12);
    EXPECT_EQ(b.id().rfind("msg_", 0), 0u);
    const json m = b.message("Hello", done_event(FinishReason::Stop, "END"));
    EXPECT_EQ(m["id"], b.id());
    EXPECT_EQ(m["type"], "message");
    EXPECT_EQ(m["role"], "assistant");
    EXPECT_EQ(m["model"], "llama-tiny");
    EXPECT_EQ(m["content"], json::parse(R"([{"type":"text","text":"Hello"}])"));
    EXPECT_EQ(m["stop_reason"], "stop_sequence");
    EXPECT_EQ(m["stop_sequence"], "END");
    EXPECT_EQ(m["usage"], json::parse(R"({"input_tokens":12,"output_tokens":5})"));
    EXPECT_TRUE(b.message("x", done_event(FinishReason::Length))["stop_sequence"].is_null());
}

// "event: NAME\ndata: {...}\n\n" events as (name, data).
std::vector<std::pair<std::string, json>> events_of(const std::string& text) {
    std::vector<std::pair<std::string, json>> out;
    size_t at = 0;
    while (at < text.size()) {
        const size_t end = text.find("\n\n", at);
        EXPECT_NE(end, std::string::npos) << text;
        if (end == std::string::npos) break;
        const std::string ev = text.substr(at, end - at);
        const size_t nl = ev.find('\n');
        EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
        EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
        out.emplace_back(ev.substr(7, nl - 7), json::parse(ev.substr(nl + 7)));
        at = end + 2;
    }
    return out;
}

// A whole stream, its pieces in order (the builder keeps the open block's state).
std::string stream_of(MessageBuilder& b, const std::vector<std::string>& pieces, const Event& done) {
    std::string s = b.stream_start();
    for (const std::string& p : pieces) s += b.stream_text(p);
    return s + b.stream_end(done);
}

TEST(ServerAnthropic, StreamEvents) {
    MessageBuilder b("llama-tiny", 12);
    auto all = events_of(stream_of(b, {"He", "llo"}, done_event(FinishReason::Length)));
    std::vector<std::string> names;
    for (const auto& [name, data] : all) {
        names.push_back(name);
        EXPECT_EQ(data["type"], name);   // each event's data names its event
    }
    EXPECT_EQ(names, (std::vector<std::string>{"message_start", "ping", "content_block_start", "content_block_delta",
                                               "content_block_delta", "content_block_stop", "message_delta",
                                               "message_stop"}));
    const json& start = all[0].second["message"];
    EXPECT_EQ(start["id"], b.id());
    EXPECT_EQ(start["content"], json::array());
    EXPECT_TRUE(start["stop_reason"].is_null());
    EXPECT_EQ(start["usage"]["input_tokens"], 12);
    EXPECT_EQ(all[2].second["content_block"], json::parse(R"({"type":"text","text":""})"));
    EXPECT_EQ(all[3].second["delta"], json::parse(R"({"type":"text_delta","text":"He"})"));
    EXPECT_EQ(all[4].second["index"], 0);
    EXPECT_EQ(all[6].second["delta"], json::parse(R"({"stop_reason":"max_tokens","stop_sequence":null})"));
    EXPECT_EQ(all[6].second["usage"]["output_tokens"], 5);

    // An answer with no text still has its (empty) text block, as the whole message has.
    MessageBuilder empty("llama-tiny", 12);
    auto none = events_of(stream_of(empty, {}, done_event(FinishReason::Length)));
    ASSERT_EQ(none.size(), 6u);
    EXPECT_EQ(none[2].first, "content_block_start");
    EXPECT_EQ(none[3].second, json::parse(R"({"type":"content_block_stop","index":0})"));

    const auto err = events_of(MessageBuilder::stream_error(ApiError(503, "the server is shutting down")));
    ASSERT_EQ(err.size(), 1u);
    EXPECT_EQ(err[0].first, "error");
    EXPECT_EQ(err[0].second["error"]["type"], "overloaded_error");
}

// How a model with Hermes tool calls and <think> blocks writes an answer (engine/tool_calls.h).
const tools::Formats kHermesThink{tools::Format::Hermes, tools::Reasoning::ThinkTags, false};
std::string hermes_call(const std::string& name, const std::string& args) {
    return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
}
const std::string kAnswer = "<think>Paris, then.</think>Checking." +
                            hermes_call("get_weather", R"({"city": "Paris", "unit": "celsius"})") + "\n" +
                            hermes_call("get_time", R"({"zone": "CET"})");

bool tool_use_id(const json& id) {
    const std::string s = id.get<std::string>();
    return s.size() == 30 && s.rfind("toolu_", 0) == 0 &&
           std::all_of(s.begin() + 6, s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
}

TEST(ServerAnthropic, MessageWithToolUse) {
    MessageBuilder b("llama-tiny", 12);
    b.set_output(kHermesThink, true, 7);
    const json m = b.message(kAnswer, done_event(FinishReason::Stop));
    const json& c = m["content"];
    ASSERT_EQ(c.size(), 4u) << m.dump();
    EXPECT_EQ(c[0], json::parse(R"({"type":"thinking","thinking":"Paris, then.","signature":""})"));
    EXPECT_EQ(c[1], json::parse(R"({"type":"text","text":"Checking."})"));
    EXPECT_EQ(c[2]["type"], "tool_use");
    EXPECT_EQ(c[2]["name"], "get_weather");
    EXPECT_EQ(c[2]["input"], json::parse(R"({"city":"Paris","unit":"celsius"})"));
    EXPECT_EQ(c[3]["name"], "get_time");
    EXPECT_EQ(c[3]["input"], json::parse(R"({"zone":"CET"})"));
    EXPECT_TRUE(tool_use_id(c[2]["id"]) && tool_use_id(c[3]["id"])) << m.dump();
    EXPECT_NE(c[2]["id"], c[3]["id"]);
    EXPECT_EQ(m["stop_reason"], "tool_use");
    // The same seed gives the same ids.
    MessageBuilder again("llama-tiny", 12);
    again.set_output(kHermesThink, true, 7);
    EXPECT_EQ(again.message(kAnswer, done_event(FinishReason::Stop))["content"], c);
    // Cut short, the answer says why; a stop sequence too.
    EXPECT_EQ(b.message(kAnswer, done_event(FinishReason::Length))["stop_reason"], "max_tokens");
    EXPECT_EQ(b.message(kAnswer, done_event(FinishReason::Stop, "END"))["stop_reason"], "stop_sequence");
    // Only calls: no text block. parallel_tool_calls false: the first call only.
    MessageBuilder one("llama-tiny", 12);
    one.set_output(kHermesThink, false, 7);
    const json only = one.message(hermes_call("get_time", "{}") + hermes_call("get_time", "{}"),
                                  done_event(FinishReason::Stop));
    ASSERT_EQ(only["content"].size(), 1u) << only.dump();
    EXPECT_EQ(only["content"][0]["input"], json::object());
    // No calls: one text block, end_turn; the generic format's {"response": ...} is its text.
    EXPECT_EQ(b.message("Plain.", done_event(FinishReason::Stop))["content"],
              json::parse(R"([{"type":"text","text":"Plain."}])"));
    EXPECT_EQ(b.message("Plain.", done_event(FinishReason::Stop))["stop_reason"], "end_turn");
    MessageBuilder generic("llama-tiny", 12);
    generic.set_output({tools::Format::Generic, tools::Reasoning::None, false}, true, 7);
    EXPECT_EQ(generic.message(R"({"response": "Hi."})", done_event(FinishReason::Stop))["content"],
              json::parse(R"([{"type":"text","text":"Hi."}])"));
    const json g = generic.message(R"({"tool_calls": [{"name": "get_time", "arguments": {"zone": "UTC"}}]})",
                                   done_event(FinishReason::Stop));
    EXPECT_EQ(g["content"].size(), 1u);
    EXPECT_EQ(g["content"][0]["input"], json::parse(R"({"zone":"UTC"})"));
    // A Mistral template needs its 9-alphanumeric ids back: those formats keep them.
    MessageBuilder mistral("llama-tiny", 12);
    mistral.set_output({tools::Format::MistralArgs, tools::Reasoning::None, false}, true, 7);
    const json mc = mistral.message(R"([TOOL_CALLS]get_time[ARGS]{"zone": "UTC"})", done_event(FinishReason::Stop));
    ASSERT_EQ(mc["content"].size(), 1u) << mc.dump();
    EXPECT_EQ(mc["content"][0]["id"].get<std::string>().size(), 9u);
}

// Content blocks put together from a stream's events, as Anthropic's clients do; checks that
// blocks are numbered from 0, each started once and stopped before the next starts.
json content_of_stream(const std::vector<std::pair<std::string, json>>& events) {
    json content = json::array();
    std::vector<std::string> inputs;
    int open = -1;
    for (const auto& [name, data] : events) {
        if (name == "content_block_start") {
            EXPECT_EQ(open, -1) << "a block started before the last one stopped";
            EXPECT_EQ(data["index"], content.size());
            open = data["index"].get<int>();
            content.push_back(data["content_block"]);
            inputs.emplace_back();
        } else if (name == "content_block_delta") {
            EXPECT_EQ(data["index"], open);
            const json& d = data["delta"];
            json& block = content[size_t(open)];
            const auto append = [&](const char* field, const json& piece) {
                block[field] = block[field].get<std::string>() + piece.get<std::string>();
            };
            if (d["type"] == "text_delta") append("text", d["text"]);
            else if (d["type"] == "thinking_delta") append("thinking", d["thinking"]);
            else if (d["type"] == "input_json_delta") inputs[size_t(open)] += d["partial_json"].get<std::string>();
            else ADD_FAILURE() << d.dump();
        } else if (name == "content_block_stop") {
            EXPECT_EQ(data["index"], open);
            json& block = content[size_t(open)];
            if (block["type"] == "tool_use") block["input"] = json::parse(inputs[size_t(open)]);
            open = -1;
        }
    }
    EXPECT_EQ(open, -1) << "a block was never stopped";
    return content;
}

TEST(ServerAnthropic, StreamWithToolUse) {
    MessageBuilder whole("llama-tiny", 12), b("llama-tiny", 12);
    whole.set_output(kHermesThink, true, 11);
    b.set_output(kHermesThink, true, 11);
    std::string text = b.stream_start();
    for (size_t at = 0; at < kAnswer.size(); at += 3) text += b.stream_text(kAnswer.substr(at, 3));
    text += b.stream_end(done_event(FinishReason::Stop));
    const auto all = events_of(text);
    // The same blocks as the whole message, ids included (the same seed).
    EXPECT_EQ(content_of_stream(all), whole.message(kAnswer, done_event(FinishReason::Stop))["content"]);
    std::vector<std::string> kinds;   // each block's start, by its type
    for (const auto& [name, data] : all)
        if (name == "content_block_start") kinds.push_back(data["content_block"]["type"]);
    EXPECT_EQ(kinds, (std::vector<std::string>{"thinking", "text", "tool_use", "tool_use"}));
    EXPECT_EQ(all[0].first, "message_start");
    EXPECT_EQ(all[1].first, "ping");
    ASSERT_GE(all.size(), 3u);
    EXPECT_EQ(all[all.size() - 2].second["delta"]["stop_reason"], "tool_use");
    EXPECT_EQ(all.back().first, "message_stop");
    // A tool_use block starts with an empty input, then one input_json_delta with all of it.
    for (size_t i = 0; i + 2 < all.size(); ++i)
        if (all[i].first == "content_block_start" && all[i].second["content_block"]["type"] == "tool_use") {
            EXPECT_EQ(all[i].second["content_block"]["input"], json::object());
            EXPECT_EQ(all[i + 1].second["delta"]["type"], "input_json_delta");
            EXPECT_EQ(all[i + 2].first, "content_block_stop");
        }

    // parallel_tool_calls false streams the first call only; cut short, max_tokens.
    MessageBuilder one("llama-tiny", 12);
    one.set_output(kHermesThink, false, 11);
    const auto ev = events_of(stream_of(one, {kAnswer}, done_event(FinishReason::Length)));
    const json c = content_of_stream(ev);
    ASSERT_EQ(c.size(), 3u) << c.dump();
    EXPECT_EQ(c[2]["name"], "get_weather");
    EXPECT_EQ(ev[ev.size() - 2].second["delta"]["stop_reason"], "max_tokens");
}

TEST(ServerAnthropic, ErrorShapeAndStatus) {
    const std::vector<std::tuple<int, int, const char*>> cases = {
        {400, 400, "invalid_request_error"}, {401, 401, "authentication_error"}, {404, 404, "not_found_error"},
        {405, 405, "invalid_request_error"}, {413, 413, "request_too_large"},   {503, 529, "overloaded_error"},
        {500, 500, "api_error"}};
    for (const auto& [status, sent, type] : cases) {
        const ApiError e(status, "why", "field");
        EXPECT_EQ(anthropic_status(e), sent) << status;
        const json j = anthropic_error_json(e);
        EXPECT_EQ(j, (json{{"type", "error"}, {"error", {{"type", type}, {"message", "why"}}}})) << status;
    }
}

TEST(ServerAnthropic, StopMatcherReportsTheStringFound) {
    StopMatcher m({"xyz", "END", "EN"});
    EXPECT_EQ(m.push("The E"), "The ");
    EXPECT_TRUE(m.matched().empty());
    EXPECT_EQ(m.push("ND of it"), "");
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(m.matched(), "EN");   // at one position, the shortest: it was complete first
    StopMatcher first({"b", "a"});
    first.push("xab");
    EXPECT_EQ(first.matched(), "a");   // the earliest in the text, not in the list
}

// The fuzz pass's words (request_fuzz_util.h): string values and object keys.
const char* const kFuzzStrings[] = {"", "user", "assistant", "system", "text", "image", "tool_use", "disabled",
                                    "\n", "<|im_start|>", "h\xc3\xa9llo", "\xe2\x82\xac", "tool_result", "any",
                                    "tool", "auto", "object", "f", "toolu_1"};
const char* const kFuzzKeys[] = {"role", "content", "type", "text", "user_id", "cache_control", "x", "id", "name",
                                 "input", "tool_use_id", "input_schema", "is_error", "disable_parallel_tool_use"};
json random_value(std::mt19937_64& rng, int depth) {
    return ptxlm::test::random_value(rng, depth, {kFuzzStrings, kFuzzKeys});
}

json random_body(std::mt19937_64& rng) {
    static const char* fields[] = {"model",    "max_tokens", "messages", "system",      "stream",   "temperature",
                                   "top_p",    "top_k",      "metadata", "stop_sequences", "tools", "tool_choice",
                                   "thinking", "cache_control", "unknown"};
    constexpr size_t n_fields = std::size(fields);
    // Mostly a valid skeleton, so the checks behind the first ones are reached too.
    json body = rng() % 4 ? body_with() : json::object();
    if (rng() % 2) {
        json msgs = json::array();
        for (int i = int(rng() % 4); i >= 0; --i) {
            json m = {{"role", random_value(rng, 2)}, {"content", random_value(rng, 1)}};
            if (rng() % 2) m["role"] = i % 2 ? "assistant" : "user";
            if (rng() % 2) m["content"] = json::array({{{"type", "text"}, {"text", "hello"}}});
            if (rng() % 3 == 0)
                m["content"] = json::array({rng() % 2 ? json{{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "f"},
                                                             {"input", random_value(rng, 1)}}
                                                       : json{{"type", "tool_result"}, {"tool_use_id", "toolu_1"},
                                                              {"content", random_value(rng, 1)}}});
            msgs.push_back(m);
        }
        body["messages"] = msgs;
    }
    if (rng() % 3 == 0) {
        body["tools"] = json::array({{{"name", "f"}, {"input_schema", {{"type", "object"}}}}});
        if (rng() % 2) body["tools"][0][rng() % 2 ? "input_schema" : "description"] = random_value(rng, 1);
        if (rng() % 2) body["tool_choice"] = {{"type", random_value(rng, 2)}, {"name", random_value(rng, 2)}};
    }
    for (int i = int(rng() % 4); i > 0; --i) body[fields[rng() % n_fields]] = random_value(rng, 0);
    return body;
}

TEST(ServerAnthropic, FuzzNeverThrowsAnythingElse) {
    std::mt19937_64 rng(20261127);
    int parsed = 0, rejected = 0;
    auto run = [&](const std::string& body) {
        try {
            const CompletionRequest r = parse_messages_request(body, RequestDefaults{});
            ++parsed;
            // What parses is something the engine accepts.
            validate(r.gen.sampling);
            EXPECT_GE(r.gen.max_tokens, 0);
            EXPECT_LE(r.gen.stop.size(), kMaxStopSequences);
            EXPECT_FALSE(r.messages.empty());
            EXPECT_NE(r.messages.back().role, "assistant");
            EXPECT_TRUE(r.gen.sampling.temperature >= 0 && r.gen.sampling.temperature <= 1);
        } catch (const ApiError& e) {
            ++rejected;
            ASSERT_EQ(e.status(), 400) << body;
            ASSERT_FALSE(std::string(e.what()).empty());
        } catch (const std::exception& e) {
            FAIL() << "escaped: " << e.what() << " for " << body;
        }
    };
    const std::string valid =
        body_with({{"system", "s"}, {"stop_sequences", {"x"}}, {"temperature", 0.5}, {"stream", true}}).dump();
    ptxlm::test::fuzz_bodies(rng, valid, random_body, run);
    EXPECT_GT(parsed, 100);
    EXPECT_GT(rejected, 1000);
}

}  // namespace
