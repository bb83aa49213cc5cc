// OpenAI's response objects for one request: chat.completion and
// text_completion, their streamed chunks (chat.completion.chunk; legacy
// completions stream text_completion objects), usage, logprobs in each
// endpoint's shape, and llama.cpp server's `timings` object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer.h"
#include "engine/tool_calls.h"
#include "server/request.h"
#include "server/scheduler.h"

namespace ptxlm::server {

// One response's identity and what it reports, shared by all its chunks.
class ResponseBuilder {
public:
    ResponseBuilder(Endpoint ep, std::string model_id, const Tokenizer& tok, int logprobs);

    const std::string& id() const { return id_; }   // "chatcmpl-…" or "cmpl-…"
    Endpoint endpoint() const { return ep_; }
    // The builder of another choice of the same response (n > 1): the same
    // id and creation time, its own index, logprobs offsets and stream parser.
    ResponseBuilder for_choice(int index) const;

    // Chat: how the model's text is read (ChatPrompt::output): tool calls
    // and a reasoning block become message.tool_calls and
    // reasoning_content (finish_reason "tool_calls" when it called a tool);
    // parallel_tool_calls false keeps the first call only. Ids come from
    // `id_seed` (+ the choice's index).
    void set_output(const tools::Formats& f, bool parallel_tool_calls, uint64_t id_seed);

    // Streaming: the chat opening chunk (role), a text chunk (null when the
    // text only fed the output parser and nothing became final), what the
    // parser held back at the end (null when nothing), the final chunk
    // (finish_reason and timings), the usage chunk (no choices).
    nlohmann::json role_chunk() const;
    nlohmann::json text_chunk(const std::string& text, const std::vector<TokenLogprob>& logprobs);
    nlohmann::json flush_chunk();
    nlohmann::json final_chunk(const Event& done) const;
    nlohmann::json usage_chunk(const Event& done) const;

    // Not streaming: the whole answer (one choice), and one choice of it
    // (what n > 1 appends to the first's `choices`).
    nlohmann::json response(const std::string& text, const std::vector<TokenLogprob>& logprobs, const Event& done);
    nlohmann::json choice(const std::string& text, const std::vector<TokenLogprob>& logprobs, const Event& done);

private:
    nlohmann::json base(const char* object) const;
    nlohmann::json logprobs_json(const std::vector<TokenLogprob>& lp);
    nlohmann::json token_entry(TokenId id, float logprob) const;
    bool parses() const { return output_.tools != tools::Format::None || output_.reasoning != tools::Reasoning::None; }
    nlohmann::json delta_chunk(const tools::Delta& d, nlohmann::json logprobs);
    const char* finish_reason(const Event& done, bool called) const;

    Endpoint ep_;
    std::string id_, model_;
    int64_t created_;
    const Tokenizer& tok_;
    int logprobs_;
    int index_ = 0;
    size_t text_offset_ = 0;   // completions logprobs: where the next token's text starts
    tools::Formats output_;
    bool parallel_tool_calls_ = true;
    uint64_t id_seed_ = 0;
    std::shared_ptr<tools::StreamParser> parser_;   // this choice's, when streaming and parsing
    bool called_ = false;
};

nlohmann::json usage_json(const Event& done);
nlohmann::json timings_json(const Timings& t);
const char* openai_finish_reason(FinishReason r);   // "stop" or "length"

// JSON text; generated pieces that are not whole UTF-8 characters are
// written with U+FFFD rather than failing.
std::string dump(const nlohmann::json& j);

}  // namespace ptxlm::server
