// Jinja lexer: template text to tokens. It reproduces jinja2's whitespace
// rules byte for byte (trim_blocks, lstrip_blocks, the '-' and '+' markers,
// newlines normalised to \n and one final newline dropped), since that is
// where renderings of real templates differ.
#include <cctype>
#include <cerrno>
#include <cstring>

#include "engine/jinja_ast.h"
#include "engine/utf8.h"

namespace ptxlm::jinja::detail {
namespace {

[[noreturn]] void fail(int line, const std::string& msg) { throw Error("line " + std::to_string(line) + ": " + msg); }

// Python's \s and str.isspace() take Unicode whitespace too (U+00A0, ...):
// the byte length of a whitespace character at s[i], else 0.
size_t space_at(const std::string& s, size_t i) {
    uint32_t cp;
    const size_t n = utf8_decode(s, i, cp);
    return is_py_space(cp) ? n : 0;
}
// The same for the character that ends at s[end - 1].
size_t space_before(const std::string& s, size_t end) {
    for (size_t n = 1; n <= 4 && n <= end; ++n) {
        if ((static_cast<unsigned char>(s[end - n]) & 0xC0) == 0x80) continue;   // inside a sequence
        return space_at(s, end - n) == n ? n : 0;
    }
    return 0;
}

class Lexer {
public:
    explicit Lexer(std::string_view source) {
        // jinja2 normalises newlines to \n and drops one final newline
        // (keep_trailing_newline=False).
        src_.reserve(source.size());
        for (size_t i = 0; i < source.size(); ++i) {
            if (source[i] == '\r') {
                src_ += '\n';
                if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
            } else {
                src_ += source[i];
            }
        }
        if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    }

    std::vector<Token> run() {
        while (pos_ < src_.size()) {
            const size_t start = find_tag(pos_);
            if (start == std::string::npos) {
                text(src_.substr(pos_), pos_);
                break;
            }
            std::string data = src_.substr(pos_, start - pos_);
            const char type = src_[start + 1];          // '{', '%' or '#'
            const char sign = start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
            const size_t raw_body = type == '%' ? raw_begin(start) : std::string::npos;
            text(strip_before(std::move(data), sign, type != '{', pos_), pos_);
            line_ += count_lines(pos_, start);
            pos_ = start + 2 + (sign ? 1 : 0);
            if (raw_body != std::string::npos) {
                raw(raw_body);
            } else if (type == '#') {
                comment();
            } else {
                tag(type == '{');
            }
        }
        out_.push_back({Token::Kind::End, "", 0, 0, line_});
        return std::move(out_);
    }

private:
    std::string src_;
    size_t pos_ = 0;
    int line_ = 1;
    std::vector<Token> out_;

    int count_lines(size_t from, size_t to) const {
        int n = 0;
        for (size_t i = from; i < to && i < src_.size(); ++i) n += src_[i] == '\n';
        return n;
    }
    size_t find_tag(size_t from) const {
        for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
            if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
        }
        return std::string::npos;
    }
    void text(std::string s, size_t at) {
        if (!s.empty()) out_.push_back({Token::Kind::Text, std::move(s), 0, 0, line_ + count_lines(at, at)});
    }
    // The text before a tag: '-' strips all whitespace; lstrip_blocks strips
    // the spaces between the line start and a block or comment tag.
    std::string strip_before(std::string data, char sign, bool lstrip, size_t data_pos) const {
        if (sign == '-') {
            size_t n = data.size();
            while (n > 0 && space_before(data, n)) n -= space_before(data, n);
            data.resize(n);
        } else if (sign != '+' && lstrip) {
            const size_t nl = data.rfind('\n');
            const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
            const bool line_starting = data_pos == 0 || src_[data_pos - 1] == '\n';
            if ((l_pos > 0 || line_starting) && l_pos < data.size()) {
                bool all_space = true;
                for (size_t i = l_pos; i < data.size() && all_space;) {
                    const size_t n = space_at(data, i);
                    all_space = n > 0;
                    i += n;
                }
                if (all_space) data.resize(l_pos);
            }
        }
        return data;
    }
    // After a block or comment tag: '-' strips all whitespace, '+' nothing,
    // else trim_blocks drops one newline.
    void strip_after(char sign, bool trim) {
        if (sign == '-') {
            while (pos_ < src_.size() && space_at(src_, pos_)) {
                line_ += src_[pos_] == '\n';
                pos_ += space_at(src_, pos_);
            }
        } else if (sign != '+' && trim && pos_ < src_.size() && src_[pos_] == '\n') {
            ++pos_;
            ++line_;
        }
    }
    // "{%-? raw -?%}" at start: the position of the raw body, else npos.
    size_t raw_begin(size_t start) const {
        size_t i = start + 2;
        if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
        while (i < src_.size() && space_at(src_, i)) i += space_at(src_, i);
        if (src_.compare(i, 3, "raw") != 0) return std::string::npos;
        i += 3;
        while (i < src_.size() && space_at(src_, i)) i += space_at(src_, i);
        if (src_.compare(i, 3, "-%}") == 0) {
            i += 3;
            while (i < src_.size() && space_at(src_, i)) i += space_at(src_, i);
            return i;
        }
        if (src_.compare(i, 2, "%}") == 0) return i + 2;
        return std::string::npos;
    }
    void raw(size_t body) {
        line_ += count_lines(pos_, body);
        for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
            size_t j = i + 2;
            const char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : 0;
            if (sign) ++j;
            while (j < src_.size() && space_at(src_, j)) j += space_at(src_, j);
            if (src_.compare(j, 6, "endraw") != 0) continue;
            j += 6;
            while (j < src_.size() && space_at(src_, j)) j += space_at(src_, j);
            char end_sign = 0;
            if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) end_sign = src_[j++];
            if (src_.compare(j, 2, "%}") != 0) continue;
            text(strip_before(src_.substr(body, i - body), sign, true, body), body);
            line_ += count_lines(body, j + 2);
            pos_ = j + 2;
            strip_after(end_sign, true);
            return;
        }
        fail(line_, "missing end of raw directive");
    }
    void comment() {
        for (size_t i = src_.find("#}", pos_); i != std::string::npos; i = src_.find("#}", i + 1)) {
            const char sign = i > pos_ && (src_[i - 1] == '-' || src_[i - 1] == '+') ? src_[i - 1] : 0;
            line_ += count_lines(pos_, i + 2);
            pos_ = i + 2;
            strip_after(sign, true);
            return;
        }
        fail(line_, "missing end of comment tag");
    }
    // The tokens of a {{ }} or {% %} tag, up to and including its end.
    void tag(bool variable) {
        out_.push_back({variable ? Token::Kind::VarBegin : Token::Kind::BlockBegin, "", 0, 0, line_});
        const char close = variable ? '}' : '%';
        std::vector<char> balance;
        while (true) {
            if (pos_ >= src_.size()) fail(line_, variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
            // The end of the tag counts only where brackets are balanced.
            if (balance.empty()) {
                char sign = 0;
                size_t i = pos_;
                if (src_[i] == '-' || src_[i] == '+') sign = src_[i++];
                if (!(variable && sign == '+') && src_.compare(i, 2, std::string{close, '}'}) == 0) {
                    out_.push_back({variable ? Token::Kind::VarEnd : Token::Kind::BlockEnd, "", 0, 0, line_});
                    pos_ = i + 2;
                    if (variable) {
                        if (sign == '-') strip_after('-', false);
                    } else {
                        strip_after(sign, true);
                    }
                    return;
                }
            }
            const char c = src_[pos_];
            if (const size_t n = space_at(src_, pos_)) {
                line_ += c == '\n';
                pos_ += n;
            } else if (std::isdigit(static_cast<unsigned char>(c))) {
                number();
            } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                const size_t s = pos_;
                while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
                out_.push_back({Token::Kind::Name, src_.substr(s, pos_ - s), 0, 0, line_});
            } else if (c == '\'' || c == '"') {
                string(c);
            } else {
                op(balance);
            }
        }
    }
    void number() {
        const size_t s = pos_;
        auto digits = [&] {
            while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) ||
                                         (src_[pos_] == '_' && pos_ + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1])))))
                ++pos_;
        };
        digits();
        bool is_float = false;
        if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
            ++pos_;
            digits();
            is_float = true;
        }
        if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
            size_t e = pos_ + 1;
            if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
            if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
                pos_ = e;
                digits();
                is_float = true;
            }
        }
        std::string t;
        for (size_t i = s; i < pos_; ++i)
            if (src_[i] != '_') t += src_[i];
        Token tok{is_float ? Token::Kind::Float : Token::Kind::Int, t, 0, 0, line_};
        if (is_float) {
            tok.f = std::strtod(t.c_str(), nullptr);
        } else {
            errno = 0;
            tok.i = std::strtoll(t.c_str(), nullptr, 10);
            if (errno == ERANGE) fail(line_, "integer literal out of range: " + t);
        }
        out_.push_back(std::move(tok));
    }
    // A string literal with Python's escapes (jinja2 decodes unicode-escape).
    void string(char quote) {
        const int line = line_;
        std::string s;
        ++pos_;
        while (true) {
            if (pos_ >= src_.size()) fail(line, "unterminated string literal");
            const char c = src_[pos_++];
            if (c == quote) break;
            line_ += c == '\n';
            if (c != '\\') {
                s += c;
                continue;
            }
            if (pos_ >= src_.size()) fail(line, "unterminated string literal");
            const char e = src_[pos_++];
            auto hex = [&](int n) {
                uint32_t v = 0;
                for (int k = 0; k < n; ++k) {
                    if (pos_ >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[pos_]))) fail(line, "bad escape in string literal");
                    const char h = src_[pos_++];
                    v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(h) - 'a' + 10);
                }
                if (v > 0x10FFFF) fail(line, "bad escape in string literal");
                append_utf8(s, v);
            };
            switch (e) {
                case 'n': s += '\n'; break;
                case 't': s += '\t'; break;
                case 'r': s += '\r'; break;
                case 'b': s += '\b'; break;
                case 'f': s += '\f'; break;
                case 'v': s += '\v'; break;
                case 'a': s += '\a'; break;
                case '0': s += '\0'; break;
                case '\\': s += '\\'; break;
                case '\'': s += '\''; break;
                case '"': s += '"'; break;
                case '\n': ++line_; break;   // line continuation
                case 'x': hex(2); break;
                case 'u': hex(4); break;
                case 'U': hex(8); break;
                default: s += '\\'; s += e; line_ += e == '\n';
            }
        }
        out_.push_back({Token::Kind::String, std::move(s), 0, 0, line});
    }
    void op(std::vector<char>& balance) {
        static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
        for (const char* t : two) {
            if (src_.compare(pos_, 2, t) == 0) {
                out_.push_back({Token::Kind::Op, t, 0, 0, line_});
                pos_ += 2;
                return;
            }
        }
        const char c = src_[pos_];
        if (!std::strchr("+-*/%~<>=.,:|()[]{}", c)) fail(line_, std::string("unexpected character '") + c + "'");
        if (c == '(' || c == '[' || c == '{') balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        if (c == ')' || c == ']' || c == '}') {
            if (balance.empty() || balance.back() != c) fail(line_, std::string("unexpected '") + c + "'");
            balance.pop_back();
        }
        out_.push_back({Token::Kind::Op, std::string(1, c), 0, 0, line_});
        ++pos_;
    }
};

}  // namespace

std::vector<Token> lex_template(std::string_view source) { return Lexer(source).run(); }

}  // namespace ptxlm::jinja::detail
