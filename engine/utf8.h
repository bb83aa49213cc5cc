// UTF-8 encoding of one code point, shared by the tokenizer, the Jinja lexer
// and the JSON Schema compiler (header-only: the grammar library uses it
// without the rest of the engine).
#pragma once

#include <cstdint>
#include <string>

namespace ptxlm {

// Appends cp (at most U+10FFFF; the caller checks) as UTF-8.
inline void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

inline std::string utf8_encode(uint32_t cp) {
    std::string s;
    append_utf8(s, cp);
    return s;
}

}  // namespace ptxlm
