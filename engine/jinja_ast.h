// The Jinja interpreter's syntax tree (internal to engine/jinja*.cpp): the
// parser (jinja_parse.cpp) builds it, the renderer (jinja_render.cpp) walks it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/jinja.h"

namespace ptxlm::jinja::detail {

struct Expr;
struct Stmt;
using ExprPtr = std::shared_ptr<const Expr>;
using StmtPtr = std::shared_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
    enum class Kind {
        Literal,     // value
        Name,        // name
        List,        // args; a tuple when `tuple`
        Dict,        // kwargs' values with keys in args (key expressions)
        Attr,        // a.name
        Subscript,   // a[b]
        Slice,       // a[b:c:d], each optional (null)
        Call,        // a(args, kwargs, *b, **c); b and c may be null
        Filter,      // a|name(args, kwargs, *b, **c); a is null in {% filter %}
        Test,        // a is [not] name(args, kwargs, *b, **c)
        Unary,       // name: "-", "+", "not"; a
        Binary,      // name: the operator; a, b ("and", "or", "in", "notin", "~", "+", ...)
        Compare,     // a, then ops: args[i] compared with ops[i]
        Cond,        // b if a else c (c may be null)
    };
    Kind kind;
    int line = 0;
    std::string name;
    Value value;
    ExprPtr a, b, c;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    std::vector<std::string> ops;
    bool negated = false;
    bool tuple = false;   // List: (a, b) rather than [a, b]
};

struct Param {
    std::string name;
    ExprPtr default_value;   // null: required
};

struct Stmt {
    enum class Kind {
        Text,        // text
        Output,      // {{ expr }}
        If,          // branches (expr, body); else_body
        For,         // targets in expr [if cond] [recursive] body [else else_body]
        Set,         // targets = expr, or ns_attr: targets[0].name = expr
        SetBlock,    // targets[0] = rendered body (|filter via expr with a null operand)
        Macro,       // name(params) body
        CallBlock,   // expr (a Call) with caller(params) = body
        FilterBlock, // expr (Filter chain over a null operand) applied to body
        With,        // body in a scope of params (name = expression, each given)
        Block,       // {% block text [scoped] %}: body, rendered in place (no inheritance)
        NeedsLoader, // include, import, from, extends: fails with `text` when run
        Break,
        Continue,
    };
    Kind kind;
    int line = 0;
    std::string text;                          // Text; Macro's name; Set's attribute
    ExprPtr expr, cond;
    std::vector<std::string> targets;
    std::vector<std::pair<ExprPtr, Body>> branches;
    Body body, else_body;
    std::vector<Param> params;
    bool recursive = false;   // For: `loop(items)` renders the loop over items, a level deeper
    bool scoped = false;      // Block: sees the variables around it (else only the top level's)
    bool required = false;    // Block: `required`, which fails when rendered without a child template
    // Macro, CallBlock: what the body reads of the names jinja2 gives a macro
    // only when its body mentions them: caller (the {% call %} block),
    // varargs (extra positional arguments) and kwargs (extra keywords).
    bool uses_caller = false, catch_varargs = false, catch_kwargs = false;
};

// A string being built, with the byte ranges the template wrote (Spans).
struct MarkedText {
    std::string text;
    Spans code;

    void append_code(std::string_view s);   // the template's own bytes
    void append_data(std::string_view s);   // the caller's
    // v.str() with v's marks: a string's own; the text of a number, a bool or
    // none is the template's; a list's or a dict's (their repr) the caller's.
    void append(const Value& v);
    // Bytes [b, e) of the string v, with their marks.
    void append_range(const Value& v, size_t b, size_t e);
    Value take();   // as a Value (a plain string when nothing is marked)
};

// Value helpers shared by jinja.cpp and jinja_render.cpp.
std::string float_repr(double d);                  // Python's repr(float)
std::string string_repr(const std::string& s, bool ascii = false);   // Python's repr(str); ascii(str) when ascii
// One UTF-8 sequence at s[i]: its length (1 for a stray byte) and code point.
size_t utf8_decode(const std::string& s, size_t i, uint32_t& cp);
// Python's str.isspace() for one code point.
bool is_py_space(uint32_t cp);
struct JsonStyle {                                  // json.dumps' options
    std::optional<std::string> indent;
    std::string item_sep = ", ", key_sep = ": ";
    bool ensure_ascii = false, sort_keys = false;
};
void json_string(std::string& out, const std::string& s, bool ensure_ascii);
void json_dump(std::string& out, const Value& v, const JsonStyle& style, int level = 0);

// A lexer token (jinja_lex.cpp); the parser reads them.
struct Token {
    enum class Kind { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };
    Kind kind;
    std::string text;   // Text, Name, String (unescaped), Op; Int/Float's value below
    int64_t i = 0;
    double f = 0;
    int line = 1;
};

std::vector<Token> lex_template(std::string_view source);

// Parses a template's source into its statements.
Body parse_template(std::string_view source, const Limits& limits);

}  // namespace ptxlm::jinja::detail

namespace ptxlm::jinja::detail {

// A variable scope: the template's top level, a for loop's iteration, a
// macro call. `set` writes the innermost scope; lookups walk outwards.
struct Scope {
    std::shared_ptr<Scope> parent;
    std::vector<std::pair<std::string, Value>> vars;

    const Value* find(std::string_view name) const {
        for (const Scope* s = this; s; s = s->parent.get())
            for (const auto& [k, v] : s->vars)
                if (k == name) return &v;
        return nullptr;
    }
    void set(std::string_view name, Value v) {
        for (auto& [k, old] : vars) {
            if (k == name) {
                old = std::move(v);
                return;
            }
        }
        vars.emplace_back(std::string(name), std::move(v));
    }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

// A name no template can write: the body text a {% filter %} block (or a
// filtered block set) filters.
inline constexpr const char* kBodyKey = "\x01" "body";

// One render: the tree walk, its limits and the builtins.
class Renderer {
public:
    explicit Renderer(const RenderOptions& options) : opt(options) {}
    Rendered run(const Body& body, const Value& context);

    Value eval(const Expr& e, const ScopePtr& scope);
    Flow exec(const Body& body, const ScopePtr& scope, MarkedText& out);
    Value call(const Value& f, Args& args);
    // A call's, filter's or test's arguments, evaluated in order.
    Args eval_args(const Expr& e, const ScopePtr& scope);

    [[noreturn]] void fail(const std::string& msg) const;
    // Counts work against Limits::max_steps.
    void step(int64_t n = 1);
    // A string about to reach n bytes: within Limits::max_output?
    void check_size(size_t n) const;
    void check_items(size_t n) const;    // a list about to hold n items
    // Python's iteration: list items, dict keys, string characters; empty for undefined.
    List iterate(const Value& v);

    // jinja_builtins.cpp
    Value filter(const std::string& name, const Value& v, Args& args);
    Value lazy_filter(const std::string& name, const Value& v, Args& args);   // map, select, ...
    bool test(const std::string& name, const Value& v, Args& args);
    Value attr(const Value& obj, const std::string& name);     // obj.name
    Value item(const Value& obj, const Value& key);            // obj[key]
    Value global(const std::string& name);                     // range, namespace, ... (undefined if none)

    const RenderOptions& opt;
    int line = 0;             // the line being evaluated, for errors
    ScopePtr root;

private:
    int64_t steps_ = 0;
    int call_depth_ = 0;
    int eval_depth_ = 0;
    friend struct CallDepth;
    // A macro's call (or a call block's caller, `name` "caller"), bound as jinja2's Macro.__call__ binds it.
    Value call_macro(const Stmt& m, const std::string& name, const std::weak_ptr<Scope>& def_scope, Args& args);
    void assign(const Stmt& s, const ScopePtr& scope, Value v);
    // A for loop over seq at depth (1; deeper for a recursive loop's loop(items)).
    void run_loop(const Stmt& s, const ScopePtr& scope, const Value& seq, int64_t depth, MarkedText& out);
};

// One level of evaluation (an expression or a body): the parser bounds the
// template's nesting, this bounds nesting across macro calls.
struct EvalDepth {
    int& d;
    EvalDepth(int& d_, const Renderer& r) : d(d_) {
        if (++d > 4 * r.opt.limits.max_nesting + 4 * r.opt.limits.max_call_depth) r.fail("render stopped: evaluation nests too deeply");
    }
    ~EvalDepth() { --d; }
};

const char* type_name(const Value& v);
// A call's argument at position i or named `name`; null if absent.
const Value* arg(const Args& a, size_t i, std::string_view name);
// markupsafe's escape: & < > " ' as entities.
std::string html_escape(const std::string& s);
// Python's len() of a string: code points.
size_t utf8_length(const std::string& s);
std::vector<std::string> utf8_chars(const std::string& s);
// Python's str.splitlines() (\n, \r and \r\n end a line; no trailing empty line).
std::vector<std::string> split_lines(const std::string& s);
// Python's str.split (sep empty: on whitespace runs).
List py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit);
// Python's <, for sort and comparisons; fails on unorderable types.
bool less_than(Renderer& r, const Value& a, const Value& b);
// Python's binary operators (+ - * / // % ** ~) on two values.
Value binary_op(Renderer& r, const std::string& op, const Value& a, const Value& b);
// Python's printf-style `fmt % args` (jinja_format.cpp): args a tuple of
// values, a mapping for %(name)s, or one value.
Value percent_format(Renderer& r, const Value& fmt, const Value& args);
// Python's hash() would accept v (a dict key, `x in dict`).
bool hashable(const Value& v);

}  // namespace ptxlm::jinja::detail
