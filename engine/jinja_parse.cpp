// Jinja parser: tokens (jinja_lex.cpp) to the syntax tree, by recursive
// descent with jinja2's operator precedence. Nesting is bounded
// (Limits::max_nesting) so that no template can exhaust the stack.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "engine/jinja_ast.h"

namespace ptxlm::jinja::detail {
namespace {

[[noreturn]] void fail(int line, const std::string& msg) { throw Error("line " + std::to_string(line) + ": " + msg); }

// jinja2's find_undeclared: which of `names` a macro body reads before
// anything assigns them, visiting the nodes in jinja2's order (a for loop's
// target, a set's target or a nested macro's parameter of that name hides it
// from what follows). Nested macros and call blocks count, as in jinja2.
struct Undeclared {
    std::vector<std::string> names, found;

    void name(const std::string& n, bool load) {
        auto it = std::find(names.begin(), names.end(), n);
        if (it == names.end()) return;
        if (load) {
            if (std::find(found.begin(), found.end(), n) == found.end()) found.push_back(n);
        } else {
            names.erase(it);
        }
    }
    bool has(const char* n) const { return std::find(found.begin(), found.end(), n) != found.end(); }

    void expr(const ExprPtr& e) {
        if (!e) return;
        if (e->kind == Expr::Kind::Name) name(e->name, true);
        // Fields in jinja2's order: the operand (a; a conditional's test), then the rest.
        expr(e->a);
        if (e->kind == Expr::Kind::Dict) {
            for (size_t i = 0; i < e->args.size(); ++i) {
                expr(e->args[i]);
                expr(e->kwargs[i].second);
            }
            return;
        }
        if (e->kind == Expr::Kind::Call || e->kind == Expr::Kind::Filter || e->kind == Expr::Kind::Test) {
            for (const auto& x : e->args) expr(x);
            for (const auto& [k, x] : e->kwargs) expr(x);
            expr(e->b);
            expr(e->c);
            return;
        }
        expr(e->b);
        expr(e->c);
        for (const auto& x : e->args) expr(x);
        for (const auto& [k, x] : e->kwargs) expr(x);
    }
    void params(const std::vector<Param>& ps) {
        for (const Param& p : ps) name(p.name, false);
        for (const Param& p : ps) expr(p.default_value);
    }
    void body(const Body& b) {
        for (const StmtPtr& st : b) stmt(*st);
    }
    void stmt(const Stmt& st) {
        switch (st.kind) {
            case Stmt::Kind::Text:
            case Stmt::Kind::Break:
            case Stmt::Kind::Continue:
            case Stmt::Kind::Block:          // jinja2 does not look into blocks
            case Stmt::Kind::NeedsLoader: return;
            case Stmt::Kind::Output: expr(st.expr); return;
            case Stmt::Kind::If:
                for (const auto& [c, b] : st.branches) {
                    expr(c);
                    body(b);
                }
                body(st.else_body);
                return;
            case Stmt::Kind::For:
                for (const auto& t : st.targets) name(t, false);
                expr(st.expr);
                body(st.body);
                body(st.else_body);
                expr(st.cond);
                return;
            case Stmt::Kind::Set:
                if (st.text.empty())   // `set ns.x` assigns no name
                    for (const auto& t : st.targets) name(t, false);
                expr(st.expr);
                return;
            case Stmt::Kind::SetBlock:
                name(st.targets[0], false);
                expr(st.expr);
                body(st.body);
                return;
            case Stmt::Kind::Macro:
                params(st.params);
                body(st.body);
                return;
            case Stmt::Kind::CallBlock:
                expr(st.expr);
                params(st.params);
                body(st.body);
                return;
            case Stmt::Kind::FilterBlock:
                body(st.body);
                expr(st.expr);
                return;
            case Stmt::Kind::With:
                for (const Param& p : st.params) name(p.name, false);
                for (const Param& p : st.params) expr(p.default_value);
                body(st.body);
                return;
        }
    }
};

// A macro's or a call block's special names, as jinja2's compiler decides
// them (macro_body): each only when the body reads it and no parameter has
// its name; a `caller` parameter needs a default.
void special_names(Stmt& s) {
    Undeclared u;
    u.names = {"caller", "kwargs", "varargs"};
    u.body(s.body);
    auto param = [&](const char* n) -> const Param* {
        for (const Param& p : s.params)
            if (p.name == n) return &p;
        return nullptr;
    };
    if (u.has("caller") && param("caller") && !param("caller")->default_value)
        fail(s.line, "When defining macros or call blocks the special \"caller\" argument must be omitted or be given a default.");
    s.uses_caller = u.has("caller") && !param("caller");
    s.catch_kwargs = u.has("kwargs") && !param("kwargs");
    s.catch_varargs = u.has("varargs") && !param("varargs");
}

class Parser {
public:
    Parser(std::vector<Token> toks, const Limits& limits) : t_(std::move(toks)), limits_(limits) {}

    Body parse_all() {
        std::string end;
        Body body = parse_body({}, end);
        return body;
    }

private:
    std::vector<Token> t_;
    size_t i_ = 0;
    const Limits& limits_;
    int depth_ = 0;
    std::vector<std::string> blocks_;   // the block names so far: each may be defined once

    struct Depth {
        Parser& p;
        explicit Depth(Parser& p_, int line) : p(p_) {
            if (++p.depth_ > p.limits_.max_nesting) fail(line, "template nests too deeply (over " + std::to_string(p.limits_.max_nesting) + " levels)");
        }
        ~Depth() { --p.depth_; }
    };

    const Token& cur() const { return t_[i_]; }
    const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
    Token next() { return i_ + 1 < t_.size() ? t_[i_++] : t_[i_]; }
    bool is_op(const char* op) const { return cur().kind == Token::Kind::Op && cur().text == op; }
    bool is_name(const char* n) const { return cur().kind == Token::Kind::Name && cur().text == n; }
    bool skip_op(const char* op) {
        if (!is_op(op)) return false;
        ++i_;
        return true;
    }
    bool skip_name(const char* n) {
        if (!is_name(n)) return false;
        ++i_;
        return true;
    }
    static std::string describe(const Token& t) {
        switch (t.kind) {
            case Token::Kind::Text: return "text";
            case Token::Kind::VarBegin: return "'{{'";
            case Token::Kind::VarEnd: return "'}}'";
            case Token::Kind::BlockBegin: return "'{%'";
            case Token::Kind::BlockEnd: return "'%}'";
            case Token::Kind::End: return "end of template";
            case Token::Kind::String: return "string";
            default: return "'" + t.text + "'";
        }
    }
    void expect_op(const char* op) {
        if (!skip_op(op)) fail(cur().line, std::string("expected '") + op + "', got " + describe(cur()));
    }
    std::string expect_name() {
        if (cur().kind != Token::Kind::Name) fail(cur().line, "expected a name, got " + describe(cur()));
        return next().text;
    }
    void expect_block_end() {
        if (cur().kind != Token::Kind::BlockEnd) fail(cur().line, "expected '%}', got " + describe(cur()));
        ++i_;
    }
    static std::shared_ptr<Expr> node(Expr::Kind k, int line) {
        auto e = std::make_shared<Expr>();
        e->kind = k;
        e->line = line;
        return e;
    }

    // Statements up to a block tag named in `ends` (returned in `end`, the
    // tag name consumed, its '%}' not).
    Body parse_body(const std::vector<std::string>& ends, std::string& end) {
        Body body;
        while (true) {
            const Token& t = cur();
            if (t.kind == Token::Kind::End) {
                if (ends.empty()) return body;
                std::string want;
                for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
                fail(t.line, "unexpected end of template: unclosed block, expected " + want);
            }
            if (t.kind == Token::Kind::Text) {
                auto s = std::make_shared<Stmt>();
                s->kind = Stmt::Kind::Text;
                s->line = t.line;
                s->text = t.text;
                body.push_back(s);
                ++i_;
            } else if (t.kind == Token::Kind::VarBegin) {
                ++i_;
                auto s = std::make_shared<Stmt>();
                s->kind = Stmt::Kind::Output;
                s->line = t.line;
                s->expr = parse_tuple();
                if (cur().kind != Token::Kind::VarEnd) fail(cur().line, "expected '}}', got " + describe(cur()));
                ++i_;
                body.push_back(s);
            } else if (t.kind == Token::Kind::BlockBegin) {
                const Token& kw = peek();
                if (kw.kind != Token::Kind::Name) fail(kw.line, "expected a statement name, got " + describe(kw));
                for (const auto& e : ends) {
                    if (kw.text == e) {
                        i_ += 2;
                        end = e;
                        return body;
                    }
                }
                i_ += 2;
                body.push_back(parse_statement(kw.text, kw.line));
            } else {
                fail(t.line, "unexpected " + describe(t));
            }
        }
    }

    StmtPtr parse_statement(const std::string& kw, int line) {
        Depth d(*this, line);
        auto s = std::make_shared<Stmt>();
        s->line = line;
        std::string end;
        if (kw == "if") {
            s->kind = Stmt::Kind::If;
            ExprPtr cond = parse_tuple();
            expect_block_end();
            while (true) {
                Body b = parse_body({"elif", "else", "endif"}, end);
                s->branches.emplace_back(cond, std::move(b));
                if (end == "elif") {
                    cond = parse_tuple();
                    expect_block_end();
                    continue;
                }
                if (end == "else") {
                    expect_block_end();
                    s->else_body = parse_body({"endif"}, end);
                }
                break;
            }
        } else if (kw == "for") {
            s->kind = Stmt::Kind::For;
            do {
                s->targets.push_back(expect_name());
            } while (skip_op(","));
            if (!skip_name("in")) fail(cur().line, "expected 'in' in for loop, got " + describe(cur()));
            s->expr = parse_tuple(/*no_condexpr=*/true);
            if (skip_name("if")) s->cond = parse_expression();
            s->recursive = skip_name("recursive");
            expect_block_end();
            s->body = parse_body({"endfor", "else"}, end);
            if (end == "else") {
                expect_block_end();
                s->else_body = parse_body({"endfor"}, end);
            }
        } else if (kw == "set") {
            const std::string first = expect_name();
            if (skip_op(".")) {
                s->kind = Stmt::Kind::Set;
                s->targets = {first};
                s->text = expect_name();
                expect_op("=");
                s->expr = parse_tuple();
            } else {
                s->targets.push_back(first);
                while (skip_op(",")) s->targets.push_back(expect_name());
                if (skip_op("=")) {
                    s->kind = Stmt::Kind::Set;
                    s->expr = parse_tuple();
                } else {
                    if (s->targets.size() != 1) fail(line, "a block set assigns one name");
                    s->kind = Stmt::Kind::SetBlock;
                    if (is_op("|")) s->expr = parse_filters(nullptr);
                    expect_block_end();
                    s->body = parse_body({"endset"}, end);
                }
            }
        } else if (kw == "macro") {
            s->kind = Stmt::Kind::Macro;
            s->text = expect_name();
            parse_params(s->params);
            expect_block_end();
            s->body = parse_body({"endmacro"}, end);
            if (cur().kind == Token::Kind::Name && cur().text == s->text) ++i_;
            special_names(*s);
        } else if (kw == "call") {
            s->kind = Stmt::Kind::CallBlock;
            if (is_op("(")) parse_params(s->params);
            s->expr = parse_expression();
            if (s->expr->kind != Expr::Kind::Call) fail(line, "expected a call after 'call'");
            expect_block_end();
            s->body = parse_body({"endcall"}, end);
            special_names(*s);
        } else if (kw == "filter") {
            s->kind = Stmt::Kind::FilterBlock;
            s->expr = parse_filters(nullptr, /*first_without_bar=*/true);
            expect_block_end();
            s->body = parse_body({"endfilter"}, end);
        } else if (kw == "with") {   // {% with a = 1, b = x %}: a scope with those names
            s->kind = Stmt::Kind::With;
            while (cur().kind != Token::Kind::BlockEnd) {
                if (!s->params.empty()) expect_op(",");
                Param p;
                p.name = expect_name();
                expect_op("=");
                p.default_value = parse_expression();
                s->params.push_back(std::move(p));
            }
            expect_block_end();
            s->body = parse_body({"endwith"}, end);
        } else if (kw == "include" || kw == "import" || kw == "from" || kw == "extends") {
            // Parsed as jinja2 parses them; running one fails as in jinja2, whose
            // environment in apply_chat_template has no loader to read templates.
            s->kind = Stmt::Kind::NeedsLoader;
            s->text = "'" + kw + "' is not supported: a chat template cannot load other templates";
            parse_expression();
            if (kw == "include" && is_name("ignore") && peek().kind == Token::Kind::Name && peek().text == "missing") i_ += 2;
            if (kw == "import") {
                if (!skip_name("as")) fail(cur().line, "expected 'as' in import, got " + describe(cur()));
                expect_name();
            }
            if (kw == "from") {
                if (!skip_name("import")) fail(cur().line, "expected 'import', got " + describe(cur()));
                do {
                    if ((is_name("with") || is_name("without")) && peek().kind == Token::Kind::Name && peek().text == "context") break;
                    expect_name();
                    if (skip_name("as")) expect_name();
                } while (skip_op(","));
            }
            if (kw != "extends" && (is_name("with") || is_name("without")) && peek().kind == Token::Kind::Name &&
                peek().text == "context")
                i_ += 2;
        } else if (kw == "block") {   // rendered where it stands: a chat template has no inheritance
            s->kind = Stmt::Kind::Block;
            s->text = expect_name();
            for (const auto& b : blocks_)
                if (b == s->text) fail(line, "block '" + s->text + "' defined twice");
            blocks_.push_back(s->text);
            s->scoped = skip_name("scoped");
            s->required = skip_name("required");
            expect_block_end();
            s->body = parse_body({"endblock"}, end);
            if (cur().kind == Token::Kind::Name && cur().text == s->text) ++i_;
            if (s->required)
                for (const StmtPtr& b : s->body)
                    if (b->kind != Stmt::Kind::Text || b->text.find_first_not_of(" \t\r\n") != std::string::npos)
                        fail(line, "Required blocks can only contain comments or whitespace");
        } else if (kw == "break" || kw == "continue") {
            s->kind = kw == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
        } else if (kw == "generation") {
            // Hugging Face's assistant-mask marker: the body renders as is.
            s->kind = Stmt::Kind::If;
            expect_block_end();
            auto t = node(Expr::Kind::Literal, line);
            t->value = true;
            s->branches.emplace_back(t, parse_body({"endgeneration"}, end));
        } else {
            fail(line, "unknown or unsupported tag '" + kw + "'");
        }
        expect_block_end();
        return s;
    }

    void parse_params(std::vector<Param>& params) {
        expect_op("(");
        while (!skip_op(")")) {
            if (!params.empty()) expect_op(",");
            if (skip_op(")")) break;
            Param p;
            p.name = expect_name();
            for (const Param& q : params)
                if (q.name == p.name) fail(cur().line, "duplicate argument '" + p.name + "' in the definition");
            if (skip_op("=")) p.default_value = parse_expression();
            else if (!params.empty() && params.back().default_value) fail(cur().line, "non-default argument follows default argument");
            params.push_back(std::move(p));
        }
    }

    // Expressions, loosest first, as jinja2's parser.
    ExprPtr parse_tuple(bool no_condexpr = false) {
        const int line = cur().line;
        ExprPtr first = no_condexpr ? parse_or() : parse_expression();
        if (!is_op(",")) return first;
        auto t = node(Expr::Kind::List, line);
        t->tuple = true;
        t->args.push_back(first);
        while (skip_op(",")) {
            if (cur().kind == Token::Kind::VarEnd || cur().kind == Token::Kind::BlockEnd || is_op(")")) break;
            t->args.push_back(no_condexpr ? parse_or() : parse_expression());
        }
        return t;
    }
    ExprPtr parse_expression() {
        Depth d(*this, cur().line);
        ExprPtr e = parse_or();
        while (is_name("if")) {
            auto c = node(Expr::Kind::Cond, cur().line);
            ++i_;
            c->b = e;
            c->a = parse_or();
            if (skip_name("else")) c->c = parse_expression();
            e = c;
        }
        return e;
    }
    ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
        auto b = node(Expr::Kind::Binary, line);
        b->name = op;
        b->a = std::move(l);
        b->b = std::move(r);
        return b;
    }
    ExprPtr parse_or() {
        ExprPtr l = parse_and();
        while (is_name("or")) {
            const int line = next().line;
            l = binary("or", l, parse_and(), line);
        }
        return l;
    }
    ExprPtr parse_and() {
        ExprPtr l = parse_not();
        while (is_name("and")) {
            const int line = next().line;
            l = binary("and", l, parse_not(), line);
        }
        return l;
    }
    ExprPtr parse_not() {
        if (is_name("not")) {
            Depth d(*this, cur().line);
            auto u = node(Expr::Kind::Unary, next().line);
            u->name = "not";
            u->a = parse_not();
            return u;
        }
        return parse_compare();
    }
    ExprPtr parse_compare() {
        const int line = cur().line;
        ExprPtr first = parse_math1();
        std::shared_ptr<Expr> cmp;
        while (true) {
            std::string op;
            if (cur().kind == Token::Kind::Op &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
                op = next().text;
            } else if (is_name("in")) {
                ++i_;
                op = "in";
            } else if (is_name("not") && peek().kind == Token::Kind::Name && peek().text == "in") {
                i_ += 2;
                op = "notin";
            } else {
                break;
            }
            if (!cmp) {
                cmp = node(Expr::Kind::Compare, line);
                cmp->a = first;
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(parse_math1());
        }
        return cmp ? cmp : first;
    }
    ExprPtr parse_math1() {
        ExprPtr l = parse_concat();
        while (is_op("+") || is_op("-")) {
            const Token t = next();
            l = binary(t.text, l, parse_concat(), t.line);
        }
        return l;
    }
    ExprPtr parse_concat() {
        ExprPtr l = parse_math2();
        while (is_op("~")) {
            const int line = next().line;
            l = binary("~", l, parse_math2(), line);
        }
        return l;
    }
    ExprPtr parse_math2() {
        ExprPtr l = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const Token t = next();
            l = binary(t.text, l, parse_pow(), t.line);
        }
        return l;
    }
    ExprPtr parse_pow() {
        ExprPtr l = parse_unary();
        while (is_op("**")) {
            const int line = next().line;
            l = binary("**", l, parse_unary(), line);
        }
        return l;
    }
    ExprPtr parse_unary(bool with_filter = true) {
        Depth d(*this, cur().line);
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            auto u = node(Expr::Kind::Unary, cur().line);
            u->name = next().text;
            u->a = parse_unary(false);
            e = u;
        } else {
            e = parse_primary();
        }
        e = parse_postfix(e);
        if (with_filter) e = parse_filters(e);
        return e;
    }
    ExprPtr parse_primary() {
        const Token& t = cur();
        auto lit = [&](Value v) {
            auto e = node(Expr::Kind::Literal, t.line);
            e->value = std::move(v);
            return e;
        };
        switch (t.kind) {
            case Token::Kind::Name: {
                const std::string n = t.text;
                auto e = (n == "true" || n == "True") ? lit(true)
                         : (n == "false" || n == "False") ? lit(false)
                         : (n == "none" || n == "None") ? lit(nullptr)
                                                         : nullptr;
                if (!e) {
                    e = node(Expr::Kind::Name, t.line);
                    e->name = n;
                }
                ++i_;
                return e;
            }
            case Token::Kind::String: {
                std::string s;
                const int line = t.line;
                while (cur().kind == Token::Kind::String) s += next().text;   // adjacent literals join
                auto e = node(Expr::Kind::Literal, line);
                e->value = Value::code(std::move(s));   // the template's own text
                return e;
            }
            case Token::Kind::Int: { auto e = lit(t.i); ++i_; return e; }
            case Token::Kind::Float: { auto e = lit(t.f); ++i_; return e; }
            default: break;
        }
        if (is_op("(")) {
            ++i_;
            if (skip_op(")")) {   // ()
                auto e = node(Expr::Kind::List, t.line);
                e->tuple = true;
                return e;
            }
            ExprPtr e = parse_tuple();
            expect_op(")");
            return e;
        }
        if (is_op("[")) {
            auto l = node(Expr::Kind::List, next().line);
            while (!skip_op("]")) {
                if (!l->args.empty()) expect_op(",");
                if (skip_op("]")) break;
                l->args.push_back(parse_expression());
            }
            return l;
        }
        if (is_op("{")) {
            auto d = node(Expr::Kind::Dict, next().line);
            while (!skip_op("}")) {
                if (!d->args.empty()) expect_op(",");
                if (skip_op("}")) break;
                d->args.push_back(parse_expression());
                expect_op(":");
                d->kwargs.emplace_back("", parse_expression());
            }
            return d;
        }
        fail(t.line, "unexpected " + describe(t));
    }
    ExprPtr parse_postfix(ExprPtr e) {
        while (true) {
            const int line = cur().line;
            if (skip_op(".")) {
                if (cur().kind == Token::Kind::Int) {
                    auto s = node(Expr::Kind::Subscript, line);
                    s->a = e;
                    auto k = node(Expr::Kind::Literal, line);
                    k->value = next().i;
                    s->b = k;
                    e = s;
                } else {
                    auto a = node(Expr::Kind::Attr, line);
                    a->a = e;
                    a->name = expect_name();
                    e = a;
                }
            } else if (skip_op("[")) {
                e = parse_subscript(e, line);
            } else if (is_op("(")) {
                auto c = node(Expr::Kind::Call, line);
                c->a = e;
                parse_call_args(*c);
                e = c;
            } else {
                return e;
            }
        }
    }
    ExprPtr parse_subscript(ExprPtr obj, int line) {
        ExprPtr parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
            if (is_op(":")) {
                slice = true;
                ++i_;
                if (++n > 2) fail(line, "bad slice");
                continue;
            }
            if (is_op("]")) break;
            if (parts[n]) fail(cur().line, "expected ':' or ']', got " + describe(cur()));
            parts[n] = parse_expression();
        }
        expect_op("]");
        std::shared_ptr<Expr> s;
        if (slice) {
            s = node(Expr::Kind::Slice, line);
            s->b = parts[0];
            s->c = parts[1];
            if (parts[2]) s->args.push_back(parts[2]);
        } else {
            if (!parts[0]) fail(line, "empty subscript");
            s = node(Expr::Kind::Subscript, line);
            s->b = parts[0];
        }
        s->a = obj;
        return s;
    }
    void parse_call_args(Expr& c) {
        expect_op("(");
        bool first = true;
        while (!skip_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (skip_op(")")) break;
            // As jinja2: positional, *args, keywords, **kwargs, in that order.
            const int line = cur().line;
            if (skip_op("*")) {
                if (c.b || c.c) fail(line, "invalid syntax for function call expression");
                c.b = parse_expression();
            } else if (skip_op("**")) {
                if (c.c) fail(line, "invalid syntax for function call expression");
                c.c = parse_expression();
            } else if (cur().kind == Token::Kind::Name && peek().kind == Token::Kind::Op && peek().text == "=") {
                if (c.c) fail(line, "invalid syntax for function call expression");
                std::string k = next().text;
                ++i_;
                for (const auto& [name, _] : c.kwargs)
                    if (name == k) fail(line, "keyword argument repeated: " + k);
                c.kwargs.emplace_back(std::move(k), parse_expression());
            } else {
                if (!c.kwargs.empty()) fail(line, "positional argument after keyword argument");
                if (c.b || c.c) fail(line, "invalid syntax for function call expression");
                c.args.push_back(parse_expression());
            }
        }
    }
    // `|f(args)` and `is [not] test args` after an operand (null operand:
    // {% filter %} and block set filters).
    ExprPtr parse_filters(ExprPtr e, bool first_without_bar = false) {
        while (true) {
            const int line = cur().line;
            if (first_without_bar || skip_op("|")) {
                first_without_bar = false;
                auto f = node(Expr::Kind::Filter, line);
                f->a = e;
                f->name = expect_name();
                while (skip_op(".")) f->name += "." + expect_name();
                if (is_op("(")) parse_call_args(*f);
                e = f;
            } else if (is_name("is")) {
                ++i_;
                auto t = node(Expr::Kind::Test, line);
                t->a = e;
                t->negated = skip_name("not");
                t->name = expect_name();
                while (skip_op(".")) t->name += "." + expect_name();
                if (is_op("(")) {
                    parse_call_args(*t);
                } else if (cur().kind == Token::Kind::String || cur().kind == Token::Kind::Int || cur().kind == Token::Kind::Float ||
                           is_op("[") || is_op("{") ||
                           (cur().kind == Token::Kind::Name && cur().text != "else" && cur().text != "or" && cur().text != "and" &&
                            cur().text != "if" && cur().text != "in" && cur().text != "not" && cur().text != "is")) {
                    // A test's single argument without parentheses: `is divisibleby 3`.
                    ExprPtr arg = parse_primary();
                    t->args.push_back(parse_postfix(arg));
                }
                e = t;
            } else {
                return e;
            }
        }
    }
};

}  // namespace

Body parse_template(std::string_view source, const Limits& limits) {
    Parser parser(lex_template(source), limits);
    return parser.parse_all();
}

}  // namespace ptxlm::jinja::detail
