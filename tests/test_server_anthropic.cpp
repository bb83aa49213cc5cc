// Anthropic's Messages API (server/anthropic.h): the /v1/messages parser
// field by field (types, ranges, required fields, the refused ones, unknown
// fields by name), system and content blocks, the message and stream shapes
// with each stop_reason, errors in Anthropic's shape, the stop string the
// engine reports, and a fuzz pass of random and malformed bodies that may
// only ever raise ApiError (400).
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "server/anthropic.h"

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

    const json tool = {{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}};
    EXPECT_EQ(error_of(body_with({{"tools", {tool}}})), Err(400, "tools"));
    EXPECT_NE(message_of(body_with({{"tools", {tool}}})).find("tool use"), std::string::npos);
    EXPECT_EQ(error_of(body_with({{"tool_choice", {{"type", "auto"}}}})), Err(400, "tool_choice"));
    EXPECT_EQ(error_of(body_with({{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}})),
              Err(400, "thinking"));
    EXPECT_EQ(error_of(body_with({{"thinking", "on"}})), Err(400, "thinking"));
    // What equals the defaults changes nothing and is accepted.
    EXPECT_EQ(error_of(body_with({{"tools", json::array()}})), Err(0, ""));
    EXPECT_EQ(error_of(body_with({{"thinking", {{"type", "disabled"}}}})), Err(0, ""));

    // Non-text content blocks name the block's type.
    for (const char* type : {"image", "document", "tool_use", "tool_result", "thinking"}) {
        const json msgs = json::array({{{"role", "user"}, {"content", json::array({{{"type", type}}})}}});
        EXPECT_EQ(error_of(body_with({{"messages", msgs}})), Err(400, "messages[0].content[0].type")) << type;
        EXPECT_NE(message_of(body_with({{"messages", msgs}})).find(type), std::string::npos) << type;
    }
    // A final assistant turn would be continued by Anthropic (a prefill): refused.
    const json prefill =
        json::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "The"}}});
    EXPECT_EQ(error_of(body_with({{"messages", prefill}})), Err(400, "messages[1].role"));
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

TEST(ServerAnthropic, StreamEvents) {
    const MessageBuilder b("llama-tiny", 12);
    auto all = events_of(b.stream_start() + b.stream_text("He") + b.stream_text("llo") +
                         b.stream_end(done_event(FinishReason::Length)));
    std::vector<std::string> names;
    for (const auto& [name, data] : all) {
        names.push_back(name);
        EXPECT_EQ(data["type"], name);   // each event's data names its event
    }
    EXPECT_EQ(names, (std::vector<std::string>{"message_start", "content_block_start", "ping", "content_block_delta",
                                               "content_block_delta", "content_block_stop", "message_delta",
                                               "message_stop"}));
    const json& start = all[0].second["message"];
    EXPECT_EQ(start["id"], b.id());
    EXPECT_EQ(start["content"], json::array());
    EXPECT_TRUE(start["stop_reason"].is_null());
    EXPECT_EQ(start["usage"]["input_tokens"], 12);
    EXPECT_EQ(all[1].second["content_block"], json::parse(R"({"type":"text","text":""})"));
    EXPECT_EQ(all[3].second["delta"], json::parse(R"({"type":"text_delta","text":"He"})"));
    EXPECT_EQ(all[4].second["index"], 0);
    EXPECT_EQ(all[6].second["delta"], json::parse(R"({"stop_reason":"max_tokens","stop_sequence":null})"));
    EXPECT_EQ(all[6].second["usage"]["output_tokens"], 5);

    const auto err = events_of(MessageBuilder::stream_error(ApiError(503, "the server is shutting down")));
    ASSERT_EQ(err.size(), 1u);
    EXPECT_EQ(err[0].first, "error");
    EXPECT_EQ(err[0].second["error"]["type"], "overloaded_error");
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

// Random values of every JSON type, nested a little.
json random_value(std::mt19937_64& rng, int depth) {
    auto pick = [&](int n) { return int(rng() % uint64_t(n)); };
    switch (pick(depth > 2 ? 7 : 9)) {
        case 0: return nullptr;
        case 1: return bool(pick(2));
        case 2: return int64_t(rng()) >> pick(64);
        case 3: return uint64_t(rng());
        case 4: {
            const double specials[] = {0.0, -0.0, 1.0, 2.0, 0.5, -1.0, 1e308, -1e308, 1e-300, 20.0, 5.0, 4096.0};
            return pick(2) ? specials[pick(12)] : double(rng() % 10000) / 1000.0 - 3.0;
        }
        case 5: {
            const char* strings[] = {"", "user", "assistant", "system", "text", "image", "tool_use", "disabled",
                                     "\n", "<|im_start|>", "h\xc3\xa9llo", "\xe2\x82\xac"};
            return strings[pick(12)];
        }
        case 6: return std::string(size_t(pick(40)), char('a' + pick(26)));
        case 7: {
            json a = json::array();
            for (int i = pick(5); i > 0; --i) a.push_back(random_value(rng, depth + 1));
            return a;
        }
        default: {
            static const char* keys[] = {"role", "content", "type", "text", "user_id", "cache_control", "x"};
            json o = json::object();
            for (int i = pick(4); i > 0; --i) o[keys[pick(7)]] = random_value(rng, depth + 1);
            return o;
        }
    }
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
            msgs.push_back(m);
        }
        body["messages"] = msgs;
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
            EXPECT_EQ(r.messages.back().role, "user");
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
    for (int i = 0; i < 4000; ++i) {
        run(random_body(rng).dump());
        // Mutations of a valid body: byte flips, truncation, insertion.
        std::string m = valid;
        for (int k = int(rng() % 4); k >= 0; --k) {
            const size_t at = rng() % m.size();
            switch (rng() % 3) {
                case 0: m[at] = char(rng()); break;
                case 1: m.resize(at); break;
                default: m.insert(at, 1, "{}[]\",:0e-\\"[rng() % 12]); break;
            }
            if (m.empty()) break;
        }
        run(m);
        // Random bytes.
        std::string r(rng() % 64, '\0');
        for (char& c : r) c = char(rng());
        run(r);
    }
    EXPECT_GT(parsed, 100);
    EXPECT_GT(rejected, 1000);
}

}  // namespace
