// The server's request parser (server/request.h): every field's type and
// range as OpenAI documents it, the error's status and `param`, and a
// libFuzzer-free fuzz pass: random JSON built from the known fields with
// values of every type, mutated valid bodies and random bytes must either
// parse or throw ApiError (status 400), never anything else.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "server/request.h"
#include "tests/request_fuzz_util.h"

using namespace ptxlm;
using namespace ptxlm::server;
using nlohmann::json;

namespace {

CompletionRequest chat(const json& body) { return parse_request(Endpoint::Chat, body.dump(), RequestDefaults{}); }
CompletionRequest completion(const json& body) {
    return parse_request(Endpoint::Completion, body.dump(), RequestDefaults{});
}

// The error a body gets: its status and param ("" when null); {0, ""} when it parses.
std::pair<int, std::string> error_of(Endpoint ep, const std::string& body) {
    try {
        parse_request(ep, body, RequestDefaults{});
        return {0, ""};
    } catch (const ApiError& e) {
        return {e.status(), e.param()};
    }
}
std::pair<int, std::string> chat_error(const json& body) { return error_of(Endpoint::Chat, body.dump()); }
std::pair<int, std::string> completion_error(const json& body) { return error_of(Endpoint::Completion, body.dump()); }

const json kUser = json::array({{{"role", "user"}, {"content", "hi"}}});

TEST(ServerRequest, ChatFieldsAreRead) {
    const CompletionRequest r = chat({{"model", "whatever"},
                                      {"messages", json::array({{{"role", "developer"}, {"content", "be brief"}},
                                                                {{"role", "user"},
                                                                 {"content", json::array({{{"type", "text"}, {"text", "a"}},
                                                                                          {{"type", "text"}, {"text", "b"}}})}},
                                                                {{"role", "assistant"}, {"content", nullptr}}})},
                                      {"max_completion_tokens", 7},
                                      {"temperature", 0},
                                      {"top_p", 0.5},
                                      {"top_k", 5},
                                      {"min_p", 0.1},
                                      {"presence_penalty", -1.5},
                                      {"frequency_penalty", 2},
                                      {"repeat_penalty", 1.1},
                                      {"seed", -1},
                                      {"stop", "\n\n"},
                                      {"stream", true},
                                      {"stream_options", {{"include_usage", true}}},
                                      {"logprobs", true},
                                      {"top_logprobs", 4},
                                      {"n", 1},
                                      {"user", "ignored"},
                                      {"store", false},
                                      {"logit_bias", {{"15", -100}, {"7", 2.5}}},
                                      {"tool_choice", "none"},
                                      {"some_future_field", nullptr}});
    ASSERT_EQ(r.messages.size(), 3u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[1].content, "a\nb");
    EXPECT_EQ(r.messages[2].content, "");
    EXPECT_EQ(r.model, "whatever");
    EXPECT_EQ(r.gen.max_tokens, 7);
    EXPECT_EQ(r.gen.sampling.temperature, 0.0f);
    EXPECT_EQ(r.gen.sampling.top_p, 0.5f);
    EXPECT_EQ(r.gen.sampling.top_k, 5);
    EXPECT_FLOAT_EQ(r.gen.sampling.min_p, 0.1f);
    EXPECT_EQ(r.gen.sampling.presence_penalty, -1.5f);
    EXPECT_EQ(r.gen.sampling.frequency_penalty, 2.0f);
    EXPECT_FLOAT_EQ(r.gen.sampling.repeat_penalty, 1.1f);
    EXPECT_TRUE(r.seed_given);
    EXPECT_EQ(r.gen.sampling.seed, UINT64_MAX);
    EXPECT_EQ(r.gen.stop, std::vector<std::string>{"\n\n"});
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.logprobs, 4);
    EXPECT_EQ(r.gen.sampling.logit_bias.size(), 2u);
}

TEST(ServerRequest, DefaultsAreOpenAIs) {
    const CompletionRequest r = chat({{"messages", kUser}, {"max_tokens", nullptr}, {"temperature", nullptr}});
    EXPECT_EQ(r.gen.sampling.temperature, 1.0f);
    EXPECT_EQ(r.gen.sampling.top_p, 1.0f);
    EXPECT_EQ(r.gen.sampling.top_k, 0);
    EXPECT_EQ(r.gen.sampling.min_p, 0.0f);
    EXPECT_EQ(r.gen.sampling.repeat_penalty, 1.0f);
    EXPECT_EQ(r.gen.max_tokens, -1);
    EXPECT_FALSE(r.seed_given);
    EXPECT_FALSE(r.stream);
    EXPECT_EQ(r.logprobs, -1);
    // The server's own defaults replace them.
    RequestDefaults d;
    d.sampling.temperature = 0.2f;
    d.max_tokens = 64;
    const CompletionRequest s = parse_request(Endpoint::Chat, json{{"messages", kUser}}.dump(), d);
    EXPECT_EQ(s.gen.sampling.temperature, 0.2f);
    EXPECT_EQ(s.gen.max_tokens, 64);
}

TEST(ServerRequest, CompletionPrompts) {
    EXPECT_EQ(completion({{"prompt", "Once"}}).prompt, "Once");
    EXPECT_EQ(completion({{"prompt", {"Once"}}}).prompt, "Once");
    EXPECT_EQ(*completion({{"prompt", {1, 2, 3}}}).prompt_ids, (std::vector<TokenId>{1, 2, 3}));
    EXPECT_EQ(*completion({{"prompt", json::array({json::array({4, 5})})}}).prompt_ids, (std::vector<TokenId>{4, 5}));
    EXPECT_EQ(completion({{"prompt", "x"}, {"logprobs", 3}}).logprobs, 3);
    EXPECT_EQ(completion({{"prompt", "x"}, {"logprobs", 0}}).logprobs, 0);
    EXPECT_EQ(completion_error({{"prompt", {"a", "b"}}}), std::make_pair(400, std::string("prompt")));
    EXPECT_EQ(completion_error({{"prompt", json::array()}}).second, "prompt");
    EXPECT_EQ(completion_error({{"prompt", {1, -2}}}).second, "prompt");
    EXPECT_EQ(completion_error({{"prompt", {1, "a"}}}).second, "prompt");
    EXPECT_EQ(completion_error({{"prompt", 3}}).second, "prompt");
    EXPECT_EQ(completion_error(json::object()).second, "prompt");
    EXPECT_EQ(completion_error({{"prompt", "x"}, {"logprobs", 6}}).second, "logprobs");
    EXPECT_EQ(completion_error({{"prompt", "x"}, {"logprobs", true}}).second, "logprobs");
    EXPECT_EQ(completion_error({{"prompt", "x"}, {"echo", true}}).second, "echo");
    EXPECT_EQ(completion_error({{"prompt", "x"}, {"best_of", 2}}).second, "best_of");
    EXPECT_EQ(completion_error({{"prompt", "x"}, {"suffix", "end"}}).second, "suffix");
}

TEST(ServerRequest, BadFieldsNameTheField) {
    const std::vector<std::pair<json, std::string>> cases = {
        {{{"messages", "hi"}}, "messages"},
        {{{"messages", json::array()}}, "messages"},
        {json::object(), "messages"},
        {{{"messages", {1}}}, "messages[0]"},
        {{{"messages", json::array({{{"content", "x"}}})}}, "messages[0].role"},
        {{{"messages", json::array({{{"role", "tool"}, {"content", "x"}}})}}, "messages[0].tool_call_id"},
        {{{"messages", json::array({{{"role", "tool"}, {"content", "x"}, {"tool_call_id", "c9"}}})}},
         "messages[0].tool_call_id"},   // answers no earlier call
        {{{"messages", json::array({{{"role", "function"}, {"content", "x"}}})}}, "messages[0].role"},
        {{{"messages", json::array({{{"role", "user"}, {"content", "x"}, {"tool_calls", json::array()}}})}},
         "messages[0].tool_calls"},
        {{{"messages", json::array({{{"role", "assistant"},
                                     {"tool_calls", {{{"id", "c1"}, {"type", "function"},
                                                      {"function", {{"name", "f"}, {"arguments", "[1]"}}}}}}}})}},
         "messages[0].tool_calls[0].function.arguments"},
        {{{"messages", json::array({{{"role", "assistant"},
                                     {"tool_calls", {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}}})}},
         "messages[0].tool_calls[0].id"},
        {{{"messages", json::array({{{"role", 3}, {"content", "x"}}})}}, "messages[0].role"},
        {{{"messages", json::array({{{"role", "user"}}})}}, "messages[0].content"},
        {{{"messages", json::array({{{"role", "user"}, {"content", 5}}})}}, "messages[0].content"},
        {{{"messages",
           json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"}, {"image_url", "x"}}})}}})}},
         "messages[0].content[0].type"},
        {{{"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}}})}}})}},
         "messages[0].content[0].text"},
        {{{"messages", kUser}, {"temperature", 2.5}}, "temperature"},
        {{{"messages", kUser}, {"temperature", "hot"}}, "temperature"},
        {{{"messages", kUser}, {"temperature", -0.1}}, "temperature"},
        {{{"messages", kUser}, {"top_p", 0}}, "top_p"},
        {{{"messages", kUser}, {"top_p", 1.01}}, "top_p"},
        {{{"messages", kUser}, {"top_p", 1e-300}}, "top_p"},   // 0 as a float
        {{{"messages", kUser}, {"top_k", 1.5}}, "top_k"},
        {{{"messages", kUser}, {"top_k", -2}}, "top_k"},
        {{{"messages", kUser}, {"min_p", 2}}, "min_p"},
        {{{"messages", kUser}, {"presence_penalty", 2.5}}, "presence_penalty"},
        {{{"messages", kUser}, {"frequency_penalty", -3}}, "frequency_penalty"},
        {{{"messages", kUser}, {"repeat_penalty", 0}}, "repeat_penalty"},
        {{{"messages", kUser}, {"max_tokens", 0}}, "max_tokens"},
        {{{"messages", kUser}, {"max_tokens", "10"}}, "max_tokens"},
        {{{"messages", kUser}, {"max_tokens", 1e30}}, "max_tokens"},
        {{{"messages", kUser}, {"max_completion_tokens", -5}}, "max_completion_tokens"},
        {{{"messages", kUser}, {"seed", 1.5}}, "seed"},
        {{{"messages", kUser}, {"stop", 5}}, "stop"},
        {{{"messages", kUser}, {"stop", {"a", "b", "c", "d", "e"}}}, "stop"},
        {{{"messages", kUser}, {"stop", {""}}}, "stop"},
        {{{"messages", kUser}, {"stop", {"a", 1}}}, "stop"},
        {{{"messages", kUser}, {"n", 0}}, "n"},
        {{{"messages", kUser}, {"n", 129}}, "n"},
        {{{"messages", kUser}, {"n", 1.5}}, "n"},
        {{{"messages", kUser}, {"stream", "yes"}}, "stream"},
        {{{"messages", kUser}, {"stream_options", true}}, "stream_options"},
        {{{"messages", kUser}, {"stream_options", {{"include_usage", 1}}}}, "include_usage"},
        {{{"messages", kUser}, {"logprobs", 1}}, "logprobs"},
        {{{"messages", kUser}, {"top_logprobs", 2}}, "top_logprobs"},
        {{{"messages", kUser}, {"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
        {{{"messages", kUser}, {"model", 7}}, "model"},
        {{{"messages", kUser}, {"tools", {{{"type", "function"}}}}}, "tools[0].function"},
        {{{"messages", kUser}, {"tools", "f"}}, "tools"},
        {{{"messages", kUser}, {"tools", {{{"type", "retrieval"}}}}}, "tools[0].type"},
        {{{"messages", kUser}, {"tools", {{{"type", "function"}, {"function", {{"name", "a b"}}}}}}}, "tools[0].function.name"},
        {{{"messages", kUser}, {"tools", {{{"type", "function"}, {"function", {{"name", "required"}}}}}}}, "tools[0].function.name"},
        {{{"messages", kUser},
          {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}, {{"type", "function"}, {"function", {{"name", "f"}}}}}}},
         "tools[1].function.name"},
        {{{"messages", kUser}, {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "x"}}}}}}},
         "tools[0].function.parameters"},
        {{{"messages", kUser}, {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"returns", "x"}}}}}}},
         "tools[0].function.returns"},
        {{{"messages", kUser}, {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
          {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}},
         "tool_choice"},
        {{{"messages", kUser}, {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}, {"tool_choice", "any"}},
         "tool_choice"},
        {{{"messages", kUser}, {"response_format", {{"type", "xml"}}}}, "response_format"},
        {{{"messages", kUser}, {"response_format", {{"type", "json_schema"}}}}, "response_format"},
        {{{"messages", kUser},
          {"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"not", {{"type", "string"}}}}}}}}}},
         "response_format"},
        {{{"messages", kUser}, {"grammar", "root ::= \"a"}}, "grammar"},
        {{{"messages", kUser}, {"grammar", 7}}, "grammar"},
        {{{"messages", kUser}, {"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}}, "grammar"},
        {{{"messages", kUser}, {"grammar", "root ::= \"a\""},
          {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}}, "grammar"},
        {{{"messages", kUser}, {"chat_template_kwargs", "x"}}, "chat_template_kwargs"},
        {{{"messages", kUser}, {"chat_template_kwargs", {{"messages", 1}}}}, "chat_template_kwargs"},
        {{{"messages", kUser}, {"reasoning_format", "raw"}}, "reasoning_format"},
        {{{"messages", kUser}, {"logit_bias", {1, 2}}}, "logit_bias"},
        {{{"messages", kUser}, {"logit_bias", {{"abc", 1}}}}, "logit_bias"},
        {{{"messages", kUser}, {"logit_bias", {{"-3", 1}}}}, "logit_bias"},
        {{{"messages", kUser}, {"logit_bias", {{"05", 1}}}}, "logit_bias"},
        {{{"messages", kUser}, {"logit_bias", {{"99999999999", 1}}}}, "logit_bias"},
        {{{"messages", kUser}, {"logit_bias", {{"5", 101}}}}, "logit_bias"},
        {{{"messages", kUser}, {"logit_bias", {{"5", "up"}}}}, "logit_bias"},
        {{{"messages", kUser}, {"tool_choice", "required"}}, "tool_choice"},
        {{{"messages", kUser}, {"modalities", {"text", "audio"}}}, "modalities"},
        {{{"messages", kUser}, {"functions", json::array()}}, "functions"},
        {{{"messages", kUser}, {"reasoning_effort", "low"}}, "reasoning_effort"},
        {{{"messages", kUser}, {"max_token", 5}}, "max_token"},   // misspelt: refused, not ignored
        {{{"messages", kUser}, {"prompt", "x"}}, "prompt"},       // the other endpoint's field
    };
    for (const auto& [body, param] : cases) {
        const auto [status, got] = chat_error(body);
        EXPECT_EQ(status, 400) << body.dump();
        EXPECT_EQ(got, param) << body.dump();
    }
}

TEST(ServerRequest, LogitBiasAndFieldPolicy) {
    const CompletionRequest r = completion({{"prompt", "x"}, {"logit_bias", {{"0", 100}, {"31999", -0.5}}}});
    ASSERT_EQ(r.gen.sampling.logit_bias.size(), 2u);
    std::vector<std::pair<int32_t, float>> got = r.gen.sampling.logit_bias;
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got[0], std::make_pair(int32_t(0), 100.f));
    EXPECT_EQ(got[1], std::make_pair(int32_t(31999), -0.5f));
    // Every no-op is accepted, on both endpoints; an unknown field is refused
    // on both, and chat's extra fields on completions.
    for (Endpoint ep : {Endpoint::Chat, Endpoint::Completion}) {
        json base = ep == Endpoint::Chat ? json{{"messages", kUser}} : json{{"prompt", "x"}};
        for (std::string_view f : request_fields(ep).no_ops) {
            json b = base;
            b[std::string(f)] = "anything";
            EXPECT_EQ(error_of(ep, b.dump()).first, 0) << f;
        }
        for (std::string_view f : request_fields(ep).refused) {
            json b = base;
            b[std::string(f)] = "anything";
            EXPECT_EQ(error_of(ep, b.dump()), std::make_pair(400, std::string(f))) << f;
        }
        base["temprature"] = 0.5;
        EXPECT_EQ(error_of(ep, base.dump()), std::make_pair(400, std::string("temprature")));
    }
    EXPECT_EQ(completion_error({{"prompt", "x"}, {"messages", kUser}}), std::make_pair(400, std::string("messages")));
    EXPECT_EQ(completion_error({{"prompt", "x"}, {"tool_choice", "none"}}), std::make_pair(400, std::string("tool_choice")));
}

// README.md's "Field policy" names exactly the no-op and refused fields the
// code has (the documentation and the server cannot drift apart).
TEST(ServerRequest, ReadmeListsThePolicy) {
    std::ifstream in(std::string(PTXLM_SOURCE_DIR) + "/README.md");
    ASSERT_TRUE(in) << "README.md";
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("- **Field policy**");
    ASSERT_NE(at, std::string::npos);
    const size_t end = text.find("\n- **", at + 1);
    const std::string para = text.substr(at, end - at);
    // The backticked names after "No-op fields" up to "Refused at any value", and from there to "Honoured".
    const auto names = [&](const std::string& from, const std::string& to) {
        std::set<std::string> out;
        size_t p = para.find(from), q = para.find(to, p);
        EXPECT_NE(p, std::string::npos) << from;
        EXPECT_NE(q, std::string::npos) << to;
        for (size_t a = para.find('`', p); a < q; a = para.find('`', a + 1)) {
            const size_t b = para.find('`', a + 1);
            out.insert(para.substr(a + 1, b - a - 1));
            a = b;
        }
        return out;
    };
    std::set<std::string> no_ops, refused;
    for (Endpoint ep : {Endpoint::Chat, Endpoint::Completion}) {
        for (std::string_view f : request_fields(ep).no_ops) no_ops.insert(std::string(f));
        for (std::string_view f : request_fields(ep).refused) refused.insert(std::string(f));
    }
    EXPECT_EQ(names("No-op fields", "Refused at any value"), no_ops);
    EXPECT_EQ(names("Refused at any value", "Honoured at one value"), refused);
}

TEST(ServerRequest, ToolsGrammarsAndTemplateVariables) {
    const std::string body = R"({"messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "f", "arguments": "{\"z\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "done"}],
      "tools": [{"type": "function", "function": {"name": "f",
          "parameters": {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "string"}}}}}],
      "chat_template_kwargs": {"enable_thinking": false, "b": 1, "a": 2}, "reasoning_format": "none"})";
    const CompletionRequest r = parse_request(Endpoint::Chat, body, RequestDefaults{});
    ASSERT_EQ(r.messages.size(), 3u);
    ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
    EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"z\": 1}");
    EXPECT_EQ(r.messages[2].tool_call_id, "c1");
    EXPECT_EQ(r.messages[2].name, "f");
    EXPECT_EQ(r.tool_choice, "auto");   // the default with tools
    // The client's key order is kept (templates print it; a schema's order is the answer's).
    EXPECT_EQ(r.tools[0]["function"]["parameters"]["properties"].begin().key(), "z");
    EXPECT_EQ(r.chat_template_kwargs.begin().key(), "enable_thinking");
    EXPECT_FALSE(r.split_reasoning);
    EXPECT_TRUE(r.grammar.empty());

    const CompletionRequest none = parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}]})",
                                                 RequestDefaults{});
    EXPECT_EQ(none.tool_choice, "none");
    EXPECT_TRUE(none.split_reasoning);
    const CompletionRequest js = parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,
            "schema": {"type": "object", "properties": {"b": {"type": "boolean"}}, "required": ["b"]}}}})",
                                               RequestDefaults{});
    EXPECT_EQ(js.grammar_field, "response_format");
    EXPECT_NE(js.grammar.find("root ::="), std::string::npos) << js.grammar;
    const CompletionRequest g = parse_request(Endpoint::Completion, R"({"prompt": "x", "grammar": "root ::= \"yes\""})",
                                              RequestDefaults{});
    EXPECT_EQ(g.grammar, "root ::= \"yes\"");
    EXPECT_EQ(g.grammar_field, "grammar");
}

TEST(ServerRequest, MalformedBodies) {
    for (const char* body : {"", "{", "{\"messages\": [}", "null", "[]", "42", "\"text\"", "{\"a\":1}{", "\xff\xfe",
                             "{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}"}) {
        EXPECT_EQ(error_of(Endpoint::Chat, body).first, 400) << body;
        EXPECT_EQ(error_of(Endpoint::Completion, body).first, 400) << body;
    }
    try {
        parse_request(Endpoint::Chat, "{oops", RequestDefaults{});
        FAIL();
    } catch (const ApiError& e) {
        EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
        const json j = error_json(e);
        EXPECT_EQ(j["error"]["type"], "invalid_request_error");
        EXPECT_TRUE(j["error"]["param"].is_null());
        EXPECT_TRUE(j["error"].contains("code"));
    }
}

// The fuzz pass's words (request_fuzz_util.h): string values and object keys.
const char* const kFuzzStrings[] = {"", "user", "assistant", "system", "developer", "tool", "text", "image_url",
                                    "\n", "<|im_start|>", "h\xc3\xa9llo", "\xe2\x82\xac"};
const char* const kFuzzKeys[] = {"role", "content", "type", "text", "include_usage", "x"};
json random_value(std::mt19937_64& rng, int depth) {
    return ptxlm::test::random_value(rng, depth, {kFuzzStrings, kFuzzKeys});
}

json random_body(std::mt19937_64& rng) {
    static const char* fields[] = {"messages", "prompt", "max_tokens", "max_completion_tokens", "temperature",
                                   "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                                   "repeat_penalty", "seed", "stop", "n", "logprobs", "top_logprobs", "model",
                                   "stream", "stream_options", "echo", "best_of", "suffix", "tools",
                                   "response_format", "unknown"};
    json body = json::object();
    // Mostly well-formed messages, so the checks behind them are reached too.
    if (rng() % 4) {
        json msgs = json::array();
        for (int i = int(rng() % 4); i >= 0; --i) {
            json m = {{"role", random_value(rng, 2)}, {"content", random_value(rng, 1)}};
            if (rng() % 2) m["role"] = "user";
            if (rng() % 2) m["content"] = "hello";
            msgs.push_back(m);
        }
        // One endpoint's input (each refuses the other's field), now and then both.
        const unsigned which = rng() % 5;
        if (which < 2 || which == 4) body["messages"] = msgs;
        if (which >= 2) body["prompt"] = rng() % 2 ? json("hi") : random_value(rng, 1);
    }
    for (int i = int(rng() % 6); i > 0; --i) body[fields[rng() % 25]] = random_value(rng, 0);
    return body;
}

TEST(ServerRequest, FuzzNeverThrowsAnythingElse) {
    std::mt19937_64 rng(12345);
    int parsed = 0, rejected = 0;
    auto run = [&](const std::string& body) {
        for (Endpoint ep : {Endpoint::Chat, Endpoint::Completion}) {
            try {
                const CompletionRequest r = parse_request(ep, body, RequestDefaults{});
                ++parsed;
                // What parses is something the engine accepts.
                validate(r.gen.sampling);
                EXPECT_TRUE(r.gen.stop.size() <= 4);
                EXPECT_TRUE(r.logprobs <= 20);
                if (ep == Endpoint::Chat) {
                    EXPECT_FALSE(r.messages.empty());
                }
            } catch (const ApiError& e) {
                ++rejected;
                ASSERT_EQ(e.status(), 400) << body;
                ASSERT_FALSE(std::string(e.what()).empty());
            } catch (const std::exception& e) {
                FAIL() << "escaped: " << e.what() << " for " << body;
            }
        }
    };
    const std::string valid = json{{"messages", kUser}, {"max_tokens", 5}, {"stop", {"x"}}, {"logprobs", true}}.dump();
    ptxlm::test::fuzz_bodies(rng, valid, random_body, run);
    EXPECT_GT(parsed, 100);
    EXPECT_GT(rejected, 1000);
}

}  // namespace
