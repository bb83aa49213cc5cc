// Jinja filters and tests, as jinja2 3.x defines them, with HF's tojson.
// An unknown filter or test is an error, as in jinja2.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "engine/jinja_ast.h"

namespace ptxlm::jinja::detail {
namespace {

bool flag(const Args& a, size_t i, std::string_view name, bool def) {
    const Value* v = arg(a, i, name);
    return v ? v->truthy() : def;
}

std::string lower_ascii(std::string s) {
    for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x80) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

Value fold(const Value& v, bool case_sensitive) { return !case_sensitive && v.is_string() ? Value(lower_ascii(v.as_string())) : v; }

// jinja2's make_attrgetter: a dotted path of item lookups, digits as indices.
Value attr_path(Renderer& r, const Value& v, const Value& path) {
    if (path.is_int()) return r.item(v, path);
    const std::string p = path.str();
    Value cur = v;
    size_t b = 0;
    while (true) {
        const size_t e = p.find('.', b);
        const std::string part = p.substr(b, e == std::string::npos ? std::string::npos : e - b);
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
        cur = r.item(cur, digits ? Value(int64_t(std::strtoll(part.c_str(), nullptr, 10))) : Value(part));
        if (e == std::string::npos) return cur;
        b = e + 1;
    }
}

std::string indent_text(const std::string& s0, const std::string& ind, bool first, bool blank) {
    const std::vector<std::string> lines = split_lines(s0 + "\n");
    std::string rv;
    if (blank) {
        for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
    } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
    }
    return first ? ind + rv : rv;
}

std::optional<double> parse_float(const std::string& s) {
    std::string t;
    for (char c : s)
        if (c != '_') t += c;
    size_t b = 0, e = t.size();
    while (b < e && std::isspace(static_cast<unsigned char>(t[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(t[e - 1]))) --e;
    t = t.substr(b, e - b);
    if (t.empty()) return std::nullopt;
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (end != t.c_str() + t.size()) return std::nullopt;
    return d;
}

double py_round(double x, int64_t digits) {
    if (!std::isfinite(x)) return x;
    if (digits == 0) return std::nearbyint(x);
    if (digits > 22 || digits < -22) return digits > 0 ? x : 0.0;
    const double p = std::pow(10.0, double(std::llabs(digits)));
    return digits > 0 ? std::nearbyint(x * p) / p : std::nearbyint(x / p) * p;
}

}  // namespace

bool Renderer::test(const std::string& name, const Value& v, Args& a) {
    const Value* x = arg(a, 0, "other");
    auto need = [&]() -> const Value& {
        if (!x) fail("test '" + name + "' takes an argument");
        return *x;
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.is_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_number() || v.is_bool();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "mapping") return v.is_dict() && !v.as_dict().is_namespace;
    if (name == "iterable") return v.is_list() || v.is_generator() || v.is_string() || (v.is_dict() && !v.as_dict().is_namespace) || v.is_undefined();
    if (name == "sequence")   // len() and [] both: a dict view has no []
        return v.is_undefined() || (v.is_list() && !v.is_dict_view()) || v.is_string() || (v.is_dict() && !v.as_dict().is_namespace);
    if (name == "callable") return v.is_function();
    if (name == "lower" || name == "upper") {   // str.islower()/isupper(): some cased letter, none of the other case
        bool cased = false;   // of str(value), as jinja2 tests it
        for (const char ch : v.str()) {
            const unsigned char c = static_cast<unsigned char>(ch);
            if (name == "lower" ? std::isupper(c) : std::islower(c)) return false;
            cased = cased || std::isalpha(c);
        }
        return cased;
    }
    if (name == "odd" || name == "even") return binary_op(*this, "%", v, Value(int64_t(2))) == Value(int64_t(name == "odd" ? 1 : 0));
    if (name == "divisibleby") {
        return binary_op(*this, "%", v, need()) == Value(int64_t(0));
    }
    if (name == "eq" || name == "equalto" || name == "==") return v == need();
    if (name == "ne" || name == "!=") return !(v == need());
    if (name == "lt" || name == "lessthan" || name == "<") return less_than(*this, v, need());
    if (name == "gt" || name == "greaterthan" || name == ">") return less_than(*this, need(), v);
    if (name == "le" || name == "<=") return !less_than(*this, need(), v);
    if (name == "ge" || name == ">=") return !less_than(*this, v, need());
    if (name == "in") {
        const Value& seq = arg(a, 0, "seq") ? *arg(a, 0, "seq") : need();
        if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
        if (seq.is_dict()) return seq.as_dict().find_key(v) != nullptr;
        for (const Value& e : iterate(seq))
            if (e == v) return true;
        return false;
    }
    if (name == "sameas") {
        const Value& o = need();
        if (v.type() != o.type()) return false;
        if (v.is_list()) return &v.as_list() == &o.as_list();
        if (v.is_dict()) return &v.as_dict() == &o.as_dict();
        if (v.is_none() || v.is_bool()) return v == o;
        return false;
    }
    fail("no test named '" + name + "'");
}

Value Renderer::lazy_filter(const std::string& name, const Value& v, Args& a) {
    auto seq = [&]() { return iterate(v); };
    if (name == "unique") return filter("\x01unique", v, a);
    if (name == "map") {
        List out;
        const Value* at = nullptr;
        for (const auto& [k, x] : a.kw)
            if (k == "attribute") at = &x;
        if (at) {
            const Value* def = nullptr;
            for (const auto& [k, x] : a.kw)
                if (k == "default") def = &x;
            if (v.truthy()) {
                for (const Value& e : seq()) {
                    Value x = attr_path(*this, e, *at);
                    out.push_back(x.is_undefined() && def ? *def : x);
                }
            }
            return Value::generator(std::move(out));
        }
        if (a.pos.empty() || !a.pos[0].is_string()) fail("map: expected a filter name or attribute=");
        const std::string f = a.pos[0].as_string();
        Args rest;
        rest.pos.assign(a.pos.begin() + 1, a.pos.end());
        rest.kw = a.kw;
        if (v.truthy()) {
            for (const Value& e : seq()) {
                step();
                Args copy = rest;
                out.push_back(filter(f, e, copy));
            }
        }
        return Value::generator(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
        const bool by_attr = name == "selectattr" || name == "rejectattr";
        const bool keep = name == "select" || name == "selectattr";
        size_t i = 0;
        Value path;
        if (by_attr) {
            if (a.pos.empty()) fail(name + ": expected an attribute name");
            path = a.pos[i++];
        }
        std::string t;
        if (i < a.pos.size()) t = a.pos[i++].str();
        Args targs;
        targs.pos.assign(a.pos.begin() + std::ptrdiff_t(std::min(i, a.pos.size())), a.pos.end());
        targs.kw = a.kw;
        List out;
        if (!v.truthy()) return Value::generator({});   // jinja2 checks `if seq:` first
        for (const Value& e : seq()) {
            step();
            const Value x = by_attr ? attr_path(*this, e, path) : e;
            Args copy = targs;
            const bool ok = t.empty() ? x.truthy() : test(t, x, copy);
            if (ok == keep) out.push_back(e);
        }
        return Value::generator(std::move(out));
    }
    fail("no filter named '" + name + "'");
}

Value Renderer::filter(const std::string& name, const Value& v, Args& a) {
    auto seq = [&]() { return iterate(v); };
    if (name == "tojson") {
        // HF: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
        JsonStyle st;
        st.ensure_ascii = flag(a, 0, "ensure_ascii", false);
        st.sort_keys = flag(a, 3, "sort_keys", false);
        if (const Value* ind = arg(a, 1, "indent"); ind && !ind->is_none()) {
            if (ind->is_int()) st.indent = std::string(size_t(std::clamp<int64_t>(ind->as_int(), 0, 256)), ' ');
            else if (ind->is_string()) st.indent = ind->as_string();
            else fail("tojson: indent must be an integer or a string");
            st.item_sep = ",";
        }
        if (const Value* sep = arg(a, 2, "separators"); sep && !sep->is_none()) {
            if (!sep->is_list() || sep->as_list().size() != 2 || !sep->as_list()[0].is_string() || !sep->as_list()[1].is_string())
                fail("tojson: separators must be a pair of strings");
            st.item_sep = sep->as_list()[0].as_string();
            st.key_sep = sep->as_list()[1].as_string();
        }
        std::string out;
        try {
            json_dump(out, v, st);
        } catch (const Error& e) {
            fail(std::string("tojson: ") + e.what());
        }
        check_size(out.size());
        return Value(std::move(out));
    }
    if (name == "length" || name == "count") {
        if (v.is_string()) return Value(int64_t(utf8_length(v.as_string())));
        if (v.is_list()) return Value(int64_t(v.as_list().size()));
        if (v.is_dict() && !v.as_dict().is_namespace) return Value(int64_t(v.as_dict().items.size()));
        if (v.is_undefined()) return Value(int64_t(0));
        fail(std::string("object of type '") + type_name(v) + "' has no len()");
    }
    if (name == "string") return v.is_string() ? v : Value(v.str());   // Markup stays Markup
    if (name == "safe") return v.is_markup() ? v : Value::markup(v.str());
    if (name == "e" || name == "escape") return v.is_markup() ? v : Value::markup(html_escape(v.str()));
    if (name == "forceescape") return Value::markup(html_escape(v.str()));
    if (name == "title") {   // jinja2's own: words begin after '-', whitespace, '(', '{', '[', '<'
        const std::string s = v.str();
        std::string out;
        bool word_start = true;
        for (const char ch : s) {
            const unsigned char c = static_cast<unsigned char>(ch);
            const bool sep = std::strchr("-({[<", ch) != nullptr || std::isspace(c);
            if (sep) {
                out += ch;
                word_start = true;
            } else {
                out += c < 0x80 ? char(word_start ? std::toupper(c) : std::tolower(c)) : ch;
                word_start = false;
            }
        }
        return v.is_markup() ? Value::markup(out) : Value(out);
    }
    if (name == "trim" || name == "upper" || name == "lower" || name == "capitalize") {
        Args m;
        if (name == "trim")
            if (const Value* c = arg(a, 0, "chars")) m.pos.push_back(*c);
        Value out = call(attr(v.is_string() ? v : Value(v.str()), name == "trim" ? "strip" : name), m);
        return v.is_markup() ? Value::markup(out.as_string()) : out;   // Markup's methods return Markup
    }
    if (name == "replace") {
        Args m;
        const Value *o = arg(a, 0, "old"), *n = arg(a, 1, "new"), *c = arg(a, 2, "count");
        if (!o || !n) fail("replace takes 2 arguments");
        m.pos = {Value(o->str()), Value(n->str())};
        if (c && !c->is_none()) m.pos.push_back(*c);
        return call(attr(Value(v.str()), "replace"), m);
    }
    if (name == "default" || name == "d") {
        const Value* def = arg(a, 0, "default_value");
        if (v.is_undefined() || (flag(a, 1, "boolean", false) && !v.truthy())) return def ? *def : Value("");
        return v;
    }
    if (name == "items") {
        if (v.is_undefined()) return Value(List{});
        if (!v.is_dict()) return Value::generator({}, "line " + std::to_string(line) + ": items: can only get item pairs from a mapping");
        Args m;
        return Value::generator(call(attr(v, "items"), m).as_list());
    }
    if (name == "list") return Value(seq());
    if (name == "first" || name == "last") {
        if (name == "last" && v.is_generator()) fail("'generator' object is not reversible");
        List l = seq();
        if (l.empty()) return Value::undefined(name == "first" ? "first item" : "last item");
        return name == "first" ? l.front() : l.back();
    }
    if (name == "reverse") {
        if (v.is_string()) {
            std::string out;
            const auto chars = utf8_chars(v.as_string());
            for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
            return Value(std::move(out));
        }
        if (v.is_undefined()) return Value::generator({});
        List l = seq();
        std::reverse(l.begin(), l.end());
        return Value::generator(std::move(l));   // a reverse iterator
    }
    if (name == "join") {
        const Value* sep = arg(a, 0, "d");
        const Value* at = arg(a, 1, "attribute");
        MarkedText out;
        bool first = true;
        for (const Value& e : seq()) {
            if (!first && sep) out.append(*sep);
            out.append(at && !at->is_none() ? attr_path(*this, e, *at) : e);
            first = false;
            check_size(out.text.size());
        }
        return out.take();
    }
    if (name == "int") {
        const Value* def = arg(a, 0, "default");
        const Value d = def ? *def : Value(int64_t(0));
        if (v.is_int()) return v;
        if (v.is_bool()) return Value(int64_t(v.as_bool()));
        if (v.is_float()) return std::isfinite(v.as_float()) && std::fabs(v.as_float()) < 9.2e18 ? Value(int64_t(v.as_float())) : d;
        if (v.is_string()) {
            std::string t = v.as_string();
            t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
            char* end = nullptr;
            errno = 0;
            const long long i = std::strtoll(t.c_str(), &end, 10);
            size_t k = size_t(end - t.c_str());
            while (k < t.size() && std::isspace(static_cast<unsigned char>(t[k]))) ++k;
            if (!t.empty() && end != t.c_str() && k == t.size() && errno == 0) return Value(int64_t(i));
            if (auto f = parse_float(v.as_string()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18) return Value(int64_t(*f));
        }
        return d;
    }
    if (name == "float") {
        const Value* def = arg(a, 0, "default");
        const Value d = def ? *def : Value(0.0);
        if (v.is_number() || v.is_bool()) return Value(v.as_number());
        if (v.is_string())
            if (auto f = parse_float(v.as_string())) return Value(*f);
        return d;
    }
    if (name == "abs") {
        if (v.is_int()) {
            if (v.as_int() == INT64_MIN) fail("integer overflow");
            return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
        }
        if (v.is_float()) return Value(std::fabs(v.as_float()));
        if (v.is_bool()) return Value(int64_t(v.as_bool()));
        fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
    }
    if (name == "round") {
        const Value* p = arg(a, 0, "precision");
        const Value* m = arg(a, 1, "method");
        const int64_t digits = p ? (p->is_int() ? p->as_int() : 0) : 0;
        const std::string method = m ? m->str() : "common";
        if (!v.is_number() && !v.is_bool()) fail("round: expected a number");
        const double x = v.as_number();
        double y;
        if (method == "common") {
            if (v.is_int() || v.is_bool()) return Value(digits >= 0 ? Value(int64_t(x)) : Value(int64_t(py_round(x, digits))));
            y = py_round(x, digits);
        } else {
            const double pw = std::pow(10.0, double(digits));
            if (method == "ceil") y = std::ceil(x * pw) / pw;
            else if (method == "floor") y = std::floor(x * pw) / pw;
            else fail("round: method must be common, ceil or floor");
        }
        return Value(y);
    }
    if (name == "indent") {
        const Value* w = arg(a, 0, "width");
        if (!v.is_string()) fail(std::string("indent: expected a string, got '") + type_name(v) + "'");
        std::string ind = "    ";
        if (w) ind = w->is_string() ? w->as_string() : std::string(size_t(std::clamp<int64_t>(w->is_int() ? w->as_int() : 4, 0, 256)), ' ');
        std::string out = indent_text(v.str(), ind, flag(a, 1, "first", false), flag(a, 2, "blank", false));
        check_size(out.size());
        return Value(std::move(out));
    }
    if (name == "wordcount") {
        const std::string s = v.str();
        int64_t n = 0;
        bool in = false;
        for (const char c : s) {
            const bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
            n += w && !in;
            in = w;
        }
        return Value(n);
    }
    if (name == "\x01unique" || name == "sort" || name == "dictsort" || name == "min" || name == "max") {
        const bool sort = name == "sort" || name == "dictsort";
        const size_t cs_pos = name == "sort" ? 1 : name == "dictsort" ? 0 : 0;
        const bool case_sensitive = flag(a, cs_pos, "case_sensitive", false);
        const Value* at = arg(a, name == "sort" ? 2 : 1, "attribute");
        List l;
        if (name == "dictsort") {
            if (!v.is_dict()) fail("dictsort: expected a mapping");
            for (const auto& [k, x] : v.as_dict().items) l.push_back(Value::tuple({k, x}));
        } else {
            l = seq();
        }
        auto key = [&](const Value& e) {
            if (name == "dictsort") {
                const Value* by = arg(a, 1, "by");
                return fold(e.as_list()[by && by->str() == "value" ? 1 : 0], case_sensitive);
            }
            return fold(at && !at->is_none() ? attr_path(*this, e, *at) : e, case_sensitive);
        };
        step(int64_t(l.size()));
        if (name == "\x01unique") {   // reached through lazy_filter: a generator
            List out, seen;
            for (const Value& e : l) {
                const Value k = key(e);
                if (std::find(seen.begin(), seen.end(), k) == seen.end()) {
                    seen.push_back(k);
                    out.push_back(e);
                }
            }
            return Value::generator(std::move(out));
        }
        if (sort) {
            const bool rev = name == "sort" ? flag(a, 0, "reverse", false) : flag(a, 2, "reverse", false);
            std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
                return rev ? less_than(*this, key(y), key(x)) : less_than(*this, key(x), key(y));
            });
            return Value(std::move(l));
        }
        if (l.empty()) return Value::undefined(name);
        size_t best = 0;
        for (size_t i = 1; i < l.size(); ++i) {
            const bool better = name == "min" ? less_than(*this, key(l[i]), key(l[best])) : less_than(*this, key(l[best]), key(l[i]));
            if (better) best = i;
        }
        return l[best];
    }
    if (name == "sum") {
        const Value* at = arg(a, 0, "attribute");
        const Value* start = arg(a, 1, "start");
        Value acc = start ? *start : Value(int64_t(0));
        for (const Value& e : seq()) {
            const Value x = at && !at->is_none() ? attr_path(*this, e, *at) : e;
            acc = binary_op(*this, "+", acc, x);
        }
        return acc;
    }
    if (name == "attr") {   // getattr only: a dict's keys are not attributes
        const Value* n = arg(a, 0, "name");
        if (!n || !n->is_string()) fail("attr: expected an attribute name");
        if (v.is_dict() && !v.as_dict().is_namespace) {
            const Value m = attr(v, n->as_string());
            return m.is_function() ? m : Value::undefined(n->as_string());
        }
        return attr(v, n->as_string());
    }
    if (name == "map" || name == "unique" || name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
        // jinja2 returns a generator: errors show only when it is consumed.
        try {
            return lazy_filter(name, v, a);
        } catch (const RaisedError&) {
            throw;
        } catch (const Error& e) {
            return Value::generator({}, e.what());
        }
    }
    if (name == "format") {   // value % args (or % kwargs as a dict)
        if (!a.pos.empty() && !a.kw.empty()) fail("format: can't handle positional and keyword arguments at the same time");
        Value args = Value::tuple(a.pos);
        if (!a.kw.empty()) {
            args = Value::dict();
            for (const auto& [k, x] : a.kw) args.as_dict().set(Value(k), x);
        }
        return percent_format(*this, v.is_string() ? v : Value(v.str()), args);
    }
    if (name == "center") {
        const Value* w = arg(a, 0, "width");
        const std::string s = v.str();
        const int64_t width = w && w->is_int() ? std::min<int64_t>(w->as_int(), 1 << 20) : 80;
        const int64_t len = int64_t(utf8_length(s));
        if (width <= len) return Value(s);
        const int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
        return Value(std::string(size_t(left), ' ') + s + std::string(size_t(pad - left), ' '));
    }
    fail("no filter named '" + name + "'");
}

}  // namespace ptxlm::jinja::detail
