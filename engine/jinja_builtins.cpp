// The Jinja builtins chat templates use: filters, tests, globals, the string,
// dict and list methods, and jinja2's attribute and item lookup. Names and
// behaviour follow jinja2 3.x under ImmutableSandboxedEnvironment (which
// refuses methods that modify a list or dict, e.g. list.append), with HF's
// tojson (ensure_ascii=False, keys in insertion order).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "engine/jinja_ast.h"

namespace ptxlm::jinja::detail {

const Value* arg(const Args& a, size_t i, std::string_view name) {
    for (const auto& [k, v] : a.kw)
        if (k == name) return &v;
    return i < a.pos.size() ? &a.pos[i] : nullptr;
}

namespace {

Value fn(std::string name, std::function<Value(Renderer&, Args&)> f) {
    auto p = std::make_shared<Function>();
    p->name = std::move(name);
    p->call = std::move(f);
    return Value(std::shared_ptr<const Function>(std::move(p)));
}

const std::string& want_string(Renderer& r, const Value& v, const char* what) {
    if (!v.is_string()) r.fail(std::string(what) + ": expected a string, got '" + type_name(v) + "'");
    return v.as_string();
}

int64_t want_int(Renderer& r, const Value& v, const char* what) {
    if (v.is_bool()) return v.as_bool();
    if (!v.is_int()) r.fail(std::string(what) + ": expected an integer, got '" + type_name(v) + "'");
    return v.as_int();
}

// Python's str.strip family: chars null strips whitespace. The bytes kept:
// [first, second).
std::pair<size_t, size_t> py_strip(const std::string& s, const Value* chars, bool left, bool right) {
    std::vector<uint32_t> set;
    const bool ws = !chars || chars->is_none() || chars->is_undefined();
    if (!ws) {
        const std::string& c = chars->as_string();
        for (size_t i = 0; i < c.size();) {
            uint32_t cp;
            i += utf8_decode(c, i, cp);
            set.push_back(cp);
        }
    }
    auto strip_cp = [&](uint32_t cp) { return ws ? is_py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end(); };
    size_t b = 0, e = s.size();
    if (left) {
        while (b < e) {
            uint32_t cp;
            const size_t n = utf8_decode(s, b, cp);
            if (!strip_cp(cp)) break;
            b += n;
        }
    }
    if (right) {
        while (e > b) {
            size_t k = e - 1;
            while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
            uint32_t cp;
            if (utf8_decode(s, k, cp) != e - k) cp = static_cast<unsigned char>(s[e - 1]), k = e - 1;
            if (!strip_cp(cp)) break;
            e = k;
        }
    }
    return {b, e};
}

std::string ascii_map(std::string s, int (*f)(int)) {
    for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x80) c = char(f(static_cast<unsigned char>(c)));
    return s;
}

// Python's str.title() (non-ASCII bytes count as letters that keep their case).
std::string py_title(std::string s) {
    bool prev_cased = false;
    for (char& c : s) {
        const unsigned char u = static_cast<unsigned char>(c);
        if (u >= 0x80) {
            prev_cased = true;
        } else if (std::isalpha(u)) {
            c = char(prev_cased ? std::tolower(u) : std::toupper(u));
            prev_cased = true;
        } else {
            prev_cased = false;
        }
    }
    return s;
}

std::string py_capitalize(const std::string& s) {
    std::string out = ascii_map(s, [](int c) { return std::tolower(c); });
    if (!out.empty() && static_cast<unsigned char>(out[0]) < 0x80) out[0] = char(std::toupper(static_cast<unsigned char>(out[0])));
    return out;
}

std::string py_replace(Renderer& r, const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    std::string out;
    if (from.empty()) {
        const auto chars = utf8_chars(s);
        int64_t n = 0;
        for (const auto& c : chars) {
            if (count < 0 || n < count) out += to, ++n;
            out += c;
            r.check_size(out.size());
        }
        if (count < 0 || n < count) out += to;
        return out;
    }
    size_t pos = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
        const size_t k = s.find(from, pos);
        if (k == std::string::npos) break;
        out.append(s, pos, k - pos);
        out += to;
        r.check_size(out.size());
        pos = k + from.size();
        ++n;
    }
    out.append(s, pos);
    return out;
}

// fv.format(args): the format string's text keeps its marks, each field
// its argument's (MarkedText::append).
Value py_format(Renderer& r, const Value& fv, const Args& a) {
    const std::string& f = fv.as_string();
    MarkedText out;
    size_t auto_idx = 0;
    for (size_t i = 0; i < f.size(); ++i) {
        const char c = f[i];
        if (c == '}' ) {
            if (i + 1 < f.size() && f[i + 1] == '}') ++i;
            else r.fail("str.format: single '}' encountered");
            out.append_range(fv, i, i + 1);
            continue;
        }
        if (c != '{') {
            out.append_range(fv, i, i + 1);
            continue;
        }
        if (i + 1 < f.size() && f[i + 1] == '{') {
            ++i;
            out.append_range(fv, i, i + 1);
            continue;
        }
        const size_t e = f.find('}', i);
        if (e == std::string::npos) r.fail("str.format: single '{' encountered");
        const std::string field = f.substr(i + 1, e - i - 1);
        if (field.find_first_of(":!.[") != std::string::npos) r.fail("str.format: format specs are not supported");
        const Value* v = nullptr;
        if (field.empty()) {
            v = auto_idx < a.pos.size() ? &a.pos[auto_idx] : nullptr;
            ++auto_idx;
        } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
            const size_t k = size_t(std::strtoull(field.c_str(), nullptr, 10));
            v = k < a.pos.size() ? &a.pos[k] : nullptr;
        } else {
            for (const auto& [k, x] : a.kw)
                if (k == field) v = &x;
        }
        if (!v) r.fail("str.format: no argument for {" + field + "}");
        out.append(*v);
        r.check_size(out.text.size());
        i = e;
    }
    return out.take();
}

}  // namespace

bool is_py_space(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::vector<std::string> split_lines(const std::string& s) {
    std::vector<std::string> out;
    size_t b = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
            out.push_back(s.substr(b, i - b));
            if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
            b = i + 1;
        }
    }
    if (b < s.size()) out.push_back(s.substr(b));
    return out;
}

List py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
    List out;
    if (!sep) {
        size_t i = 0;
        while (true) {
            while (i < s.size() && is_py_space(static_cast<unsigned char>(s[i]))) ++i;
            if (i >= s.size()) break;
            if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
                size_t e = s.size();
                while (e > i && is_py_space(static_cast<unsigned char>(s[e - 1]))) --e;
                out.emplace_back(s.substr(i, e - i));
                break;
            }
            size_t j = i;
            while (j < s.size() && !is_py_space(static_cast<unsigned char>(s[j]))) ++j;
            out.emplace_back(s.substr(i, j - i));
            i = j;
        }
        return out;
    }
    size_t pos = 0;
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
        const size_t k = s.find(*sep, pos);
        if (k == std::string::npos) break;
        out.emplace_back(s.substr(pos, k - pos));
        pos = k + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
}

Value Renderer::item(const Value& obj, const Value& key) {
    switch (obj.type()) {
        case Value::Type::Undefined: fail(obj.undefined_message());
        case Value::Type::Dict:
            if (key.is_string()) {
                if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
                return attr(obj, key.as_string());
            }
            if (const Value* v = obj.as_dict().find_key(key)) return *v;
            return Value::undefined(key.str());
        case Value::Type::List:
            // A dict view is not subscriptable: jinja2's getitem falls back to undefined.
            if (obj.is_dict_view()) return Value::undefined(key.str());
            if (key.is_int() || key.is_bool()) {
                const int64_t n = int64_t(obj.as_list().size());
                int64_t i = key.is_int() ? key.as_int() : key.as_bool();
                if (i < 0) i += n;
                if (i < 0 || i >= n) return Value::undefined(key.str());
                return obj.as_list()[size_t(i)];
            }
            if (key.is_string()) return attr(obj, key.as_string());
            return Value::undefined(key.str());
        case Value::Type::String:
            if (key.is_int() || key.is_bool()) {
                const auto chars = utf8_chars(obj.as_string());
                const int64_t n = int64_t(chars.size());
                int64_t i = key.is_int() ? key.as_int() : key.as_bool();
                if (i < 0) i += n;
                if (i < 0 || i >= n) return Value::undefined(key.str());
                return Value(chars[size_t(i)]);
            }
            if (key.is_string()) return attr(obj, key.as_string());
            return Value::undefined(key.str());
        case Value::Type::Generator: fail("'generator' object is not subscriptable");
        case Value::Type::Function:   // loop['index']: jinja2 falls back to the attribute
            if (key.is_string()) return attr(obj, key.as_string());
            return Value::undefined(key.str());
        default: return Value::undefined(key.str());
    }
}

Value Renderer::attr(const Value& obj, const std::string& name) {
    // The sandbox's answer to a method that modifies its object: an undefined
    // value that fails when used (printed, it is empty).
    auto unsafe = [&]() -> Value {
        return Value::undefined(name, "access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe");
    };
    switch (obj.type()) {
        case Value::Type::Undefined: fail(obj.undefined_message());
        case Value::Type::Dict: {
            const Dict& d = obj.as_dict();
            if (d.is_namespace) {
                if (const Value* v = d.find(name)) return *v;
                return Value::undefined(name);
            }
            const auto dp = obj.dict_ptr();
            // Views, as Python's: dict_items([('a', 1)]) of (key, value) tuples.
            if (name == "items")
                return fn("items", [dp](Renderer&, Args&) {
                    List l;
                    for (const auto& [k, v] : dp->items) l.push_back(Value::tuple({k, v}));
                    return Value::sequence(Value::Seq::Items, std::move(l));
                });
            if (name == "keys")
                return fn("keys", [dp](Renderer&, Args&) {
                    List l;
                    for (const auto& [k, v] : dp->items) l.emplace_back(k);
                    return Value::sequence(Value::Seq::Keys, std::move(l));
                });
            if (name == "values")
                return fn("values", [dp](Renderer&, Args&) {
                    List l;
                    for (const auto& [k, v] : dp->items) l.push_back(v);
                    return Value::sequence(Value::Seq::Values, std::move(l));
                });
            if (name == "get")
                return fn("get", [dp](Renderer& r, Args& a) {
                    const Value* k = arg(a, 0, "key");
                    if (!k) r.fail("get() takes at least 1 argument");
                    if (const Value* v = dp->find_key(*k)) return *v;
                    const Value* def = arg(a, 1, "default");
                    return def ? *def : Value(nullptr);
                });
            if (name == "copy")
                return fn("copy", [dp](Renderer&, Args&) { return Value(std::make_shared<Dict>(*dp)); });
            if (name == "update" || name == "pop" || name == "setdefault" || name == "clear" || name == "popitem") return unsafe();
            if (const Value* v = d.find(name)) return *v;
            return Value::undefined(name);
        }
        case Value::Type::List: {
            if (obj.is_dict_view()) return Value::undefined(name);
            if (!obj.is_tuple() && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                                    name == "remove" || name == "sort" || name == "reverse" || name == "clear"))
                return unsafe();
            const List l = obj.as_list();
            if (name == "index")
                return fn("index", [l](Renderer& r, Args& a) {
                    for (size_t i = 0; i < l.size(); ++i)
                        if (!a.pos.empty() && l[i] == a.pos[0]) return Value(int64_t(i));
                    r.fail("list.index(x): x not in list");
                });
            if (name == "count")
                return fn("count", [l](Renderer&, Args& a) {
                    int64_t n = 0;
                    for (const Value& v : l) n += !a.pos.empty() && v == a.pos[0];
                    return Value(n);
                });
            return Value::undefined(name);
        }
        case Value::Type::String: break;
        case Value::Type::Function:
            if (const auto& at = obj.as_function().attrs)
                if (const Value* v = at->find(name)) return *v;
            return Value::undefined(name);
        default: return Value::undefined(name);
    }
    const std::string s = obj.as_string();
    using F = std::function<Value(Renderer&, Args&)>;
    F f;
    if (name == "startswith" || name == "endswith") {
        const bool starts = name == "startswith";
        f = [s, starts](Renderer& r, Args& a) {
            const Value* p = arg(a, 0, "prefix");
            if (!p) r.fail("startswith/endswith takes 1 argument");
            List options = p->is_tuple() ? p->as_list() : List{*p};   // a tuple of prefixes, not a list
            for (const Value& o : options) {
                const std::string& t = want_string(r, o, "startswith/endswith");
                if (t.size() <= s.size() && (starts ? s.compare(0, t.size(), t) == 0 : s.compare(s.size() - t.size(), t.size(), t) == 0))
                    return Value(true);
            }
            return Value(false);
        };
    } else if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const bool l = name != "rstrip", rr = name != "lstrip";
        f = [obj, l, rr](Renderer& r, Args& a) {
            const Value* c = arg(a, 0, "chars");
            if (c && !c->is_none()) want_string(r, *c, "strip");
            const auto [b, e] = py_strip(obj.as_string(), c, l, rr);
            MarkedText out;   // the kept bytes keep their marks
            out.append_range(obj, b, e);
            return out.take();
        };
    } else if (name == "split" || name == "rsplit") {
        const bool right = name == "rsplit";
        f = [s, right](Renderer& r, Args& a) {
            const Value* sep = arg(a, 0, "sep");
            const Value* mx = arg(a, 1, "maxsplit");
            std::optional<std::string> sp;
            if (sep && !sep->is_none()) {
                sp = want_string(r, *sep, "split");
                if (sp->empty()) r.fail("split: empty separator");
            }
            const int64_t m = mx ? want_int(r, *mx, "split") : -1;
            if (!right || m < 0) return Value(py_split(s, sp, m));
            // rsplit with a limit: split the reversed string (exact for a
            // reversed separator too).
            std::string rs(s.rbegin(), s.rend());
            std::optional<std::string> rsp;
            if (sp) rsp = std::string(sp->rbegin(), sp->rend());
            List parts = py_split(rs, rsp, m);
            std::reverse(parts.begin(), parts.end());
            for (Value& p : parts) p = Value(std::string(p.as_string().rbegin(), p.as_string().rend()));
            return Value(std::move(parts));
        };
    } else if (name == "splitlines") {
        f = [s](Renderer&, Args&) {
            List out;
            for (std::string& line : split_lines(s)) out.emplace_back(std::move(line));
            return Value(std::move(out));
        };
    } else if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
        const std::string n = name;
        f = [s, n](Renderer&, Args&) {
            if (n == "upper") return Value(ascii_map(s, [](int c) { return std::toupper(c); }));
            if (n == "lower") return Value(ascii_map(s, [](int c) { return std::tolower(c); }));
            if (n == "title") return Value(py_title(s));
            return Value(py_capitalize(s));
        };
    } else if (name == "replace") {
        f = [s](Renderer& r, Args& a) {
            const Value *o = arg(a, 0, "old"), *n = arg(a, 1, "new"), *c = arg(a, 2, "count");
            if (!o || !n) r.fail("replace takes 2 arguments");
            return Value(py_replace(r, s, want_string(r, *o, "replace"), want_string(r, *n, "replace"), c ? want_int(r, *c, "replace") : -1));
        };
    } else if (name == "find" || name == "rfind" || name == "index" || name == "count") {
        const std::string n = name;
        f = [s, n](Renderer& r, Args& a) {
            const Value* sub = arg(a, 0, "sub");
            if (!sub) r.fail(n + " takes 1 argument");
            const std::string& t = want_string(r, *sub, n.c_str());
            if (n == "count") {
                if (t.empty()) return Value(int64_t(utf8_length(s) + 1));
                int64_t c = 0;
                for (size_t k = s.find(t); k != std::string::npos; k = s.find(t, k + t.size())) ++c;
                return Value(c);
            }
            const size_t k = n == "rfind" ? s.rfind(t) : s.find(t);
            if (k == std::string::npos) {
                if (n == "index") r.fail("substring not found");
                return Value(int64_t(-1));
            }
            return Value(int64_t(utf8_length(s.substr(0, k))));
        };
    } else if (name == "join") {
        f = [obj](Renderer& r, Args& a) {
            if (a.pos.empty()) r.fail("join takes 1 argument");
            MarkedText out;
            bool first = true;
            for (const Value& v : r.iterate(a.pos[0])) {
                if (!first) out.append(obj);
                want_string(r, v, "str.join");
                out.append(v);
                first = false;
                r.check_size(out.text.size());
            }
            return out.take();
        };
    } else if (name == "format") {
        f = [obj](Renderer& r, Args& a) { return py_format(r, obj, a); };
    } else if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" || name == "isupper") {
        const std::string n = name;
        f = [s, n](Renderer&, Args&) {
            if (s.empty()) return Value(false);
            bool cased = false;
            for (const char ch : s) {
                const unsigned char c = static_cast<unsigned char>(ch);
                if (n == "isdigit" && !std::isdigit(c)) return Value(false);
                if (n == "isalpha" && !std::isalpha(c)) return Value(false);
                if (n == "isalnum" && !std::isalnum(c)) return Value(false);
                if (n == "isspace" && !is_py_space(c)) return Value(false);
                if (n == "islower" && std::isupper(c)) return Value(false);
                if (n == "isupper" && std::islower(c)) return Value(false);
                cased = cased || std::isalpha(c);
            }
            return Value(n == "islower" || n == "isupper" ? cased : true);
        };
    } else {
        return Value::undefined(name);
    }
    return fn(name, std::move(f));
}

Value Renderer::global(const std::string& name) {
    if (name == "range")
        return fn(name, [](Renderer& r, Args& a) {
            int64_t start = 0, stop = 0, st = 1;
            if (a.pos.size() == 1) {
                stop = want_int(r, a.pos[0], "range");
            } else if (a.pos.size() == 2 || a.pos.size() == 3) {
                start = want_int(r, a.pos[0], "range");
                stop = want_int(r, a.pos[1], "range");
                if (a.pos.size() == 3) st = want_int(r, a.pos[2], "range");
            } else {
                r.fail("range expected 1 to 3 arguments");
            }
            if (st == 0) r.fail("range() arg 3 must not be zero");
            const long double n = std::max<long double>(0, std::ceil(((long double)stop - start) / st));
            if (n > r.opt.limits.max_steps) r.step(r.opt.limits.max_steps + 1);
            r.check_items(size_t(n));
            r.step(int64_t(n) / 16);
            List l;
            for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) l.emplace_back(i);
            return Value(std::move(l));
        });
    if (name == "namespace" || name == "dict")
        return fn(name, [ns = name == "namespace"](Renderer& r, Args& a) {
            auto d = std::make_shared<Dict>();
            d->is_namespace = ns;
            for (const Value& p : a.pos) {
                if (!p.is_dict()) r.fail("namespace()/dict(): positional argument must be a dict");
                for (const auto& [k, v] : p.as_dict().items) d->set(k, v);
            }
            for (const auto& [k, v] : a.kw) d->set(k, v);
            return Value(std::move(d));
        });
    if (name == "raise_exception")
        return fn(name, [](Renderer& r, Args& a) -> Value {
            const std::string msg = a.pos.empty() ? "" : a.pos[0].str();
            throw RaisedError("line " + std::to_string(r.line) + ": raise_exception: " + msg, msg);
        });
    if (name == "strftime_now")
        return fn(name, [](Renderer& r, Args& a) {
            if (a.pos.empty()) r.fail("strftime_now takes 1 argument");
            const std::string& f = want_string(r, a.pos[0], "strftime_now");
            std::tm tm{};
            if (r.opt.now) {
                tm = *r.opt.now;
            } else {
                const std::time_t t = std::time(nullptr);
                localtime_r(&t, &tm);
            }
            std::string buf(256 + f.size() * 8, '\0');
            const size_t n = f.empty() ? 0 : std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
            buf.resize(n);
            return Value(std::move(buf));
        });
    return Value();
}

}  // namespace ptxlm::jinja::detail
