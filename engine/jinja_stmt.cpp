// The Jinja tree walk's statements, with jinja2's scoping (a for loop's
// iteration, a macro call and a with block are scopes, an if is not): for
// loops (recursive ones too) and their `loop` object, macros and call blocks
// bound as jinja2's Macro binds its arguments, and the render's entry point.
#include "engine/jinja_ast.h"

namespace ptxlm::jinja {
namespace detail {

namespace {

Value function(std::string name, std::string repr, std::function<Value(Renderer&, Args&)> call,
               std::shared_ptr<Dict> attrs = nullptr) {
    auto f = std::make_shared<Function>();
    f->name = std::move(name);
    f->repr = std::move(repr);
    f->call = std::move(call);
    f->attrs = std::move(attrs);
    return Value(std::shared_ptr<const Function>(std::move(f)));
}

// loop.cycle(a, b, ...): the argument at this iteration's index, round robin.
Value cycle(int64_t index) {
    return function("cycle", "", [index](Renderer& r, Args& a) {
        if (a.pos.empty()) r.fail("no items for cycling given");
        return a.pos[size_t(index % int64_t(a.pos.size()))];
    });
}

// loop.changed(*values): whether the values differ from those of the last
// call in this loop (the first call: true). `last` is the loop's own.
Value changed(std::shared_ptr<std::optional<Value>> last) {
    return function("changed", "", [last](Renderer&, Args& a) {
        Value now = Value::tuple(a.pos);
        if (*last && **last == now) return Value(false);
        *last = std::move(now);
        return Value(true);
    });
}

}  // namespace

void Renderer::assign(const Stmt& s, const ScopePtr& scope, Value v) {
    if (!s.text.empty()) {   // set ns.attr
        const Value* ns = scope->find(s.targets[0]);
        if (!ns || !ns->is_dict() || !ns->as_dict().is_namespace) fail("cannot assign attribute on non-namespace object");
        ns->as_dict().set(s.text, std::move(v));
        return;
    }
    if (s.targets.size() == 1) {
        scope->set(s.targets[0], std::move(v));
        return;
    }
    List items = iterate(v);
    if (items.size() != s.targets.size())
        fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(s.targets.size()));
    for (size_t i = 0; i < items.size(); ++i) scope->set(s.targets[i], items[i]);
}

void Renderer::run_loop(const Stmt& s, const ScopePtr& scope, const Value& seq, int64_t depth, MarkedText& out) {
    List items = iterate(seq);
    line = s.line;
    auto bind = [&](const ScopePtr& it, const Value& v) {
        if (s.targets.size() == 1) {
            it->set(s.targets[0], v);
            return;
        }
        List parts = iterate(v);
        if (parts.size() != s.targets.size())
            fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.targets.size()));
        for (size_t i = 0; i < parts.size(); ++i) it->set(s.targets[i], parts[i]);
    };
    if (s.cond) {   // `for x in xs if c`: filtered first, so loop.* count only what passes
        List kept;
        for (const Value& v : items) {
            step();
            auto it = std::make_shared<Scope>();
            it->parent = scope;
            bind(it, v);
            if (eval(*s.cond, it).truthy()) kept.push_back(v);
        }
        items = std::move(kept);
    }
    // `loop` is jinja2's LoopContext: attributes, and a call that renders this
    // loop's body over other items one level deeper (a recursive loop's
    // loop(children)). It holds its scope weakly: a loop object kept in a
    // namespace must not keep the scope that holds the namespace alive.
    const Stmt* sp = &s;
    const std::weak_ptr<Scope> def = scope;
    auto recurse = [sp, def, depth](Renderer& r, Args& a) -> Value {
        if (!sp->recursive) r.fail("The loop must have the 'recursive' marker to be called recursively.");
        if (a.pos.size() != 1 || !a.kw.empty()) r.fail("loop() takes exactly one argument, the items to loop over");
        const ScopePtr at = def.lock();
        if (!at) r.fail("loop() called after its loop ended");
        MarkedText text;
        r.run_loop(*sp, at, a.pos[0], depth + 1, text);
        return text.take();
    };
    auto last_changed = std::make_shared<std::optional<Value>>();
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
        step();
        auto it = std::make_shared<Scope>();
        it->parent = scope;
        auto attrs = std::make_shared<Dict>();
        attrs->items = {{"index", Value(i + 1)},
                        {"index0", Value(i)},
                        {"revindex", Value(n - i)},
                        {"revindex0", Value(n - i - 1)},
                        {"first", Value(i == 0)},
                        {"last", Value(i == n - 1)},
                        {"length", Value(n)},
                        {"depth", Value(depth)},
                        {"depth0", Value(depth - 1)},
                        {"previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("previtem", "there is no previous item")},
                        {"nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("nextitem", "there is no next item")},
                        {"cycle", cycle(i)},
                        {"changed", changed(last_changed)}};
        it->vars.emplace_back("loop", function("loop", "<LoopContext " + std::to_string(i + 1) + "/" + std::to_string(n) + ">", recurse,
                                               std::move(attrs)));
        bind(it, items[size_t(i)]);
        if (exec(s.body, it, out) == Flow::Break) break;
    }
    if (n == 0 && !s.else_body.empty()) {   // at every level of a recursive loop, as in jinja2
        auto it = std::make_shared<Scope>();
        it->parent = scope;
        exec(s.else_body, it, out);
    }
}

Value Renderer::call_macro(const Stmt& m, const std::string& name, const std::weak_ptr<Scope>& def_scope, Args& args) {
    auto scope = std::make_shared<Scope>();
    scope->parent = def_scope.lock();
    const std::string who = "macro '" + name + "'";
    if (!scope->parent) fail(who + " called after its scope ended");
    // As jinja2's Macro.__call__: positional arguments fill the parameters in
    // order; keywords fill only those left (so m(1, a=2) is a stray keyword,
    // for kwargs or an error); `caller`, `kwargs` and `varargs` exist only
    // where the body reads them (the parser's special_names).
    std::vector<std::pair<std::string, Value>> kw = args.kw;
    auto pop = [&kw](const std::string& k, Value& v) {
        for (auto it = kw.begin(); it != kw.end(); ++it) {
            if (it->first == k) {
                v = std::move(it->second);
                kw.erase(it);
                return true;
            }
        }
        return false;
    };
    const size_t count = m.params.size();
    const size_t given = std::min(args.pos.size(), count);
    std::vector<bool> bound(count, false);
    for (size_t i = 0; i < given; ++i) {
        scope->set(m.params[i].name, args.pos[i]);
        bound[i] = true;
    }
    for (size_t i = given; i < count; ++i) {
        Value v;
        if (pop(m.params[i].name, v)) {
            scope->set(m.params[i].name, std::move(v));
            bound[i] = true;
        }
    }
    if (m.uses_caller) {
        Value c;
        if (!pop("caller", c) || c.is_none()) c = Value::undefined("caller", "No caller defined");
        scope->set("caller", std::move(c));
    }
    if (m.catch_kwargs) {
        Value d = Value::dict();
        for (auto& [k, v] : kw) d.as_dict().items.emplace_back(Value(k), std::move(v));
        scope->set("kwargs", std::move(d));
    } else if (!kw.empty()) {
        for (const auto& [k, v] : kw)
            if (k == "caller") fail(who + " was invoked with two values for the special caller argument. This is most likely a bug.");
        fail(who + " takes no keyword argument '" + kw[0].first + "'");
    }
    if (m.catch_varargs) {
        scope->set("varargs", Value::tuple(List(args.pos.begin() + std::ptrdiff_t(given), args.pos.end())));
    } else if (args.pos.size() > count) {
        fail(who + " takes not more than " + std::to_string(count) + " argument(s)");
    }
    // The parameters not given: their defaults, in order (each sees those before it).
    for (size_t i = 0; i < count; ++i) {
        if (bound[i]) continue;
        const Param& p = m.params[i];
        scope->set(p.name, p.default_value ? eval(*p.default_value, scope)
                                           : Value::undefined(p.name, "parameter '" + p.name + "' was not provided"));
    }
    MarkedText out;
    exec(m.body, scope, out);
    return out.take();
}

Flow Renderer::exec(const Body& body, const ScopePtr& scope, MarkedText& out) {
    EvalDepth depth(eval_depth_, *this);
    for (const StmtPtr& sp : body) {
        const Stmt& s = *sp;
        line = s.line;
        switch (s.kind) {
            case Stmt::Kind::Text:
                check_size(out.text.size() + s.text.size());
                out.append_code(s.text);
                break;
            case Stmt::Kind::Output: {
                const Value v = eval(*s.expr, scope);
                if (v.is_string()) check_size(out.text.size() + v.as_string().size());
                out.append(v);
                check_size(out.text.size());
                break;
            }
            case Stmt::Kind::If: {
                const Body* taken = &s.else_body;
                for (const auto& [cond, b] : s.branches) {
                    if (eval(*cond, scope).truthy()) {
                        taken = &b;
                        break;
                    }
                }
                if (const Flow f = exec(*taken, scope, out); f != Flow::Normal) return f;   // break/continue
                break;
            }
            case Stmt::Kind::For: {
                const Value seq = eval(*s.expr, scope);
                run_loop(s, scope, seq, 1, out);
                break;
            }
            case Stmt::Kind::Set: assign(s, scope, eval(*s.expr, scope)); break;
            case Stmt::Kind::SetBlock: {
                MarkedText text;
                exec(s.body, scope, text);
                Value v = text.take();
                if (s.expr) {
                    auto fs = std::make_shared<Scope>();
                    fs->parent = scope;
                    fs->vars.emplace_back(kBodyKey, v);
                    v = eval(*s.expr, fs);
                }
                scope->set(s.targets[0], std::move(v));
                break;
            }
            case Stmt::Kind::Macro: {
                // jinja2's Macro object: callable, with name, arguments, catch_kwargs, catch_varargs and caller.
                std::weak_ptr<Scope> def = scope;
                auto attrs = std::make_shared<Dict>();
                List names;
                for (const Param& p : s.params) names.push_back(Value::code(p.name));
                attrs->items = {{"name", Value::code(s.text)},
                                {"arguments", Value::tuple(std::move(names))},
                                {"catch_kwargs", Value(s.catch_kwargs)},
                                {"catch_varargs", Value(s.catch_varargs)},
                                {"caller", Value(s.uses_caller)}};
                scope->set(s.text, function(s.text, "<Macro '" + s.text + "'>",
                                            [sp, def](Renderer& r, Args& a) { return r.call_macro(*sp, sp->text, def, a); },
                                            std::move(attrs)));
                break;
            }
            case Stmt::Kind::CallBlock: {
                // jinja2 passes the block to the macro as the keyword argument `caller`.
                std::weak_ptr<Scope> def = scope;
                Value caller = function("caller", "<Macro anonymous>",
                                        [sp, def](Renderer& r, Args& a) { return r.call_macro(*sp, "caller", def, a); });
                const Expr& c = *s.expr;
                Value f = eval(*c.a, scope);
                if (!f.is_function()) fail("'call' needs a macro");
                Args args = eval_args(c, scope);
                for (const auto& [k, v] : args.kw)
                    if (k == "caller") fail("keyword argument repeated: caller");
                args.kw.emplace_back("caller", std::move(caller));
                out.append(call(f, args));
                check_size(out.text.size());
                break;
            }
            case Stmt::Kind::FilterBlock: {
                MarkedText text;
                exec(s.body, scope, text);
                auto fs = std::make_shared<Scope>();
                fs->parent = scope;
                fs->vars.emplace_back(kBodyKey, text.take());
                out.append(eval(*s.expr, fs));
                check_size(out.text.size());
                break;
            }
            case Stmt::Kind::With: {   // the values are evaluated outside, then bound inside
                auto ws = std::make_shared<Scope>();
                ws->parent = scope;
                for (const Param& p : s.params) ws->set(p.name, eval(*p.default_value, scope));
                if (const Flow f = exec(s.body, ws, out); f != Flow::Normal) return f;
                break;
            }
            case Stmt::Kind::Block: {
                // A block sees the top level's variables only, unless scoped;
                // what it sets stays inside.
                if (s.required) fail("Required block '" + s.text + "' not found");
                auto bs = std::make_shared<Scope>();
                bs->parent = s.scoped ? scope : root;
                exec(s.body, bs, out);
                break;
            }
            case Stmt::Kind::NeedsLoader: fail(s.text);
            case Stmt::Kind::Break: return Flow::Break;
            case Stmt::Kind::Continue: return Flow::Continue;
        }
    }
    return Flow::Normal;
}

Rendered Renderer::run(const Body& body, const Value& context) {
    root = std::make_shared<Scope>();
    if (context.is_dict()) {
        for (const auto& [k, v] : context.as_dict().items)
            if (k.is_string()) root->set(k.as_string(), v);
    } else if (!context.is_undefined() && !context.is_none()) {
        throw Error("the render context must be a dict of variables");
    }
    MarkedText out;
    exec(body, root, out);
    return {std::move(out.text), std::move(out.code)};
}

}  // namespace detail

Template Template::parse(std::string_view source, const Limits& limits) {
    Template t;
    t.body_ = std::make_shared<const detail::Body>(detail::parse_template(source, limits));
    return t;
}

std::string Template::render(const Value& context, const RenderOptions& options) const {
    return render_marked(context, options).text;
}

Rendered Template::render_marked(const Value& context, const RenderOptions& options) const {
    detail::Renderer r(options);
    try {
        return r.run(*body_, context);
    } catch (const RaisedError&) {
        throw;
    } catch (const Error&) {
        throw;
    } catch (const std::bad_alloc&) {
        throw Error("render stopped: out of memory");
    } catch (const std::exception& e) {   // a bug here, reported as a template error rather than a crash
        throw Error(std::string("internal error while rendering: ") + e.what());
    }
}

}  // namespace ptxlm::jinja
