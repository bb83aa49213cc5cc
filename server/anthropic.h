// Anthropic's Messages API (POST /v1/messages) over the same engine as the
// OpenAI endpoints: the request body checked and turned into a chat
// CompletionRequest, the answer as a `message` object or as Anthropic's
// server-sent events, and errors in Anthropic's shape
// {"type": "error", "error": {"type", "message"}}.
//
// The field policy: every field that changes the output is honoured or
// refused with a 400 that names it; `metadata` and `cache_control` are
// documented no-ops; a top-level field this file does not know is refused
// by name. Extended thinking (`thinking`) and image or document blocks are
// refused.
//
// Tool use maps onto the chat endpoint's: `tools` (client tools: name,
// description, input_schema) become OpenAI's functions, `tool_choice`
// auto / any / tool / none becomes "auto" / "required" / the name / "none"
// (disable_parallel_tool_use: parallel_tool_calls false), an assistant's
// tool_use blocks its tool_calls and a user's tool_result blocks role
// "tool" messages ahead of that turn's text. The answer is read by the same
// parsers (engine/tool_calls.h): calls become tool_use blocks, a reasoning
// block a thinking block (with an empty signature), the rest a text block.
// Anthropic's newer clients no longer send `temperature`, `top_p`
// and `top_k` (the API dropped them for its newer models); they are read
// here as Anthropic defined them, and clients pass them in `extra_body`, as
// they do `seed` (not Anthropic's: the chat endpoint's, to repeat an answer).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/tool_calls.h"
#include "server/request.h"
#include "server/scheduler.h"

namespace ptxlm::server {

// At most this many stop_sequences (each a non-empty string).
inline constexpr size_t kMaxStopSequences = 16;

// Parses and checks a /v1/messages body. Throws ApiError only (400, naming
// the field). The request's endpoint is Endpoint::Chat: the conversation
// runs through the model's chat template like /v1/chat/completions.
CompletionRequest parse_messages_request(std::string_view body, const RequestDefaults& defaults);

// The HTTP status an ApiError is sent with on this endpoint (Anthropic's:
// an overloaded server answers 529), and its body.
int anthropic_status(const ApiError& e);
nlohmann::json anthropic_error_json(const ApiError& e);

// "end_turn", "max_tokens", "stop_sequence" or "model_context_window_exceeded";
// "tool_use" when the answer called a tool and ended by itself.
const char* anthropic_stop_reason(const Event& done, bool called_tool = false);

// One answer: its id ("msg_…") and model, the whole message or the events
// of its stream. Its content blocks, in order: a thinking block (when the
// model reasoned), a text block (omitted when empty beside tool calls),
// one tool_use block per call. A stream opens each block when its first
// piece is final and numbers them from 0 across kinds.
class MessageBuilder {
public:
    MessageBuilder(std::string model_id, uint32_t input_tokens);

    const std::string& id() const { return id_; }

    // How the model's text is read (ChatPrompt::output; without it: all
    // text): tool calls and a reasoning block become tool_use and thinking
    // blocks. parallel_tool_calls false keeps the first call only. Call ids
    // come from `id_seed`: "toolu_" + 24 alphanumerics, or for the Mistral
    // formats the 9 alphanumerics their templates require back.
    void set_output(const tools::Formats& f, bool parallel_tool_calls, uint64_t id_seed);

    // Not streaming: the `message` object.
    nlohmann::json message(const std::string& text, const Event& done) const;

    // Streaming: whole server-sent events ("event: NAME\ndata: {...}\n\n").
    std::string stream_start() const;                // message_start, ping
    std::string stream_text(const std::string& text);   // blocks opened, their deltas, blocks stopped
    std::string stream_end(const Event& done);       // what was held back, the last content_block_stop,
                                                     // message_delta, message_stop
    static std::string stream_error(const ApiError& e);  // error (then the stream ends)

private:
    enum class Block { None, Text, Thinking };
    nlohmann::json usage(uint32_t output_tokens) const;
    bool parses() const { return output_.tools != tools::Format::None || output_.reasoning != tools::Reasoning::None; }
    std::function<std::string()> new_id() const;
    std::string stream_delta(const tools::Delta& d);
    std::string stream_piece(Block kind, const std::string& text);   // into an open block of that kind
    std::string stop_block();

    std::string id_, model_;
    uint32_t input_tokens_;
    tools::Formats output_;
    bool parallel_tool_calls_ = true;
    uint64_t id_seed_ = 0;
    std::unique_ptr<tools::StreamParser> parser_;   // streaming with a format to read
    Block open_ = Block::None;   // the stream's open text or thinking block
    int blocks_ = 0;             // blocks the stream has started
    bool called_ = false;        // the stream sent a tool_use block
};

}  // namespace ptxlm::server
