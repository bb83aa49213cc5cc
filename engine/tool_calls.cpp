// Tool-call and reasoning parsers: one step function (Machine::step) that both parse() and StreamParser
// drive; see engine/tool_calls.h for the formats and the streaming contract. Where a call's JSON ends,
// and whether more text could still complete it, is the scanner's to say (engine/json_scan.h).
#include "engine/tool_calls.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <utility>

#include "engine/json_scan.h"

namespace ptxlm::tools {
namespace {

using detail::decode_string;
using detail::elements_of;
using detail::is_ws;
using detail::Member;
using detail::members_of;
using detail::Scan;
using detail::scan_json;
using detail::Scanned;
using detail::skip_ws;
using detail::Span;

constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kFence = "```";

bool is_alnum(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_name_char(char c) { return is_alnum(c) || c == '_' || c == '-' || c == '.' || c == ':'; }

// The start of the whitespace run that ends at e (e when s[e-1] is not whitespace), not before b.
size_t trailing_ws(std::string_view s, size_t b, size_t e) {
    while (e > b && is_ws(s[e - 1])) --e;
    return e;
}
// The length of the longest suffix of s that is a proper prefix of tag: the bytes a stream holds back.
size_t partial_suffix(std::string_view s, std::string_view tag) {
    for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k)
        if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
    return 0;
}
// s (from p) is a proper prefix of tag: more text could complete it.
bool is_partial(std::string_view s, size_t p, std::string_view tag) {
    std::string_view rest = s.substr(p);
    return rest.size() < tag.size() && tag.substr(0, rest.size()) == rest;
}

bool is_json_object(std::string_view text) {
    if (!nlohmann::json::accept(text)) return false;
    return nlohmann::json::parse(text).is_object();
}

// A call's arguments from the JSON value at span v: the object's own text, or a string that holds an
// object (decoded). Anything else is not a call.
std::optional<std::string> arguments_text(std::string_view s, Span v) {
    std::string_view token = s.substr(v.b, v.e - v.b);
    if (token.front() == '{') {
        if (is_json_object(token)) return std::string(token);
        return std::nullopt;
    }
    if (token.front() == '"') {
        auto text = decode_string(token);
        if (text && is_json_object(*text)) return text;
    }
    return std::nullopt;
}

bool is_mistral_id(std::string_view id) {
    if (id.size() != 9) return false;
    for (char c : id)
        if (!is_alnum(c)) return false;
    return true;
}

struct Envelope {
    std::string name, arguments, id;
};
// A call object at s[b] (valid JSON): "name" (a non-empty string), "arguments" or "parameters" (see
// arguments_text; absent means "{}" unless required), "type": "function", and with allow_id a string
// "id". Any other key, or a key twice, makes it not a call: a JSON answer that merely has a "name" stays
// content. Llama3 requires the arguments: there a bare {"name": ...} is more likely an answer than a call.
std::optional<Envelope> read_call(std::string_view s, size_t b, bool allow_id, bool require_args = false) {
    if (s[b] != '{') return std::nullopt;
    Envelope env;
    bool has_name = false, has_args = false, has_type = false, has_id = false;
    for (const Member& m : members_of(s, b)) {
        std::string_view token = s.substr(m.value.b, m.value.e - m.value.b);
        if (m.key == "name") {
            if (has_name || token.front() != '"') return std::nullopt;
            auto name = decode_string(token);
            if (!name || name->empty()) return std::nullopt;
            env.name = std::move(*name);
            has_name = true;
        } else if (m.key == "arguments" || m.key == "parameters") {
            if (has_args) return std::nullopt;
            auto args = arguments_text(s, m.value);
            if (!args) return std::nullopt;
            env.arguments = std::move(*args);
            has_args = true;
        } else if (m.key == "type") {
            if (has_type || token != "\"function\"") return std::nullopt;
            has_type = true;
        } else if (m.key == "id" && allow_id) {
            if (has_id || token.front() != '"') return std::nullopt;
            env.id = decode_string(token).value_or("");
            has_id = true;
        } else {
            return std::nullopt;
        }
    }
    if (!has_name || (require_args && !has_args)) return std::nullopt;
    if (!has_args) env.arguments = "{}";
    return env;
}

struct Tags {
    std::string_view open, close;
};
Tags reasoning_tags(Reasoning r) {
    switch (r) {
        case Reasoning::ThinkTags: return {"<think>", "</think>"};
        case Reasoning::MistralThink: return {"[THINK]", "[/THINK]"};
        case Reasoning::None: break;
    }
    return {"", ""};
}

}  // namespace

namespace detail {

// The parser's state over the text so far. step() takes one decision at p_ that no later text can change
// (with at_end, the text is whole); it returns false when it needs more text.
class Machine {
public:
    Machine(Formats f, std::function<std::string()> new_id) : f_(f), new_id_(std::move(new_id)) {}

    void feed(std::string_view text) {
        if (state_ != State::Done) buf_.append(text);
    }
    void run(bool at_end) {
        while (state_ != State::Done && step(at_end)) {
        }
        if (at_end) state_ = State::Done;
        buf_.erase(0, p_);   // decided text is never looked at again
        p_ = 0;
    }
    Delta take() { return std::exchange(out_, Delta{}); }

private:
    enum class State {
        Start,            // before the reply: is there a reasoning block?
        ReasoningLead,    // inside it, skipping the leading whitespace
        Reasoning,        // inside it
        AfterReasoning,   // skipping the whitespace after it
        Body,             // the reply starts: dispatch on the format
        Scan,             // Hermes, Mistral: content with triggers
        AfterCall,        // skipping the whitespace after a call
        ReplyStart,       // Llama3, Generic: is the whole reply a JSON object?
        HoldAll,          // it may be: hold it to the end
        Plain,            // content to the end
        Done,
    };
    enum class Try { Need, Fail, Done };
    struct Attempt {
        Try result;
        size_t end = 0;   // with Done: one past the call
    };

    bool step(bool at_end);
    bool step_start(bool at_end);
    bool step_reasoning(bool at_end);
    bool step_scan(bool at_end);
    bool step_reply_start(bool at_end);
    void finish_whole_reply();

    Attempt try_hermes(size_t a, bool at_end);
    Attempt try_mistral_json(size_t a, bool at_end);
    Attempt try_mistral_args(size_t a, bool at_end);
    // A JSON value that must start at b with `first`: Need/Fail, or Done with its end.
    Attempt json_at(size_t b, char first, bool at_end) const;

    void content(size_t b, size_t e) { out_.content.append(buf_, b, e - b); }
    void emit_call(std::string id, std::string name, std::string arguments) {
        if (id.empty()) id = new_id_ ? new_id_() : std::string();
        out_.calls.push_back({ncalls_++, std::move(id), std::move(name), std::move(arguments)});
    }

    Formats f_;
    std::function<std::string()> new_id_;
    std::string buf_;   // the text not yet decided, from p_ (what is before p_ is erased after a run)
    size_t p_ = 0;
    State state_ = State::Start;
    Delta out_;
    size_t ncalls_ = 0;
};

bool Machine::step(bool at_end) {
    const size_t n = buf_.size();
    switch (state_) {
        case State::Start: return step_start(at_end);
        case State::ReasoningLead:
            p_ = skip_ws(buf_, p_);
            if (p_ == n && !at_end) return false;
            state_ = State::Reasoning;
            return true;
        case State::Reasoning: return step_reasoning(at_end);
        case State::AfterReasoning:
        case State::AfterCall:
            p_ = skip_ws(buf_, p_);
            if (p_ == n && !at_end) return false;
            state_ = state_ == State::AfterCall ? State::Scan : State::Body;
            return true;
        case State::Body:
            switch (f_.tools) {
                case Format::Hermes:
                case Format::MistralJson:
                case Format::MistralArgs: state_ = State::Scan; break;
                case Format::Llama3:
                case Format::Generic: state_ = State::ReplyStart; break;
                case Format::None: state_ = State::Plain; break;
            }
            return true;
        case State::Scan: return step_scan(at_end);
        case State::ReplyStart: return step_reply_start(at_end);
        case State::HoldAll:
            if (!at_end) return false;
            finish_whole_reply();
            state_ = State::Done;
            return false;
        case State::Plain:
            content(p_, n);
            p_ = n;
            return false;
        case State::Done: return false;
    }
    return false;
}

bool Machine::step_start(bool at_end) {
    if (f_.reasoning == Reasoning::None) {
        state_ = State::Body;
        return true;
    }
    if (f_.starts_in_reasoning) {
        state_ = State::ReasoningLead;
        return true;
    }
    const std::string_view open = reasoning_tags(f_.reasoning).open;
    const size_t q = skip_ws(buf_, p_);
    if (std::string_view(buf_).substr(q).starts_with(open)) {
        p_ = q + open.size();
        state_ = State::ReasoningLead;
        return true;
    }
    if ((q == buf_.size() || is_partial(buf_, q, open)) && !at_end) return false;
    state_ = State::Body;   // no block: the leading whitespace is the reply's
    return true;
}

// Reasoning text streams as it comes, less a trailing whitespace run and a partial closing tag.
bool Machine::step_reasoning(bool at_end) {
    const std::string_view close = reasoning_tags(f_.reasoning).close;
    const std::string_view s = buf_;
    const size_t r = s.find(close, p_);
    size_t limit = r;
    if (r == std::string_view::npos)
        limit = at_end ? s.size() : s.size() - partial_suffix(s.substr(p_), close);
    const size_t e = trailing_ws(s, p_, limit);
    out_.reasoning.append(s.substr(p_, e - p_));
    p_ = e;
    if (r != std::string_view::npos) {
        p_ = r + close.size();
        state_ = State::AfterReasoning;
        return true;
    }
    if (at_end) p_ = s.size();
    return false;
}

// Content up to the next trigger; a whitespace run just before a call is dropped, so it is held until
// the next non-whitespace byte or the call's outcome.
bool Machine::step_scan(bool at_end) {
    const std::string_view trigger = f_.tools == Format::Hermes ? kHermesOpen : kMistralCalls;
    const std::string_view s = buf_;
    const size_t q = s.find(trigger, p_);
    if (q == std::string_view::npos) {
        size_t e = s.size();
        if (!at_end) e = trailing_ws(s, p_, s.size() - partial_suffix(s.substr(p_), trigger));
        content(p_, e);
        p_ = e;
        return false;
    }
    const size_t ws = trailing_ws(s, p_, q);
    content(p_, ws);
    p_ = ws;
    const size_t a = q + trigger.size();
    Attempt t = f_.tools == Format::Hermes        ? try_hermes(a, at_end)
              : f_.tools == Format::MistralJson ? try_mistral_json(a, at_end)
                                                : try_mistral_args(a, at_end);
    switch (t.result) {
        case Try::Need: return false;
        case Try::Fail:   // the trigger is content; what follows it is scanned again
            content(p_, a);
            p_ = a;
            return true;
        case Try::Done:
            p_ = t.end;
            state_ = State::AfterCall;
            return true;
    }
    return false;
}

Machine::Attempt Machine::json_at(size_t b, char first, bool at_end) const {
    if (b == buf_.size()) return {at_end ? Try::Fail : Try::Need};
    if (buf_[b] != first) return {Try::Fail};
    Scanned sc = scan_json(buf_, b);
    if (sc.status == Scan::Invalid) return {Try::Fail};
    if (sc.status == Scan::Incomplete) return {at_end ? Try::Fail : Try::Need};
    return {Try::Done, sc.end};
}

// <tool_call> {call} </tool_call>; at the end of the text the closing tag may be missing.
Machine::Attempt Machine::try_hermes(size_t a, bool at_end) {
    const size_t b = skip_ws(buf_, a);
    Attempt j = json_at(b, '{', at_end);
    if (j.result != Try::Done) return j;
    const size_t c = skip_ws(buf_, j.end);
    size_t end = 0;
    if (std::string_view(buf_).substr(c).starts_with(kHermesClose)) end = c + kHermesClose.size();
    else if (c == buf_.size() && at_end) end = c;
    else if ((c == buf_.size() || is_partial(buf_, c, kHermesClose)) && !at_end) return {Try::Need};
    else return {Try::Fail};
    auto env = read_call(buf_, b, false);
    if (!env) return {Try::Fail};
    emit_call("", std::move(env->name), std::move(env->arguments));
    return {Try::Done, end};
}

// [TOOL_CALLS] [{call}, ...]: all of the array's calls or none.
Machine::Attempt Machine::try_mistral_json(size_t a, bool at_end) {
    const size_t b = skip_ws(buf_, a);
    Attempt j = json_at(b, '[', at_end);
    if (j.result != Try::Done) return j;
    std::vector<Envelope> calls;
    for (Span e : elements_of(buf_, b)) {
        auto env = read_call(buf_, e.b, true);
        if (!env) return {Try::Fail};
        calls.push_back(std::move(*env));
    }
    if (calls.empty()) return {Try::Fail};
    for (Envelope& c : calls)
        emit_call(is_mistral_id(c.id) ? c.id : "", std::move(c.name), std::move(c.arguments));
    return j;
}

// [TOOL_CALLS]name[ARGS]{...} or [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}
Machine::Attempt Machine::try_mistral_args(size_t a, bool at_end) {
    const std::string_view s = buf_;
    const Attempt need{at_end ? Try::Fail : Try::Need};
    size_t i = a;
    while (i < s.size() && is_name_char(s[i])) ++i;
    if (i == s.size()) return need;
    if (i == a) return {Try::Fail};
    const std::string_view name = s.substr(a, i - a);
    std::string_view id;
    size_t j = 0;
    if (s.substr(i).starts_with(kMistralArgs)) {
        j = i + kMistralArgs.size();
    } else if (s.substr(i).starts_with(kMistralCallId)) {
        size_t k = i + kMistralCallId.size();
        while (k < s.size() && is_alnum(s[k])) ++k;
        if (k == s.size()) return need;
        if (!s.substr(k).starts_with(kMistralArgs)) return is_partial(s, k, kMistralArgs) ? need : Attempt{Try::Fail};
        id = s.substr(i + kMistralCallId.size(), k - i - kMistralCallId.size());
        j = k + kMistralArgs.size();
    } else {
        return is_partial(s, i, kMistralArgs) || is_partial(s, i, kMistralCallId) ? need : Attempt{Try::Fail};
    }
    const size_t b = skip_ws(s, j);
    Attempt obj = json_at(b, '{', at_end);
    if (obj.result != Try::Done) return obj;
    auto args = arguments_text(s, {b, obj.end});
    if (!args) return {Try::Fail};
    emit_call(is_mistral_id(id) ? std::string(id) : "", std::string(name), std::move(*args));
    return obj;
}

// Llama3 and Generic: a reply whose first non-whitespace is "{" (or Llama3's <|python_tag|> then "{",
// or Generic's fence) is held to the end; any other reply is content as it comes.
bool Machine::step_reply_start(bool at_end) {
    const std::string_view s = buf_;
    const size_t q = skip_ws(s, p_);
    if (q == s.size()) {
        if (!at_end) return false;
        state_ = State::Plain;
        return true;
    }
    size_t b = q;
    if (f_.tools == Format::Llama3) {
        if (s.substr(q).starts_with(kPythonTag)) {
            b = skip_ws(s, q + kPythonTag.size());
            if (b == s.size() && !at_end) return false;
        } else if (is_partial(s, q, kPythonTag) && !at_end) {
            return false;
        }
    } else if (s.substr(q).starts_with(kFence)) {
        state_ = State::HoldAll;
        return true;
    } else if (is_partial(s, q, kFence) && !at_end) {
        return false;
    }
    state_ = b < s.size() && s[b] == '{' ? State::HoldAll : State::Plain;
    return true;
}

void Machine::finish_whole_reply() {
    const std::string_view s = buf_;
    const size_t end = trailing_ws(s, p_, s.size());
    size_t b = skip_ws(s, p_);
    if (f_.tools == Format::Llama3) {
        if (s.substr(b).starts_with(kPythonTag)) b = skip_ws(s, b + kPythonTag.size());
        Scanned sc = scan_json(s.substr(0, end), b);
        if (sc.status == Scan::Ok && sc.end == end) {
            if (auto env = read_call(s, b, false, true)) {
                emit_call("", std::move(env->name), std::move(env->arguments));
                p_ = s.size();
                return;
            }
        }
        content(p_, s.size());
        p_ = s.size();
        return;
    }
    // Generic: {"response": "..."} and/or {"tool_calls": [...]}, maybe fenced.
    size_t e = end;
    if (s.substr(b).starts_with(kFence)) {
        b += kFence.size();
        if (s.substr(b).starts_with("json")) b += 4;
        b = skip_ws(s, b);
        if (e - b >= kFence.size() && s.substr(e - kFence.size(), kFence.size()) == kFence)
            e = trailing_ws(s, b, e - kFence.size());
        else
            e = b;   // an unclosed fence is not an answer
    }
    Scanned sc = scan_json(s.substr(0, e), b);
    bool ok = b < e && s[b] == '{' && sc.status == Scan::Ok && sc.end == e;
    std::optional<std::string> response;
    std::vector<Envelope> calls;
    if (ok) {
        for (const Member& m : members_of(s, b)) {
            std::string_view token = s.substr(m.value.b, m.value.e - m.value.b);
            if (m.key == "response" && !response && token.front() == '"') {
                response = decode_string(token);
                ok = ok && response.has_value();
            } else if (m.key == "tool_calls" && calls.empty() && token.front() == '[') {
                for (Span el : elements_of(s, m.value.b)) {
                    auto env = read_call(s, el.b, false);
                    if (!env) ok = false;
                    else calls.push_back(std::move(*env));
                }
                ok = ok && !calls.empty();
            } else {
                ok = false;
            }
        }
        ok = ok && (response || !calls.empty());
    }
    if (!ok) {
        content(p_, s.size());
    } else {
        if (response) out_.content += *response;
        for (Envelope& c : calls) emit_call("", std::move(c.name), std::move(c.arguments));
    }
    p_ = s.size();
}

}  // namespace detail

// --- Public API.

Formats detect(std::string_view src) {
    auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
    Formats f;
    if (has(kMistralCalls)) {
        f.tools = has(kMistralArgs) ? Format::MistralArgs : Format::MistralJson;
    } else if (has(kHermesOpen)) {
        // Hermes writes JSON after the tag; Qwen3-Coder's <function=...>, GLM's <arg_key> and Apriel's
        // <tool_calls>[...] share the tag name but not the format. Look past the template syntax that
        // may sit between the tag and the JSON ("\n", quotes, "}}", "{{-", "+", "~").
        for (size_t at = src.find(kHermesOpen); at != std::string_view::npos && f.tools == Format::None;
             at = src.find(kHermesOpen, at + 1)) {
            size_t p = at + kHermesOpen.size();
            while (p < src.size()) {
                std::string_view r = src.substr(p);
                if (is_ws(r[0]) || r[0] == '\'' || r[0] == '"' || r[0] == '+' || r[0] == '~' || r[0] == '-') ++p;
                else if (r.starts_with("\\n") || r.starts_with("}}") || r.starts_with("{{")) p += 2;
                else break;
            }
            std::string_view r = src.substr(std::min(p, src.size()));
            if (r.starts_with("{\"name\"") || r.starts_with("{\\\"name\\\"")) f.tools = Format::Hermes;
        }
    }
    if (f.tools == Format::None && has("<|start_header_id|>") && (has(kPythonTag) || has("Environment: ipython")) &&
        !has("<function="))   // functionary v3.1: Llama 3.1 tokens, its own <function=name> format
        f.tools = Format::Llama3;

    if (has("[THINK]")) f.reasoning = Reasoning::MistralThink;
    else if (has("</think>")) f.reasoning = Reasoning::ThinkTags;
    if (f.reasoning != Reasoning::None) {
        // The generation prompt is the template's last add_generation_prompt branch. It may open the block
        // when one of its string literals writes the open tag without the closing one after it ('<think>\n'
        // but not '<think>\n\n</think>'). Whether it does depends on the render (enable_thinking and the
        // like): the caller settles it with prompt_opens_reasoning() on the rendered prompt.
        const size_t gen = src.rfind("add_generation_prompt");
        const Tags t = reasoning_tags(f.reasoning);
        for (size_t at = gen == std::string_view::npos ? gen : src.find(t.open, gen); at != std::string_view::npos;
             at = src.find(t.open, at + 1)) {
            const size_t quote = src.find_first_of("'\"", at);
            if (src.substr(at, quote - at).find(t.close) == std::string_view::npos) f.starts_in_reasoning = true;
        }
    }
    return f;
}

bool prompt_opens_reasoning(Reasoning r, std::string_view prompt) {
    if (r == Reasoning::None) return false;
    const Tags t = reasoning_tags(r);
    const size_t open = prompt.rfind(t.open);
    if (open == std::string_view::npos) return false;
    return skip_ws(prompt, open + t.open.size()) == prompt.size();
}

std::string format_name(Format f) {
    switch (f) {
        case Format::None: return "none";
        case Format::Generic: return "generic";
        case Format::Hermes: return "hermes";
        case Format::Llama3: return "llama3";
        case Format::MistralJson: return "mistral-json";
        case Format::MistralArgs: return "mistral-args";
    }
    return "?";
}

std::string reasoning_name(Reasoning r) {
    switch (r) {
        case Reasoning::None: return "none";
        case Reasoning::ThinkTags: return "think-tags";
        case Reasoning::MistralThink: return "mistral-think";
    }
    return "?";
}

Parsed parse(const Formats& f, std::string_view text, const std::function<std::string()>& new_id) {
    detail::Machine m(f, new_id);
    m.feed(text);
    m.run(true);
    Parsed out;
    accumulate(out, m.take());
    return out;
}

StreamParser::StreamParser(Formats f, std::function<std::string()> new_id)
    : m_(std::make_unique<detail::Machine>(f, std::move(new_id))) {}
StreamParser::~StreamParser() = default;
StreamParser::StreamParser(StreamParser&&) noexcept = default;
StreamParser& StreamParser::operator=(StreamParser&&) noexcept = default;

Delta StreamParser::feed(std::string_view text) {
    m_->feed(text);
    m_->run(false);
    return m_->take();
}

Delta StreamParser::finish() {
    m_->run(true);
    return m_->take();
}

void accumulate(Parsed& into, const Delta& d) {
    into.content += d.content;
    into.reasoning += d.reasoning;
    for (const CallDelta& c : d.calls) {
        if (c.index < into.calls.size()) into.calls[c.index].arguments += c.arguments;
        else into.calls.push_back({c.id, c.name, c.arguments});
    }
}

std::string generic_tools_prompt(const nlohmann::ordered_json& tools, std::string_view tool_choice) {
    std::string out =
        "You can call the tools (functions) below. Each is given by its name, what it does, and the JSON "
        "schema of its arguments.\n";
    if (tools.is_array()) {
        for (const auto& t : tools) {
            const auto& fn = t.is_object() && t.contains("function") ? t["function"] : t;
            if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
            out += "\nTool: " + fn["name"].get<std::string>() + "\n";
            if (fn.contains("description") && fn["description"].is_string())
                out += "Description: " + fn["description"].get<std::string>() + "\n";
            out += "Parameters: " +
                   (fn.contains("parameters") ? fn["parameters"].dump() : std::string("{\"type\":\"object\"}")) + "\n";
        }
    }
    const std::string calls_form =
        "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<the arguments, as a JSON object>}}]}";
    const std::string response_form = "{\"response\": \"<your answer to the user>\"}";
    out += "\nAnswer with exactly one JSON object and nothing else.\n";
    if (tool_choice == "required") {
        out += "You must call at least one tool, in this form (several calls go in the list):\n" + calls_form + "\n";
    } else if (tool_choice == "none") {
        out += "Do not call a tool now; answer in this form:\n" + response_form + "\n";
    } else if (tool_choice == "auto" || tool_choice.empty()) {
        out += "To call tools (several calls go in the list):\n" + calls_form +
               "\nTo answer the user directly:\n" + response_form + "\n";
    } else {
        const std::string name = nlohmann::json(std::string(tool_choice)).dump();
        out += "You must call the tool " + name + ", in this form:\n{\"tool_calls\": [{\"name\": " + name +
               ", \"arguments\": {<the arguments, as a JSON object>}}]}\n";
    }
    return out;
}

std::string IdGenerator::alnum(size_t n) {
    static constexpr std::string_view chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::string s(n, ' ');
    for (char& c : s) c = chars[rng_() % chars.size()];   // bias of 2^64 mod 62: negligible for ids
    return s;
}

std::string IdGenerator::openai() { return "call_" + alnum(24); }
std::string IdGenerator::mistral() { return alnum(9); }
std::string IdGenerator::next(Format f) {
    return f == Format::MistralJson || f == Format::MistralArgs ? mistral() : openai();
}

std::function<std::string()> id_source(Format f, uint64_t seed) {
    auto gen = std::make_shared<IdGenerator>(seed);
    return [gen, f] { return gen->next(f); };
}

}  // namespace ptxlm::tools
