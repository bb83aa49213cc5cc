// The Jinja tree walk's expressions, with Python's semantics, and the limits
// that stop a runaway render (the statements: jinja_stmt.cpp).
#include <cmath>

#include "engine/jinja_ast.h"

namespace ptxlm::jinja {
namespace detail {

void Renderer::fail(const std::string& msg) const { throw Error("line " + std::to_string(line) + ": " + msg); }

void Renderer::step(int64_t n) {
    steps_ += n;
    if (steps_ > opt.limits.max_steps)
        fail("render stopped: over " + std::to_string(opt.limits.max_steps) + " steps (a loop without end?)");
}

void Renderer::check_items(size_t n) const {
    if (n > opt.limits.max_items) fail("render stopped: a list over " + std::to_string(opt.limits.max_items) + " items");
}

void Renderer::check_size(size_t n) const {
    if (n > opt.limits.max_output) fail("render stopped: a string over " + std::to_string(opt.limits.max_output) + " bytes");
}

struct CallDepth {
    Renderer& r;
    CallDepth(Renderer& r_) : r(r_) {
        if (++r.call_depth_ > r.opt.limits.max_call_depth)
            r.fail("render stopped: calls nest over " + std::to_string(r.opt.limits.max_call_depth) + " deep (endless recursion?)");
    }
    ~CallDepth() { --r.call_depth_; }
};

namespace {

bool is_numeric(const Value& v) { return v.is_int() || v.is_float() || v.is_bool(); }
int64_t to_i(const Value& v) { return v.is_bool() ? int64_t(v.as_bool()) : v.as_int(); }
bool both_int(const Value& a, const Value& b) { return (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool()); }

}  // namespace

const char* type_name(const Value& v) {
    switch (v.type()) {
        case Value::Type::Undefined: return "Undefined";
        case Value::Type::None: return "NoneType";
        case Value::Type::Bool: return "bool";
        case Value::Type::Int: return "int";
        case Value::Type::Float: return "float";
        case Value::Type::String: return "str";
        case Value::Type::List:
            switch (v.seq_kind()) {
                case Value::Seq::List: return "list";
                case Value::Seq::Tuple: return "tuple";
                case Value::Seq::Keys: return "dict_keys";
                case Value::Seq::Values: return "dict_values";
                case Value::Seq::Items: return "dict_items";
            }
            return "list";
        case Value::Type::Dict: return v.as_dict().is_namespace ? "Namespace" : "dict";
        case Value::Type::Function: return "function";
        case Value::Type::Generator: return "generator";
    }
    return "?";
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (const char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

size_t utf8_length(const std::string& s) {
    size_t n = 0;
    for (size_t i = 0; i < s.size(); ++n) {
        uint32_t cp;
        i += utf8_decode(s, i, cp);
    }
    return n;
}

std::vector<std::string> utf8_chars(const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        uint32_t cp;
        const size_t n = utf8_decode(s, i, cp);
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

bool less_than(Renderer& r, const Value& a, const Value& b) {
    if (is_numeric(a) && is_numeric(b)) {
        if (both_int(a, b)) return to_i(a) < to_i(b);
        return a.as_number() < b.as_number();
    }
    if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
    if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() && !a.is_dict_view()) {   // list < tuple fails
        const List &x = a.as_list(), &y = b.as_list();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (!(x[i] == y[i])) return less_than(r, x[i], y[i]);
        }
        return x.size() < y.size();
    }
    if (a.is_undefined()) r.fail(a.undefined_message());
    if (b.is_undefined()) r.fail(b.undefined_message());
    r.fail(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) + "'");
}

List Renderer::iterate(const Value& v) {
    switch (v.type()) {
        case Value::Type::Undefined: return {};
        case Value::Type::List: step(int64_t(v.as_list().size() / 64)); return v.as_list();
        case Value::Type::Generator:
            if (!v.generator_error().empty()) throw Error(v.generator_error());
            step(int64_t(v.generator_items().size() / 64));
            return v.generator_items();
        case Value::Type::Dict: {
            if (v.as_dict().is_namespace) break;
            List keys;
            for (const auto& [k, _] : v.as_dict().items) keys.emplace_back(k);
            return keys;
        }
        case Value::Type::String: {
            List chars;
            for (auto& c : utf8_chars(v.as_string())) chars.emplace_back(std::move(c));
            return chars;
        }
        default: break;
    }
    fail(std::string("'") + type_name(v) + "' object is not iterable");
}

Args Renderer::eval_args(const Expr& e, const ScopePtr& scope) {
    Args args;
    for (const auto& a : e.args) args.pos.push_back(eval(*a, scope));
    for (const auto& [k, a] : e.kwargs) args.kw.emplace_back(k, eval(*a, scope));
    if (e.b) {   // f(*xs): the items of xs follow the positional arguments
        const Value xs = eval(*e.b, scope);
        line = e.line;
        if (xs.is_none() || xs.is_bool() || xs.is_number() || xs.is_function())
            fail(std::string("Value after * must be an iterable, not ") + type_name(xs));
        for (Value& v : iterate(xs)) args.pos.push_back(std::move(v));
    }
    if (e.c) {   // f(**d): d's items are keyword arguments
        const Value d = eval(*e.c, scope);
        line = e.line;
        if (!d.is_dict() || d.as_dict().is_namespace) fail(std::string("argument after ** must be a mapping, not ") + type_name(d));
        for (const auto& [k, v] : d.as_dict().items) {
            if (!k.is_string()) fail("keywords must be strings");
            for (const auto& [name, _] : args.kw)
                if (name == k.as_string()) fail("got multiple values for keyword argument '" + name + "'");
            args.kw.emplace_back(k.as_string(), v);
        }
    }
    check_items(args.pos.size());
    return args;
}

Value Renderer::call(const Value& f, Args& args) {
    if (f.is_undefined()) fail(f.undefined_message());
    if (!f.is_function()) fail(std::string("'") + type_name(f) + "' object is not callable");
    step();
    CallDepth d(*this);
    const int at = line;
    Value v = f.as_function().call(*this, args);
    line = at;
    return v;
}

Value binary_op(Renderer& r, const std::string& op, const Value& a, const Value& b) {
    auto undefined_check = [&] {
        if (a.is_undefined()) r.fail(a.undefined_message());
        if (b.is_undefined()) r.fail(b.undefined_message());
    };
    auto unsupported = [&]() {
        undefined_check();
        r.fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
    };
    if (op == "~") {
        MarkedText m;
        m.append(a);
        r.check_size(m.text.size());
        m.append(b);
        r.check_size(m.text.size());
        r.step(int64_t(m.text.size() / 4096));
        return m.take();
    }
    if (is_numeric(a) && is_numeric(b)) {
        if (both_int(a, b)) {
            const int64_t x = to_i(a), y = to_i(b);
            int64_t z = 0;
            if (op == "+") { if (__builtin_add_overflow(x, y, &z)) r.fail("integer overflow"); return Value(z); }
            if (op == "-") { if (__builtin_sub_overflow(x, y, &z)) r.fail("integer overflow"); return Value(z); }
            if (op == "*") { if (__builtin_mul_overflow(x, y, &z)) r.fail("integer overflow"); return Value(z); }
            if (op == "//" || op == "%") {
                if (y == 0) r.fail("integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) r.fail("integer overflow");
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    --q;
                    m += y;
                }
                return op == "//" ? Value(q) : Value(m);
            }
            if (op == "**") {
                if (y < 0) return Value(std::pow(double(x), double(y)));
                int64_t acc = 1, base = x, e = y;
                while (e > 0) {
                    if (e & 1 && __builtin_mul_overflow(acc, base, &acc)) r.fail("integer overflow");
                    e >>= 1;
                    if (e > 0 && __builtin_mul_overflow(base, base, &base)) r.fail("integer overflow");
                }
                return Value(acc);
            }
        }
        const double x = a.as_number(), y = b.as_number();
        if (op == "+") return Value(x + y);
        if (op == "-") return Value(x - y);
        if (op == "*") return Value(x * y);
        if (op == "/") {
            if (y == 0) r.fail("division by zero");
            return Value(x / y);
        }
        if (op == "//" || op == "%") {
            if (y == 0) r.fail("float division or modulo by zero");
            double m = std::fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return op == "//" ? Value(std::floor(x / y)) : Value(m);
        }
        if (op == "**") return Value(std::pow(x, y));
    }
    if (op == "+") {
        if (a.is_string() && b.is_string()) {
            r.check_size(a.as_string().size() + b.as_string().size());
            r.step(int64_t((a.as_string().size() + b.as_string().size()) / 4096));
            if (a.is_markup() || b.is_markup()) {   // Markup + str escapes the str
                MarkedText m;
                for (const Value* v : {&a, &b}) {
                    std::string escaped;
                    if (!v->is_markup() && (escaped = html_escape(v->as_string())) != v->as_string())
                        m.append_data(escaped);   // changed bytes: the caller's
                    else
                        m.append(*v);
                }
                r.check_size(m.text.size());
                return Value::markup(std::move(m.text), std::move(m.code));
            }
            MarkedText m;
            m.append(a);
            m.append(b);
            return m.take();
        }
        if (a.is_list() && b.is_list() && !a.is_dict_view() && !b.is_dict_view()) {
            if (a.seq_kind() != b.seq_kind())
                r.fail(std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
            List l = a.as_list();
            r.check_items(l.size() + b.as_list().size());
            r.step(int64_t(l.size() + b.as_list().size()) / 16 + 1);
            l.insert(l.end(), b.as_list().begin(), b.as_list().end());
            return Value::sequence(a.seq_kind(), std::move(l));
        }
    }
    if (op == "%" && a.is_string()) return percent_format(r, a, b);   // "%s" % x
    const bool a_int = a.is_int() || a.is_bool(), b_int = b.is_int() || b.is_bool();
    const auto repeatable = [](const Value& v) { return v.is_string() || (v.is_list() && !v.is_dict_view()); };
    if (op == "*" && (a_int || b_int) && (repeatable(a) || repeatable(b))) {
        const Value& seq = a_int ? b : a;
        const int64_t n = std::max<int64_t>(0, to_i(a_int ? a : b));
        if (seq.is_string()) {
            const size_t len = seq.as_string().size();
            if (len && uint64_t(n) > r.opt.limits.max_output / len) r.check_size(r.opt.limits.max_output + 1);
            r.step(int64_t(len * size_t(n) / 4096));
            std::string s;
            for (int64_t i = 0; i < n; ++i) s += seq.as_string();
            return Value(std::move(s));
        }
        const size_t len = seq.as_list().size();
        if (len && uint64_t(n) > r.opt.limits.max_items / len) r.check_items(r.opt.limits.max_items + 1);
        r.step(int64_t(len * size_t(n)) / 16);
        List l;
        for (int64_t i = 0; i < n; ++i) l.insert(l.end(), seq.as_list().begin(), seq.as_list().end());
        return Value::sequence(seq.seq_kind(), std::move(l));
    }
    unsupported();
    return Value();
}

bool hashable(const Value& v) {
    if (v.is_dict()) return v.as_dict().is_namespace;   // a Namespace hashes by identity
    if (!v.is_list()) return true;
    if (!v.is_tuple()) return false;
    for (const Value& x : v.as_list())
        if (!hashable(x)) return false;
    return true;
}

namespace {

bool contains(Renderer& r, const Value& item, const Value& seq) {
    switch (seq.type()) {
        case Value::Type::String:
            if (!item.is_string()) r.fail(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
            return seq.as_string().find(item.as_string()) != std::string::npos;
        case Value::Type::List:
            for (const Value& v : seq.as_list())
                if (v == item) return true;
            return false;
        case Value::Type::Dict:
            if (!hashable(item)) r.fail(std::string("unhashable type: '") + type_name(item) + "'");
            return seq.as_dict().find_key(item) != nullptr;
        case Value::Type::Undefined: return false;
        case Value::Type::Generator:
            for (const Value& v : r.iterate(seq))
                if (v == item) return true;
            return false;
        default: r.fail(std::string("argument of type '") + type_name(seq) + "' is not iterable");
    }
}

bool compare(Renderer& r, const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return a == b;
    if (op == "!=") return !(a == b);
    if (op == "in") return contains(r, a, b);
    if (op == "notin") return !contains(r, a, b);
    if (op == "<") return less_than(r, a, b);
    if (op == ">") return less_than(r, b, a);
    if (op == "<=") return less_than(r, a, b) || a == b;
    return less_than(r, b, a) || a == b;   // >=
}

// Python's slice over n items: the indices in order.
std::vector<int64_t> slice_indices(Renderer& r, int64_t n, const Value& start, const Value& stop, const Value& step) {
    auto idx = [&](const Value& v) -> std::optional<int64_t> {
        if (v.is_none() || v.is_undefined()) return std::nullopt;
        if (!v.is_int() && !v.is_bool()) r.fail("slice indices must be integers or None");
        return to_i(v);
    };
    const int64_t st = idx(step).value_or(1);
    if (st == 0) r.fail("slice step cannot be zero");
    std::optional<int64_t> b = idx(start), e = idx(stop);
    int64_t lo, hi;
    if (st > 0) {
        lo = b ? (*b < 0 ? std::max<int64_t>(0, *b + n) : std::min(*b, n)) : 0;
        hi = e ? (*e < 0 ? std::max<int64_t>(0, *e + n) : std::min(*e, n)) : n;
    } else {
        lo = b ? (*b < 0 ? std::max<int64_t>(-1, *b + n) : std::min(*b, n - 1)) : n - 1;
        hi = e ? (*e < 0 ? std::max<int64_t>(-1, *e + n) : std::min(*e, n - 1)) : -1;
    }
    std::vector<int64_t> out;
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) out.push_back(i);
    r.step(int64_t(out.size() / 64));
    return out;
}

}  // namespace

Value Renderer::eval(const Expr& e, const ScopePtr& scope) {
    EvalDepth depth(eval_depth_, *this);
    line = e.line;
    switch (e.kind) {
        case Expr::Kind::Literal: return e.value;
        case Expr::Kind::Name: {
            if (const Value* v = scope->find(e.name)) return *v;
            Value g = global(e.name);
            return g.is_undefined() ? Value::undefined(e.name) : g;
        }
        case Expr::Kind::List: {
            List l;
            for (const auto& a : e.args) l.push_back(eval(*a, scope));
            return e.tuple ? Value::tuple(std::move(l)) : Value(std::move(l));
        }
        case Expr::Kind::Dict: {
            auto d = std::make_shared<Dict>();
            for (size_t i = 0; i < e.args.size(); ++i) {
                Value k = eval(*e.args[i], scope);
                if (!hashable(k) || k.is_undefined()) fail(std::string("unhashable type: '") + type_name(k) + "'");
                d->set(std::move(k), eval(*e.kwargs[i].second, scope));
            }
            return Value(std::move(d));
        }
        case Expr::Kind::Attr: {
            Value obj = eval(*e.a, scope);
            line = e.line;
            return attr(obj, e.name);
        }
        case Expr::Kind::Subscript: {
            Value obj = eval(*e.a, scope);
            Value key = eval(*e.b, scope);
            line = e.line;
            return item(obj, key);
        }
        case Expr::Kind::Slice: {
            Value obj = eval(*e.a, scope);
            const Value b = e.b ? eval(*e.b, scope) : Value(nullptr);
            const Value c = e.c ? eval(*e.c, scope) : Value(nullptr);
            const Value st = e.args.empty() ? Value(nullptr) : eval(*e.args[0], scope);
            line = e.line;
            if (obj.is_undefined()) fail(obj.undefined_message());
            if (obj.is_dict_view()) fail(std::string("'") + type_name(obj) + "' object is not subscriptable");
            if (obj.is_list()) {
                const List& src = obj.as_list();
                List out;
                for (int64_t i : slice_indices(*this, int64_t(src.size()), b, c, st)) out.push_back(src[size_t(i)]);
                return Value::sequence(obj.seq_kind(), std::move(out));   // a tuple's slice is a tuple
            }
            if (obj.is_string()) {
                const std::string& str = obj.as_string();
                std::vector<size_t> at;   // each character's first byte, then the end
                for (size_t k = 0; k < str.size();) {
                    at.push_back(k);
                    uint32_t cp;
                    k += utf8_decode(str, k, cp);
                }
                at.push_back(str.size());
                MarkedText out;
                for (int64_t i : slice_indices(*this, int64_t(at.size() - 1), b, c, st))
                    out.append_range(obj, at[size_t(i)], at[size_t(i) + 1]);
                return out.take();
            }
            if (obj.is_dict()) fail("unhashable type: 'slice'");
            fail(std::string("'") + type_name(obj) + "' object is not subscriptable");
        }
        case Expr::Kind::Call: {
            Value f = eval(*e.a, scope);
            Args args = eval_args(e, scope);
            line = e.line;
            return call(f, args);
        }
        case Expr::Kind::Filter: {
            Value v = e.a ? eval(*e.a, scope) : scope->find(kBodyKey) ? *scope->find(kBodyKey) : Value();
            Args args = eval_args(e, scope);
            line = e.line;
            step();
            return filter(e.name, v, args);
        }
        case Expr::Kind::Test: {
            Value v = eval(*e.a, scope);
            Args args = eval_args(e, scope);
            line = e.line;
            return Value(test(e.name, v, args) != e.negated);
        }
        case Expr::Kind::Unary: {
            Value v = eval(*e.a, scope);
            line = e.line;
            if (e.name == "not") return Value(!v.truthy());
            if (v.is_int() || v.is_bool()) {
                if (e.name == "+") return Value(to_i(v));
                if (to_i(v) == INT64_MIN) fail("integer overflow");
                return Value(-to_i(v));
            }
            if (v.is_float()) return Value(e.name == "-" ? -v.as_float() : v.as_float());
            if (v.is_undefined()) fail(v.undefined_message());
            fail("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
        }
        case Expr::Kind::Binary: {
            if (e.name == "and") {
                Value l = eval(*e.a, scope);
                return l.truthy() ? eval(*e.b, scope) : l;
            }
            if (e.name == "or") {
                Value l = eval(*e.a, scope);
                return l.truthy() ? l : eval(*e.b, scope);
            }
            Value l = eval(*e.a, scope);
            Value r = eval(*e.b, scope);
            line = e.line;
            return binary_op(*this, e.name, l, r);
        }
        case Expr::Kind::Compare: {
            Value l = eval(*e.a, scope);
            for (size_t i = 0; i < e.ops.size(); ++i) {
                Value r = eval(*e.args[i], scope);
                line = e.line;
                if (!compare(*this, e.ops[i], l, r)) return Value(false);
                l = std::move(r);
            }
            return Value(true);
        }
        case Expr::Kind::Cond: {
            if (eval(*e.a, scope).truthy()) return eval(*e.b, scope);
            return e.c ? eval(*e.c, scope) : Value::undefined("conditional expression");
        }
    }
    fail("unknown expression");
}

}  // namespace detail
}  // namespace ptxlm::jinja
