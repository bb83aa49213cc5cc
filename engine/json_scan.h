// A strict JSON scanner for the tool-call parsers (internal to
// engine/tool_calls.cpp and engine/json_scan.cpp): it finds where a JSON value
// that starts at a given byte of a model's text ends, and tells a complete
// value from a prefix of one. RFC 8259 syntax, UTF-8 checked as nlohmann
// checks it. Incomplete only when the text runs out, so Invalid and Ok(end)
// never change as text is appended: that is what lets a stream decide early.
// Once a value has scanned Ok, members_of() and elements_of() list its parts
// without a full parse, keeping the model's own bytes for each.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ptxlm::tools::detail {

// JSON's whitespace (RFC 8259); the tool-call formats skip the same set around
// their tags and calls.
inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

inline size_t skip_ws(std::string_view s, size_t p) {
    while (p < s.size() && is_ws(s[p])) ++p;
    return p;
}

enum class Scan { Ok, Incomplete, Invalid };

struct Scanned {
    Scan status;
    size_t end;   // with Ok: one past the value
};
// The JSON value that starts at s[p] (no whitespace skipped before it).
Scanned scan_json(std::string_view s, size_t p);

// --- Reading a scanned (valid) value's parts.

// The text of a JSON string token, decoded; nullopt when it is not one.
std::optional<std::string> decode_string(std::string_view token);

struct Span {
    size_t b, e;
};
struct Member {
    std::string key;
    Span value;
};
// The members of the valid object at s[b].
std::vector<Member> members_of(std::string_view s, size_t b);
// The elements of the valid array at s[b].
std::vector<Span> elements_of(std::string_view s, size_t b);

}  // namespace ptxlm::tools::detail
