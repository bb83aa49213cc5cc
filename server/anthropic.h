// Anthropic's Messages API (POST /v1/messages) over the same engine as the
// OpenAI endpoints: the request body checked and turned into a chat
// CompletionRequest, the answer as a `message` object or as Anthropic's
// server-sent events, and errors in Anthropic's shape
// {"type": "error", "error": {"type", "message"}}.
//
// The field policy: every field that changes the output is honoured or
// refused with a 400 that names it; `metadata` and `cache_control` are
// documented no-ops; a top-level field this file does not know is refused
// by name. Tool use, extended thinking and non-text content blocks are
// refused. Anthropic's newer clients no longer send `temperature`, `top_p`
// and `top_k` (the API dropped them for its newer models); they are read
// here as Anthropic defined them, and clients pass them in `extra_body`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

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

// "end_turn", "max_tokens", "stop_sequence" or "model_context_window_exceeded".
const char* anthropic_stop_reason(const Event& done);

// One answer: its id ("msg_…") and model, the whole message or the events
// of its stream. The stream carries one text content block (index 0).
class MessageBuilder {
public:
    MessageBuilder(std::string model_id, uint32_t input_tokens);

    const std::string& id() const { return id_; }

    // Not streaming: the `message` object.
    nlohmann::json message(const std::string& text, const Event& done) const;

    // Streaming: whole server-sent events ("event: NAME\ndata: {...}\n\n").
    std::string stream_start() const;                    // message_start, content_block_start, ping
    std::string stream_text(const std::string& text) const;   // content_block_delta (text_delta)
    std::string stream_end(const Event& done) const;     // content_block_stop, message_delta, message_stop
    static std::string stream_error(const ApiError& e);  // error (then the stream ends)

private:
    nlohmann::json usage(uint32_t output_tokens) const;

    std::string id_, model_;
    uint32_t input_tokens_;
};

}  // namespace ptxlm::server
