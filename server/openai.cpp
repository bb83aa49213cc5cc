#include "server/openai.h"

#include <ctime>
#include <random>

namespace ptxlm::server {

using nlohmann::json;

namespace {

std::string random_hex(size_t n) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* digits = "0123456789abcdef";
    std::string s(n, '0');
    for (char& c : s) c = digits[rng() & 15];
    return s;
}

}  // namespace

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* openai_finish_reason(FinishReason r) {
    // A full context ends the answer for want of room: OpenAI calls that "length".
    return r == FinishReason::Stop ? "stop" : "length";
}

json usage_json(const Event& done) {
    return {{"prompt_tokens", done.prompt_tokens},
            {"completion_tokens", done.completion_tokens},
            {"total_tokens", done.prompt_tokens + done.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", done.cached_tokens}}}};
}

json timings_json(const Timings& t) {
    // llama.cpp server's names; prompt_n counts the evaluated prompt tokens,
    // cache_n those reused from the slot's cache.
    return {{"cache_n", t.prompt_reused},
            {"prompt_n", t.prompt_tokens},
            {"prompt_ms", t.prompt_ms},
            {"prompt_per_token_ms", t.prompt_tokens ? t.prompt_ms / t.prompt_tokens : 0.0},
            {"prompt_per_second", t.prompt_tps()},
            {"predicted_n", t.generated},
            {"predicted_ms", t.generate_ms},
            {"predicted_per_token_ms", t.generated ? t.generate_ms / t.generated : 0.0},
            {"predicted_per_second", t.generate_tps()}};
}

ResponseBuilder::ResponseBuilder(Endpoint ep, std::string model_id, const Tokenizer& tok, int logprobs)
    : ep_(ep),
      id_((ep == Endpoint::Chat ? "chatcmpl-" : "cmpl-") + random_hex(24)),
      model_(std::move(model_id)),
      created_(int64_t(std::time(nullptr))),
      tok_(tok),
      logprobs_(logprobs) {}

json ResponseBuilder::base(const char* object) const {
    return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}, {"system_fingerprint", "ptxlm"}};
}

json ResponseBuilder::token_entry(TokenId id, float logprob) const {
    const std::string piece = tok_.piece(id, true);
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back(int(c));
    return {{"token", piece}, {"logprob", logprob}, {"bytes", bytes}};
}

json ResponseBuilder::logprobs_json(const std::vector<TokenLogprob>& lp) {
    if (logprobs_ < 0) return nullptr;
    if (ep_ == Endpoint::Chat) {
        json content = json::array();
        for (const TokenLogprob& t : lp) {
            json e = token_entry(t.id, t.logprob);
            json top = json::array();
            for (const auto& [id, l] : t.top) top.push_back(token_entry(id, l));
            e["top_logprobs"] = std::move(top);
            content.push_back(std::move(e));
        }
        return {{"content", std::move(content)}, {"refusal", nullptr}};
    }
    // Legacy completions: parallel arrays, top alternatives as {token: logprob}.
    json tokens = json::array(), token_lp = json::array(), top = json::array(), offsets = json::array();
    for (const TokenLogprob& t : lp) {
        const std::string piece = tok_.piece(t.id, true);
        tokens.push_back(piece);
        token_lp.push_back(t.logprob);
        json alt = json::object();
        for (const auto& [id, l] : t.top) alt[tok_.piece(id, true)] = l;
        top.push_back(std::move(alt));
        offsets.push_back(text_offset_);
        text_offset_ += piece.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", token_lp}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json ResponseBuilder::role_chunk() const {
    json c = base("chat.completion.chunk");
    c["choices"] = json::array(
        {{{"index", index_}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
    return c;
}

void ResponseBuilder::set_output(const tools::Formats& f, bool parallel_tool_calls, uint64_t id_seed) {
    output_ = f;
    parallel_tool_calls_ = parallel_tool_calls;
    id_seed_ = id_seed;
    parser_ = parses() ? std::make_shared<tools::StreamParser>(f, tools::id_source(f.tools, id_seed_ + uint64_t(index_)))
                       : nullptr;
}

const char* ResponseBuilder::finish_reason(const Event& done, bool called) const {
    return called && done.finish == FinishReason::Stop ? "tool_calls" : openai_finish_reason(done.finish);
}

json ResponseBuilder::delta_chunk(const tools::Delta& d, json logprobs) {
    json delta = json::object();
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    json calls = json::array();
    for (const tools::CallDelta& c : d.calls) {
        if (!parallel_tool_calls_ && c.index > 0) continue;   // one call only
        json call = {{"index", c.index}};
        if (!c.id.empty()) call["id"] = c.id;
        if (!c.name.empty()) {
            call["type"] = "function";
            call["function"] = {{"name", c.name}, {"arguments", c.arguments}};
        } else {
            call["function"] = {{"arguments", c.arguments}};
        }
        calls.push_back(std::move(call));
        called_ = true;
    }
    if (!calls.empty()) delta["tool_calls"] = std::move(calls);
    if (delta.empty() && logprobs.is_null()) return nullptr;
    json c = base("chat.completion.chunk");
    c["choices"] = json::array(
        {{{"index", index_}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)}, {"finish_reason", nullptr}}});
    return c;
}

json ResponseBuilder::flush_chunk() {
    if (!parser_) return nullptr;
    return delta_chunk(parser_->finish(), nullptr);
}

json ResponseBuilder::text_chunk(const std::string& text, const std::vector<TokenLogprob>& logprobs) {
    if (ep_ == Endpoint::Chat && parser_) return delta_chunk(parser_->feed(text), logprobs_json(logprobs));
    if (ep_ == Endpoint::Chat) {
        json c = base("chat.completion.chunk");
        c["choices"] = json::array({{{"index", index_},
                                     {"delta", {{"content", text}}},
                                     {"logprobs", logprobs_json(logprobs)},
                                     {"finish_reason", nullptr}}});
        return c;
    }
    json c = base("text_completion");
    c["choices"] = json::array(
        {{{"index", index_}, {"text", text}, {"logprobs", logprobs_json(logprobs)}, {"finish_reason", nullptr}}});
    return c;
}

json ResponseBuilder::final_chunk(const Event& done) const {
    json c;
    if (ep_ == Endpoint::Chat) {
        c = base("chat.completion.chunk");
        c["choices"] = json::array({{{"index", index_},
                                     {"delta", json::object()},
                                     {"logprobs", nullptr},
                                     {"finish_reason", finish_reason(done, called_)}}});
    } else {
        c = base("text_completion");
        c["choices"] = json::array(
            {{{"index", index_}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", openai_finish_reason(done.finish)}}});
    }
    c["timings"] = timings_json(done.timings);
    return c;
}

json ResponseBuilder::usage_chunk(const Event& done) const {
    json c = base(ep_ == Endpoint::Chat ? "chat.completion.chunk" : "text_completion");
    c["choices"] = json::array();
    c["usage"] = usage_json(done);
    return c;
}

ResponseBuilder ResponseBuilder::for_choice(int index) const {
    ResponseBuilder b = *this;
    b.index_ = index;
    b.text_offset_ = 0;
    b.called_ = false;
    if (parses()) b.set_output(output_, parallel_tool_calls_, id_seed_);
    return b;
}

json ResponseBuilder::choice(const std::string& text, const std::vector<TokenLogprob>& logprobs, const Event& done) {
    if (ep_ == Endpoint::Chat && parses()) {
        tools::Parsed p = tools::parse(output_, text, tools::id_source(output_.tools, id_seed_ + uint64_t(index_)));
        if (!parallel_tool_calls_ && p.calls.size() > 1) p.calls.resize(1);
        json message = {{"role", "assistant"}, {"content", nullptr}, {"refusal", nullptr}};
        if (!p.content.empty() || p.calls.empty()) message["content"] = p.content;
        if (!p.reasoning.empty()) message["reasoning_content"] = p.reasoning;
        if (!p.calls.empty()) {
            json calls = json::array();
            for (const tools::ToolCall& c : p.calls)
                calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
            message["tool_calls"] = std::move(calls);
        }
        return {{"index", index_},
                {"message", std::move(message)},
                {"logprobs", logprobs_json(logprobs)},
                {"finish_reason", finish_reason(done, !p.calls.empty())}};
    }
    if (ep_ == Endpoint::Chat)
        return {{"index", index_},
                {"message", {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}}},
                {"logprobs", logprobs_json(logprobs)},
                {"finish_reason", openai_finish_reason(done.finish)}};
    return {{"index", index_},
            {"text", text},
            {"logprobs", logprobs_json(logprobs)},
            {"finish_reason", openai_finish_reason(done.finish)}};
}

json ResponseBuilder::response(const std::string& text, const std::vector<TokenLogprob>& logprobs, const Event& done) {
    json r = base(ep_ == Endpoint::Chat ? "chat.completion" : "text_completion");
    r["choices"] = json::array({choice(text, logprobs, done)});
    r["usage"] = usage_json(done);
    r["timings"] = timings_json(done.timings);
    return r;
}

}  // namespace ptxlm::server
