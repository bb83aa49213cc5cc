// Python's printf-style string formatting, `"%s and %d" % (a, b)`, as
// CPython's PyUnicode_Format does it: conversions s r a c d i u o x X e E f F
// g G and %%, the flags - + space # 0, a width and a precision (either may be
// *), and %(key)s over a mapping. Anything else is a template error.
//
// Marks: the format string's own bytes keep theirs; a plain %s (no width or
// precision) inserts its argument as ~ would (a string with its marks); what
// a conversion computes (numbers, padding, repr) is unmarked, as data.
#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/jinja_ast.h"

namespace ptxlm::jinja::detail {
namespace {

struct Spec {
    bool left = false, sign = false, blank = false, alt = false, zero = false;
    int64_t width = -1, prec = -1;
    char conv = 0;
};

// C's snprintf into a std::string (the %e/%f/%g digits; Python's agree, as
// both round the exact binary value correctly).
std::string c_format(const char* f, int prec, double x) {
    const int n = std::snprintf(nullptr, 0, f, prec, x);
    std::string out(size_t(n) + 1, '\0');
    std::snprintf(out.data(), out.size(), f, prec, x);
    out.resize(size_t(n));
    return out;
}

// The digits of |x| in base 8, 10 or 16.
std::string digits_of(uint64_t x, char conv) {
    const int base = conv == 'o' ? 8 : (conv == 'x' || conv == 'X') ? 16 : 10;
    const char* set = conv == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    std::string d;
    do {
        d.insert(d.begin(), set[x % uint64_t(base)]);
        x /= uint64_t(base);
    } while (x);
    return d;
}

// sign, prefix and body padded to the width, as CPython's formatter pads a number.
std::string pad_number(const Spec& s, bool negative, const std::string& prefix, const std::string& body) {
    const std::string sign = negative ? "-" : s.sign ? "+" : s.blank ? " " : "";
    const size_t len = sign.size() + prefix.size() + body.size();
    if (s.width < 0 || size_t(s.width) <= len) return sign + prefix + body;
    const std::string fill(size_t(s.width) - len, s.zero && !s.left ? '0' : ' ');
    if (s.left) return sign + prefix + body + fill;
    if (s.zero) return sign + prefix + fill + body;
    return fill + sign + prefix + body;
}

class Formatter {
public:
    Formatter(Renderer& r, const Value& fmt, const Value& args) : r_(r), fmt_(fmt), f_(fmt.as_string()), args_(args) {
        // As CPython: a tuple gives the arguments in order; anything else is
        // the one argument, and a mapping (anything with [] but a str or a
        // tuple: a dict, a list, jinja2's Undefined) also serves %(key)s and
        // allows arguments left over.
        if (args.is_tuple()) {
            arglen_ = int64_t(args.as_list().size());
            argidx_ = 0;
        }
        mapping_ = (args.is_list() && args.seq_kind() == Value::Seq::List) || (args.is_dict() && !args.as_dict().is_namespace) ||
                   args.is_undefined();
        if (mapping_) dict_ = args;
    }

    Value run() {
        size_t lit = 0;   // the start of the literal text not yet written
        for (size_t i = 0; i < f_.size(); ++i) {
            if (f_[i] != '%') continue;
            out_.append_range(fmt_, lit, i);
            if (i + 1 < f_.size() && f_[i + 1] == '%') {   // %%
                out_.append_range(fmt_, i + 1, i + 2);
                lit = ++i + 1;
                continue;
            }
            i = conversion(i);
            lit = i + 1;
            r_.check_size(out_.text.size());
        }
        out_.append_range(fmt_, lit, f_.size());
        if (argidx_ < arglen_ && !mapping_) r_.fail("not all arguments converted during string formatting");
        if (fmt_.is_markup()) return Value::markup(std::move(out_.text), std::move(out_.code));
        return out_.take();
    }

private:
    Renderer& r_;
    const Value& fmt_;
    const std::string& f_;
    Value args_;                 // what the next argument comes from (a %(key) replaces it)
    int64_t arglen_ = -1, argidx_ = -2;
    bool mapping_ = false;
    Value dict_;                 // the mapping %(key) reads (the arguments, when a mapping)
    MarkedText out_;

    [[noreturn]] void incomplete() { r_.fail("incomplete format"); }

    Value next_arg() {
        if (argidx_ >= arglen_) r_.fail("not enough arguments for format string");
        const int64_t i = argidx_++;
        return arglen_ < 0 ? args_ : args_.as_list()[size_t(i)];
    }

    int64_t star() {
        const Value v = next_arg();
        if (!v.is_int() && !v.is_bool()) r_.fail("* wants int");
        return v.is_int() ? v.as_int() : int64_t(v.as_bool());
    }

    int64_t number(size_t& i) {
        int64_t n = 0;
        while (i < f_.size() && f_[i] >= '0' && f_[i] <= '9') {
            n = n * 10 + (f_[i++] - '0');
            if (n > int64_t(r_.opt.limits.max_output)) r_.check_size(size_t(n));
        }
        return n;
    }

    // %(key): the argument becomes mapping[key].
    void key(size_t& i) {
        size_t depth = 1, b = ++i;
        while (i < f_.size() && depth) {
            depth += f_[i] == '(';
            depth -= f_[i] == ')';
            ++i;
        }
        if (depth) r_.fail("incomplete format key");
        const std::string k = f_.substr(b, i - 1 - b);
        if (!mapping_) r_.fail("format requires a mapping");
        if (dict_.is_undefined()) r_.fail(dict_.undefined_message());
        if (!dict_.is_dict()) r_.fail(std::string(type_name(dict_)) + " indices must be integers or slices, not str");
        const Value* v = dict_.as_dict().find(k);
        if (!v) r_.fail("format: no key '" + k + "' in the mapping");
        args_ = *v;
        arglen_ = -1;
        argidx_ = -2;
    }

    // The conversion whose '%' is at f_[i]: writes it, returns the index of its last character.
    size_t conversion(size_t i) {
        const size_t start = i++;
        Spec s;
        if (i < f_.size() && f_[i] == '(') key(i);
        for (; i < f_.size(); ++i) {
            const char c = f_[i];
            if (c == '-') s.left = true;
            else if (c == '+') s.sign = true;
            else if (c == ' ') s.blank = true;
            else if (c == '#') s.alt = true;
            else if (c == '0') s.zero = true;
            else break;
        }
        if (i < f_.size() && f_[i] == '*') {
            ++i;
            s.width = star();
            if (s.width < 0) {
                s.left = true;
                s.width = -s.width;
            }
        } else {
            s.width = i < f_.size() && f_[i] >= '0' && f_[i] <= '9' ? number(i) : -1;
        }
        if (i < f_.size() && f_[i] == '.') {
            ++i;
            if (i < f_.size() && f_[i] == '*') {
                ++i;
                s.prec = std::max<int64_t>(0, star());
            } else {
                s.prec = number(i);
            }
        }
        while (i < f_.size() && (f_[i] == 'h' || f_[i] == 'l' || f_[i] == 'L')) ++i;   // length modifiers: ignored, as in Python
        if (i >= f_.size()) incomplete();
        s.conv = f_[i];
        if (s.width > 0) r_.check_size(out_.text.size() + size_t(s.width));
        if (s.prec > 0) r_.check_size(out_.text.size() + size_t(s.prec));
        switch (s.conv) {
            case 's': case 'r': case 'a': text(s, next_arg()); break;
            case 'c': character(s, next_arg()); break;
            case 'd': case 'i': case 'u': case 'o': case 'x': case 'X': integer(s, next_arg()); break;
            case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': floating(s, next_arg()); break;
            default: {
                const unsigned char u = static_cast<unsigned char>(s.conv);
                char b[96];
                if (u >= 0x20 && u < 0x7f)
                    std::snprintf(b, sizeof b, "unsupported format character '%c' (0x%x) at index %zu", s.conv, unsigned(u),
                                  utf8_length(f_.substr(0, i)));
                else
                    std::snprintf(b, sizeof b, "unsupported format character (byte 0x%x) at index %zu", unsigned(u), utf8_length(f_.substr(0, i)));
                r_.fail(std::string(b) + " (in \"" + f_.substr(start, i + 1 - start) + "\")");
            }
        }
        return i;
    }

    // Padding to the width in characters, with spaces ('0' does not apply to text).
    void pad_text(const Spec& s, size_t len, bool before) {
        if (s.width > 0 && size_t(s.width) > len && s.left != before) out_.append_data(std::string(size_t(s.width) - len, ' '));
    }

    void text(const Spec& s, const Value& v) {
        const bool markup = fmt_.is_markup();
        if (s.conv == 's' && s.width < 0 && s.prec < 0 && (!markup || v.is_markup())) {
            out_.append(v);   // as ~ would insert it, marks and all
            return;
        }
        std::string t = s.conv == 's' ? v.str() : v.repr();
        if (s.conv == 'a') t = v.is_string() ? string_repr(v.as_string(), true) : ascii_escape(t);
        if (markup && !(s.conv == 's' && v.is_markup())) t = html_escape(t);   // Markup % x escapes x
        size_t len = utf8_length(t);
        if (s.prec >= 0 && size_t(s.prec) < len) {   // the first prec characters
            size_t at = 0;
            for (int64_t k = 0; k < s.prec; ++k) {
                uint32_t cp;
                at += utf8_decode(t, at, cp);
            }
            t.resize(at);
            len = size_t(s.prec);
        }
        pad_text(s, len, true);
        if (s.conv == 's' && v.is_string() && t == v.as_string().substr(0, t.size()) && !markup) out_.append_range(v, 0, t.size());
        else out_.append_data(t);
        pad_text(s, len, false);
    }

    // ascii() of a repr that is not a string's own: the non-ASCII characters escaped.
    static std::string ascii_escape(const std::string& t) {
        std::string out;
        for (size_t i = 0; i < t.size();) {
            uint32_t cp;
            const size_t n = utf8_decode(t, i, cp);
            if (cp < 0x80) {
                out += t[i];
            } else {
                char b[16];
                std::snprintf(b, sizeof b, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", unsigned(cp));
                out += b;
            }
            i += n;
        }
        return out;
    }

    void character(const Spec& s, const Value& v) {
        std::string t;
        if (v.is_int() || v.is_bool()) {
            const int64_t cp = v.is_int() ? v.as_int() : int64_t(v.as_bool());
            if (cp < 0 || cp >= 0x110000) r_.fail("%c arg not in range(0x110000)");
            char b[8];
            const uint32_t c = uint32_t(cp);
            if (c < 0x80) {
                b[0] = char(c), b[1] = 0;
            } else if (c < 0x800) {
                b[0] = char(0xC0 | (c >> 6)), b[1] = char(0x80 | (c & 0x3F)), b[2] = 0;
            } else if (c < 0x10000) {
                b[0] = char(0xE0 | (c >> 12)), b[1] = char(0x80 | ((c >> 6) & 0x3F)), b[2] = char(0x80 | (c & 0x3F)), b[3] = 0;
            } else {
                b[0] = char(0xF0 | (c >> 18)), b[1] = char(0x80 | ((c >> 12) & 0x3F)), b[2] = char(0x80 | ((c >> 6) & 0x3F));
                b[3] = char(0x80 | (c & 0x3F)), b[4] = 0;
            }
            t.assign(b, c == 0 ? 1 : std::char_traits<char>::length(b));
        } else if (v.is_string() && utf8_length(v.as_string()) == 1) {
            t = v.as_string();
        } else {
            if (v.is_undefined()) r_.fail(v.undefined_message());
            r_.fail("%c requires int or char");
        }
        pad_text(s, 1, true);
        out_.append_data(t);
        pad_text(s, 1, false);
    }

    void integer(const Spec& s, const Value& v) {
        if (v.is_undefined()) r_.fail(v.undefined_message());
        const bool decimal = s.conv == 'd' || s.conv == 'i' || s.conv == 'u';
        bool negative = false;
        std::string digits;
        if (v.is_int() || v.is_bool()) {
            const int64_t x = v.is_int() ? v.as_int() : int64_t(v.as_bool());
            negative = x < 0;
            digits = digits_of(negative ? uint64_t(0) - uint64_t(x) : uint64_t(x), s.conv);
        } else if (v.is_float() && decimal) {   // int(x): truncated toward zero
            const double x = v.as_float();
            if (std::isnan(x)) r_.fail("cannot convert float NaN to integer");
            if (std::isinf(x)) r_.fail("cannot convert float infinity to integer");
            const double t = std::trunc(x);
            negative = t < 0;
            digits = c_format("%.*f", 0, std::fabs(t));   // exact: every double this large is an integer
        } else {
            r_.fail("%" + std::string(1, s.conv) + " format: " + (decimal ? "a real number" : "an integer") + " is required, not " +
                    type_name(v));
        }
        if (s.prec > int64_t(digits.size())) digits.insert(0, size_t(s.prec) - digits.size(), '0');
        const std::string prefix = !s.alt ? "" : s.conv == 'o' ? "0o" : s.conv == 'x' ? "0x" : s.conv == 'X' ? "0X" : "";
        out_.append_data(pad_number(s, negative, prefix, digits));
    }

    void floating(const Spec& s, const Value& v) {
        if (v.is_undefined()) r_.fail(v.undefined_message());
        if (!v.is_number() && !v.is_bool()) r_.fail(std::string("must be real number, not ") + type_name(v));
        const double x = v.as_number();
        const bool upper = s.conv == 'E' || s.conv == 'F' || s.conv == 'G';
        std::string body;
        if (std::isnan(x)) {
            body = upper ? "NAN" : "nan";
        } else if (std::isinf(x)) {
            body = upper ? "INF" : "inf";
        } else {
            const std::string f = std::string(s.alt ? "%#.*" : "%.*") + s.conv;   // '#': keep the point (and %g's zeros)
            body = c_format(f.c_str(), int(std::min<int64_t>(s.prec < 0 ? 6 : s.prec, INT32_MAX)), std::fabs(x));
        }
        out_.append_data(pad_number(s, !std::isnan(x) && std::signbit(x), "", body));
    }
};

}  // namespace

Value percent_format(Renderer& r, const Value& fmt, const Value& args) {
    r.step();
    return Formatter(r, fmt, args).run();
}

}  // namespace ptxlm::jinja::detail
