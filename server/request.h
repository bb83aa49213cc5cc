// The OpenAI request bodies the server accepts, parsed and checked before
// anything reaches the engine: POST /v1/chat/completions and /v1/completions.
//
// parse_request() turns a body into a CompletionRequest or throws ApiError
// (and nothing else): malformed JSON, a field of the wrong type or out of its
// range, an unsupported value (n > 1, a non-text content part, an unknown
// role), a field it does not know. A null field counts as absent. The error
// names the field (`param`) the way OpenAI's do.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/chat_template.h"
#include "engine/session.h"

namespace ptxlm::server {

// An error as the client sees it: the HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}.
class ApiError : public std::runtime_error {
public:
    ApiError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error",
             std::string code = {});
    int status() const { return status_; }
    const std::string& type() const { return type_; }
    const std::string& param() const { return param_; }   // empty: null
    const std::string& code() const { return code_; }     // empty: null

private:
    int status_;
    std::string type_, param_, code_;
};

// {"error": {...}} for an ApiError.
nlohmann::json error_json(const ApiError& e);

enum class Endpoint { Chat, Completion };
const char* endpoint_path(Endpoint e);   // "/v1/chat/completions", "/v1/completions"

// The request-field policy of an endpoint: a field that changes the output is
// honoured (at some or every value: `n`, `tools`, `response_format`, `echo`,
// ... only at the value that changes nothing) or refused with a 400 naming
// it; a field that cannot change the output is a documented no-op; any other
// field is refused as unrecognized. README.md's "Serving" lists the same.
struct RequestFields {
    std::vector<std::string_view> honoured;   // read, checked, and used or refused by value
    std::vector<std::string_view> no_ops;     // accepted and ignored: they cannot change the output
    std::vector<std::string_view> refused;    // OpenAI's, changing the output, not supported here
};
const RequestFields& request_fields(Endpoint e);

// n: at most this many choices per request (OpenAI's limit is 128).
inline constexpr int kMaxChoices = 128;
// logit_bias holds at most this many tokens (OpenAI's limit is 300).
inline constexpr size_t kMaxLogitBias = 1024;

// What a request gets for the fields it leaves out (`ptxlm serve`'s --temp,
// --top-k, ... options; OpenAI's defaults unless changed).
struct RequestDefaults {
    SamplerParams sampling = openai_sampling();
    int32_t max_tokens = -1;    // < 0: until an end token or a full context

    // temperature 1, top_p 1, no top-k or min-p cut, no penalties.
    static SamplerParams openai_sampling();
};

struct CompletionRequest {
    Endpoint endpoint = Endpoint::Chat;
    std::vector<ChatMessage> messages;        // chat: roles system, user, assistant, tool (developer → system)
    // Chat: `tools` as sent (key order kept; checked: functions with unique
    // names), null when none; tool_choice "auto", "none", "required" or a
    // function's name; parallel_tool_calls false: at most one call.
    nlohmann::ordered_json tools;
    std::string tool_choice = "auto";
    bool parallel_tool_calls = true;
    // A grammar the answer must follow (GBNF, checked): from `grammar`
    // (llama-server's field) or response_format json_object / json_schema;
    // empty: none. grammar_field names where it came from (for errors).
    std::string grammar;
    std::string grammar_field;
    // llama-server's: more variables for the chat template (an object; null:
    // none), and whether a reasoning block goes to reasoning_content
    // ("auto", "deepseek": yes; "none": it stays in content).
    nlohmann::ordered_json chat_template_kwargs;
    bool split_reasoning = true;
    std::string prompt;                       // completions: the prompt text ...
    std::optional<std::vector<TokenId>> prompt_ids;   // ... or token ids given as such
    GenerateOptions gen;                      // max_tokens, sampling (seed included), stop
    bool seed_given = false;                  // false: the server draws a seed
    bool stream = false;
    bool include_usage = false;               // stream_options.include_usage
    // Log-probabilities: < 0 none; n >= 0 the sampled token's and the n most
    // likely (chat: logprobs true + top_logprobs; completions: logprobs n).
    int logprobs = -1;
    int n = 1;                                // choices (1..kMaxChoices), each with its own seed: seed + index
    std::string model;                        // as the client named it (reported as the loaded model)
};

// A tool's name as OpenAI and Anthropic allow it: 1 to 64 letters, digits,
// '_' or '-'; and not "auto", "none" or "required", the words tool_choice
// uses (a function of that name could not be chosen by name).
bool valid_function_name(const std::string& name);
// The 400 message for a name valid_function_name refuses, naming `param`.
std::string function_name_error(const std::string& param, const std::string& name);

// Parses and checks a request body. Throws ApiError only.
CompletionRequest parse_request(Endpoint endpoint, std::string_view body, const RequestDefaults& defaults);

}  // namespace ptxlm::server
