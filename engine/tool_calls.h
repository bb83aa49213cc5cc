// Tool calls and reasoning out of a model's generated text: the parsers that
// turn what a model family writes into OpenAI's `tool_calls` (and
// `reasoning_content`), for a complete generation and for a stream.
//
// Formats (what the model writes; see detect() for how a template selects one):
//   Hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, repeated, after content
//                (Qwen 2.5 / Qwen3 / QwQ / Hermes 2 Pro and 3 / Granite 4 / MiMo-VL / Reka / Bielik).
//   Llama3       the whole reply is {"name": "f", "parameters": {...}} ("arguments" and
//                "type": "function" accepted), optionally after <|python_tag|>; one call only
//                (the templates refuse several). Python-syntax builtin calls stay content.
//   MistralJson  [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "a1b2c3d4e"}, ...] (Nemo, v3).
//   MistralArgs  [TOOL_CALLS]f[ARGS]{...}, repeated; optionally [TOOL_CALLS]f[CALL_ID]id[ARGS]{...}
//                (Mistral Small 3.2, Magistral, Ministral 3, Devstral).
//   Generic      the whole reply is {"tool_calls": [{"name": "f", "arguments": {...}}, ...]} or
//                {"response": "text"} (both keys allowed), optionally in a ``` / ```json fence;
//                generic_tools_prompt() asks for it.
// Reasoning: a <think>...</think> or [THINK]...[/THINK] block at the start of the reply (after
// whitespace), or, when the prompt opened it, everything up to the closing tag. A block that is never
// closed is reasoning to the end. Tool calls are looked for only after it. Whitespace around the
// reasoning text, after the block, around a call and between calls is dropped.
//
// The arguments of a call are the model's own JSON object text (its bytes, as written), checked to parse
// as a JSON object (nlohmann). A call's "arguments" may also be a JSON string holding an object (then
// its decoded text), or absent ("{}"). A Mistral id the model wrote is kept when it is 9 alphanumerics;
// any other call gets new_id().
//
// Text that looks like a call but does not parse stays content, whole: on a failed Hermes or Mistral
// call the trigger ("<tool_call>", "[TOOL_CALLS]") becomes content and scanning resumes after it (so a
// good call after a broken one is still found); a failed Llama3 or Generic reply is content as written.
//
// Streaming: StreamParser and parse() share one step function over the same buffered text; the stream
// only takes a decision that no later byte can change (a partial trigger, a trailing whitespace run, an
// unfinished call are held back), and finish() takes the rest with the end known, as parse() does. So the
// concatenated deltas equal parse() of the whole text, ids included when new_id is seeded the same.
// A call is held back until it is complete and checked, then sent in one delta (index, id, name and the
// whole arguments text); nothing of a call is ever sent that could turn out to be content. Llama3 and
// Generic replies that start with "{" (or a fence) are held to the end, since trailing text makes them
// content. Content, and reasoning, stream as they come otherwise.
//
// Cost: each feed() rescans the unfinished call it holds (not the text already decided), so a call fed
// byte by byte costs O(call length^2) in scanning; a Hermes/Mistral call is a few KiB at most in practice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ptxlm::tools {

enum class Format { None, Generic, Hermes, Llama3, MistralJson, MistralArgs };
enum class Reasoning { None, ThinkTags, MistralThink };

struct Formats {
    Format tools = Format::None;
    Reasoning reasoning = Reasoning::None;
    bool starts_in_reasoning = false;   // the generation prompt opens the block: output starts inside it
};

// From a chat template's source: which format its model writes (tools: None when the template renders no
// tools: the caller then uses Generic), whether it has a reasoning block, and whether the generation
// prompt opens it (ends inside "<think>"). The last can only say "may": most templates open the block or
// not by enable_thinking; it is true when a string literal of the generation prompt writes the open tag
// without the closing one. Set it from prompt_opens_reasoning() on the rendered prompt, which is exact:
// a wrong true turns a whole reply into reasoning.
Formats detect(std::string_view template_source);
// Whether a rendered prompt ends inside an open reasoning block of kind r (its last open tag has no
// closing tag after it, and only whitespace follows it).
bool prompt_opens_reasoning(Reasoning r, std::string_view prompt);
std::string format_name(Format);
std::string reasoning_name(Reasoning);

struct ToolCall {
    std::string id, name, arguments;   // arguments: the JSON object's text
    bool operator==(const ToolCall&) const = default;
};
struct Parsed {
    std::string content, reasoning;
    std::vector<ToolCall> calls;
    bool operator==(const Parsed&) const = default;
};

// A complete generation. Text that looks like a call but does not parse stays content, whole.
// new_id() makes ids (OpenAI-style "call_..." or Mistral's 9 alphanumerics: the caller picks).
Parsed parse(const Formats& f, std::string_view text, const std::function<std::string()>& new_id);

// The same, streamed: feed() takes the text as it is generated and returns what became final.
struct CallDelta {
    size_t index = 0;
    std::string id, name, arguments;   // id and name in a call's first delta only
};
struct Delta {
    std::string content, reasoning;
    std::vector<CallDelta> calls;
    bool empty() const { return content.empty() && reasoning.empty() && calls.empty(); }
};

namespace detail { class Machine; }

class StreamParser {
public:
    StreamParser(Formats f, std::function<std::string()> new_id);
    ~StreamParser();
    StreamParser(StreamParser&&) noexcept;
    StreamParser& operator=(StreamParser&&) noexcept;

    Delta feed(std::string_view text);
    Delta finish();   // the end of the generation: flushes what was held back; feed() after it is ignored

private:
    std::unique_ptr<detail::Machine> m_;
};

// Appends a delta to a result being accumulated (calls by index: the first delta of an index makes the
// call, later ones append to its arguments). Concatenating a stream this way gives parse()'s Parsed.
void accumulate(Parsed& into, const Delta& d);

// The system message that describes tools (OpenAI's `tools` array, as JSON) and the generic answer format
// for templates without tool support; tool_choice "auto", "required", "none", or a function's name.
// Entries may be {"type": "function", "function": {...}} or the function object itself; entries without
// a string name are skipped.
std::string generic_tools_prompt(const nlohmann::ordered_json& tools, std::string_view tool_choice);

// Ids: OpenAI style "call_" + 24 alphanumerics, Mistral 9 alphanumerics, from a seeded generator.
class IdGenerator {
public:
    explicit IdGenerator(uint64_t seed) : rng_(seed) {}
    std::string openai();    // "call_" + 24 alphanumerics
    std::string mistral();   // 9 alphanumerics (what Mistral templates require)
    // The kind format f needs: Mistral's for the Mistral formats, OpenAI's otherwise.
    std::string next(Format f);

private:
    std::string alnum(size_t n);
    std::mt19937_64 rng_;
};

// An id source for parse()/StreamParser: the kind format f needs, from a generator seeded with seed.
std::function<std::string()> id_source(Format f, uint64_t seed);

}  // namespace ptxlm::tools
