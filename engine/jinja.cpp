// Jinja values: Python's truthiness, equality, str() and repr(), JSON in
// (nlohmann::json) and out (Python's json.dumps, as HF's tojson calls it).
#include "engine/jinja.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "engine/jinja_ast.h"

namespace ptxlm::jinja {

const Value* Dict::find(std::string_view key) const {
    for (const auto& [k, v] : items)
        if (k.is_string() && k.as_string() == key) return &v;
    return nullptr;
}

const Value* Dict::find_key(const Value& key) const {
    for (const auto& [k, v] : items)
        if (k == key) return &v;
    return nullptr;
}

void Dict::set(Value key, Value v) {
    for (auto& [k, old] : items) {
        if (k == key) {
            old = std::move(v);
            return;
        }
    }
    items.emplace_back(std::move(key), std::move(v));
}

Value Value::dict() { return Value(std::make_shared<Dict>()); }

Value Value::code(std::string s) {
    const size_t n = s.size();
    return n ? marked(std::move(s), Spans{{0, n}}) : Value(std::move(s));
}

Value Value::marked(std::string s, Spans code) {
    Value v(std::move(s));
    if (!code.empty()) v.code_ = std::make_shared<const Spans>(std::move(code));
    return v;
}

namespace detail {

namespace {
void add_span(Spans& spans, size_t b, size_t e) {
    if (b >= e) return;
    if (!spans.empty() && spans.back().second == b) spans.back().second = e;
    else spans.emplace_back(b, e);
}
}  // namespace

void MarkedText::append_code(std::string_view s) {
    add_span(code, text.size(), text.size() + s.size());
    text += s;
}

void MarkedText::append_data(std::string_view s) { text += s; }

void MarkedText::append(const Value& v) {
    switch (v.type()) {
        case Value::Type::String: append_range(v, 0, v.as_string().size()); break;
        case Value::Type::None:
        case Value::Type::Bool:
        case Value::Type::Int:
        case Value::Type::Float: append_code(v.str()); break;
        default: append_data(v.str()); break;
    }
}

void MarkedText::append_range(const Value& v, size_t b, size_t e) {
    const std::string& s = v.as_string();
    const size_t base = text.size();
    text.append(s, b, e - b);
    if (const Spans* c = v.code_spans())
        for (const auto& [cb, ce] : *c)
            if (cb < e && ce > b) add_span(code, base + std::max(cb, b) - b, base + std::min(ce, e) - b);
}

Value MarkedText::take() { return Value::marked(std::move(text), std::move(code)); }

}  // namespace detail

bool Value::truthy() const {
    switch (type()) {
        case Type::Undefined:
        case Type::None: return false;
        case Type::Bool: return as_bool();
        case Type::Int: return as_int() != 0;
        case Type::Float: return as_float() != 0.0;
        case Type::String: return !as_string().empty();
        case Type::List: return !as_list().empty();
        case Type::Dict: return as_dict().is_namespace || !as_dict().items.empty();
        case Type::Function:
        case Type::Generator: return true;
    }
    return false;
}

bool Value::operator==(const Value& o) const {
    const bool num_a = is_number() || is_bool(), num_b = o.is_number() || o.is_bool();
    if (num_a && num_b) {
        if ((is_int() || is_bool()) && (o.is_int() || o.is_bool()))
            return (is_int() ? as_int() : int64_t(as_bool())) == (o.is_int() ? o.as_int() : int64_t(o.as_bool()));
        return as_number() == o.as_number();
    }
    if (type() != o.type()) return false;
    switch (type()) {
        case Type::Undefined:
        case Type::None: return true;
        case Type::String: return as_string() == o.as_string();
        case Type::List: {
            const List &a = as_list(), &b = o.as_list();
            if (seq_kind() != o.seq_kind()) return false;   // (1, 2) != [1, 2]
            if (seq_kind() == Seq::Values) return &a == &b;   // dict_values compare by identity
            if (a.size() != b.size()) return false;
            if (is_dict_view()) {   // keys and items views compare as sets
                for (const Value& x : a)
                    if (std::find(b.begin(), b.end(), x) == b.end()) return false;
                return true;
            }
            for (size_t i = 0; i < a.size(); ++i)
                if (!(a[i] == b[i])) return false;
            return true;
        }
        case Type::Dict: {
            const Dict &a = as_dict(), &b = o.as_dict();
            if (a.is_namespace || b.is_namespace) return &a == &b;
            if (a.items.size() != b.items.size()) return false;
            for (const auto& [k, v] : a.items) {
                const Value* w = b.find_key(k);
                if (!w || !(v == *w)) return false;
            }
            return true;
        }
        case Type::Function: return &as_function() == &o.as_function();
        case Type::Generator: return &generator_items() == &o.generator_items();
        default: return false;
    }
}

namespace detail {

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string s(buf, r.ptr);
    // s = [-]d[.ddd]e[+-]XX: the shortest digits that round-trip.
    std::string sign;
    if (s[0] == '-') {
        sign = "-";
        s.erase(0, 1);
    }
    const size_t epos = s.find('e');
    const int exp = std::stoi(s.substr(epos + 1));
    std::string digits;
    for (size_t i = 0; i < epos; ++i)
        if (s[i] != '.') digits += s[i];
    if (exp >= -4 && exp < 16) {
        std::string out;
        if (exp < 0) {
            out = "0." + std::string(size_t(-exp - 1), '0') + digits;
        } else if (size_t(exp) + 1 >= digits.size()) {
            out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
        } else {
            out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
        }
        return sign + out;
    }
    std::string mant = digits.substr(0, 1);
    if (digits.size() > 1) mant += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return sign + mant + e;
}

namespace {
// Python's str.isprintable() is false for these non-ASCII code points, which
// repr() writes as escapes: C1 controls, non-ASCII spaces, line and paragraph
// separators, the format characters (Unicode 14, Python 3.11's) and private
// use. (Python also escapes unassigned code points, which would need the
// Unicode tables: those print as they are here.)
bool py_unprintable(uint32_t cp) {
    return (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD || (cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD ||
           cp == 0x70F || cp == 0x890 || cp == 0x891 || cp == 0x8E2 || cp == 0x1680 || cp == 0x180E ||
           (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 ||
           (cp >= 0xD800 && cp <= 0xF8FF) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF ||
           cp == 0x110BD || cp == 0x110CD || (cp >= 0x13430 && cp <= 0x13438) || (cp >= 0x1BCA0 && cp <= 0x1BCA3) ||
           (cp >= 0x1D173 && cp <= 0x1D17A) || (cp >= 0xE0000 && cp <= 0xE00FF) || cp >= 0xF0000;
}
}  // namespace

std::string string_repr(const std::string& s, bool ascii) {
    const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
    const char q = has_single && !has_double ? '"' : '\'';
    std::string out(1, q);
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        const unsigned char u = static_cast<unsigned char>(c);
        if (u >= 0x80) {
            uint32_t cp;
            const size_t n = utf8_decode(s, i, cp);
            if (!ascii && !py_unprintable(cp)) {
                out.append(s, i, n);
            } else {
                char b[16];
                if (cp < 0x100) std::snprintf(b, sizeof b, "\\x%02x", unsigned(cp));
                else if (cp < 0x10000) std::snprintf(b, sizeof b, "\\u%04x", unsigned(cp));
                else std::snprintf(b, sizeof b, "\\U%08x", unsigned(cp));
                out += b;
            }
            i += n - 1;
        } else if (c == q || c == '\\') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (u < 0x20 || u == 0x7f) {
            char b[8];
            std::snprintf(b, sizeof b, "\\x%02x", u);
            out += b;
        } else {
            out += c;
        }
    }
    return out + q;
}

// Python's json.dumps string encoding.
void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    out += '"';
    for (size_t i = 0; i < s.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        switch (c) {
            case '"': out += "\\\""; continue;
            case '\\': out += "\\\\"; continue;
            case '\n': out += "\\n"; continue;
            case '\r': out += "\\r"; continue;
            case '\t': out += "\\t"; continue;
            case '\b': out += "\\b"; continue;
            case '\f': out += "\\f"; continue;
            default: break;
        }
        char b[16];
        if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
            std::snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
        } else if (c >= 0x80 && ensure_ascii) {
            uint32_t cp = 0;
            const size_t n = utf8_decode(s, i, cp);
            i += n - 1;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                std::snprintf(b, sizeof b, "\\u%04x", cp);
            }
            out += b;
        } else {
            out += char(c);
        }
    }
    out += '"';
}

size_t utf8_decode(const std::string& s, size_t i, uint32_t& cp) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    for (size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) n = 1;
    if (n == 1) {
        cp = c;
        return 1;
    }
    cp = c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    return n;
}

void json_dump(std::string& out, const Value& v, const JsonStyle& st, int level) {
    switch (v.type()) {
        case Value::Type::None: out += "null"; return;
        case Value::Type::Bool: out += v.as_bool() ? "true" : "false"; return;
        case Value::Type::Int: out += std::to_string(v.as_int()); return;
        case Value::Type::Float: {
            const double d = v.as_float();
            out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
            return;
        }
        case Value::Type::String: json_string(out, v.as_string(), st.ensure_ascii); return;
        case Value::Type::List:
        case Value::Type::Dict: {
            if (v.is_dict_view()) throw Error(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
            const bool is_list = v.is_list();
            if (!is_list && v.as_dict().is_namespace) throw Error("Object of type Namespace is not JSON serializable");
            const size_t n = is_list ? v.as_list().size() : v.as_dict().items.size();
            if (n == 0) {
                out += is_list ? "[]" : "{}";
                return;
            }
            if (level > 200) throw Error("tojson: value nests too deeply");
            out += is_list ? '[' : '{';
            std::string newline;
            if (st.indent) newline = "\n" + [&] { std::string s; for (int k = 0; k <= level; ++k) s += *st.indent; return s; }();
            out += newline;
            std::vector<size_t> order(n);
            for (size_t k = 0; k < n; ++k) order[k] = k;
            if (!is_list && st.sort_keys) {
                const auto& items = v.as_dict().items;
                std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return items[a].first.str() < items[b].first.str(); });
            }
            for (size_t k = 0; k < n; ++k) {
                if (k) out += st.item_sep + newline;
                if (is_list) {
                    json_dump(out, v.as_list()[k], st, level + 1);
                } else {
                    const auto& [key, val] = v.as_dict().items[order[k]];
                    // json.dumps writes non-string keys as strings.
                    if (key.is_string()) json_string(out, key.as_string(), st.ensure_ascii);
                    else if (key.is_none()) out += "\"null\"";
                    else if (key.is_bool()) out += key.as_bool() ? "\"true\"" : "\"false\"";
                    else if (key.is_number()) {
                        out += '"';
                        json_dump(out, key, st, level);
                        out += '"';
                    }
                    else throw Error(std::string("keys must be str, int, float, bool or None"));
                    out += st.key_sep;
                    json_dump(out, val, st, level + 1);
                }
            }
            if (st.indent) {
                out += '\n';
                for (int k = 0; k < level; ++k) out += *st.indent;
            }
            out += is_list ? ']' : '}';
            return;
        }
        case Value::Type::Undefined: throw Error("Object of type Undefined is not JSON serializable");
        case Value::Type::Function: throw Error("Object of type function is not JSON serializable");
        case Value::Type::Generator: throw Error("Object of type generator is not JSON serializable");
    }
}

}  // namespace detail

std::string Value::undefined_message() const {
    const Undefined& u = std::get<Undefined>(v_);
    return u.hint.empty() ? "'" + u.name + "' is undefined" : u.hint;
}

std::string Value::str() const {
    switch (type()) {
        case Type::Undefined: return "";
        case Type::None: return "None";
        case Type::Bool: return as_bool() ? "True" : "False";
        case Type::Int: return std::to_string(as_int());
        case Type::Float: return detail::float_repr(as_float());
        case Type::String: return as_string();
        case Type::Dict:
            if (as_dict().is_namespace) return "<Namespace " + repr() + ">";
            return repr();
        case Type::List: return repr();
        case Type::Function: return as_function().repr.empty() ? "<function " + as_function().name + ">" : as_function().repr;
        case Type::Generator: return "<generator object>";
    }
    return "";
}

std::string Value::repr() const {
    switch (type()) {
        case Type::Undefined: return "Undefined";
        case Type::String: return detail::string_repr(as_string());
        case Type::List: {
            // [1, 'a'], (1, 'a'), (1,) and dict_items([('a', 1)]).
            const Seq kind = seq_kind();
            const List& l = as_list();
            std::string s = kind == Seq::Tuple ? "(" : "[";
            for (size_t i = 0; i < l.size(); ++i) s += (i ? ", " : "") + l[i].repr();
            if (kind == Seq::Tuple) return s + (l.size() == 1 ? ",)" : ")");
            s += "]";
            if (is_dict_view()) return std::string(detail::type_name(*this)) + "(" + s + ")";
            return s;
        }
        case Type::Dict: {
            std::string s = "{";
            bool first = true;
            for (const auto& [k, v] : as_dict().items) {
                s += (first ? "" : ", ") + k.repr() + ": " + v.repr();
                first = false;
            }
            return s + "}";
        }
        default: return str();
    }
}

template <class J>
static Value convert(const J& j, int depth) {
    if (depth > 512) throw Error("JSON value nests too deeply");
    switch (j.type()) {
        case nlohmann::json::value_t::null: return Value(nullptr);
        case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
        case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
        case nlohmann::json::value_t::number_unsigned: {
            const auto u = j.template get<uint64_t>();
            return u > uint64_t(INT64_MAX) ? Value(double(u)) : Value(int64_t(u));
        }
        case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
        case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
        case nlohmann::json::value_t::array: {
            List l;
            l.reserve(j.size());
            for (const auto& e : j) l.push_back(convert(e, depth + 1));
            return Value(std::move(l));
        }
        case nlohmann::json::value_t::object: {
            auto d = std::make_shared<Dict>();
            for (auto it = j.begin(); it != j.end(); ++it) d->items.emplace_back(Value(it.key()), convert(it.value(), depth + 1));
            return Value(std::move(d));
        }
        default: return Value(nullptr);
    }
}

Value from_json(const nlohmann::json& j) { return convert(j, 0); }
Value from_json(const nlohmann::ordered_json& j) { return convert(j, 0); }

}  // namespace ptxlm::jinja
