// A Jinja interpreter for chat templates: the subset real chat templates use,
// rendered as Hugging Face's apply_chat_template renders them (jinja2's
// ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop
// controls; its tojson, raise_exception and strftime_now).
//
// Values from the caller (message contents, tool arguments) are data: the
// renderer only inserts them, it never parses them as template code.
// Strings also carry which of their bytes the template wrote (its text and
// string literals) rather than the caller: render_marked() returns those
// ranges, so that the caller can read control tokens only where the template
// wrote them (engine/chat_prompt.cpp). The marks follow the operations that
// keep bytes as they are (+, ~, output, join, strip, slicing, macros, block
// sets, a recursive loop's loop(items), the format string and the plain %s
// fields of %); any other operation returns unmarked text (the repr of a list
// or a tuple, a number that % formats), which errs on the side of data.
// A render is bounded: loops, output size and recursion depth have limits
// (see Limits) and stop with jinja::Error instead of hanging or crashing.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ptxlm::jinja {

// A template error: syntax (at parse) or evaluation (at render). The message
// names the template line ("line 12: unknown filter 'foo'").
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The template called raise_exception(msg): message() is msg as given.
class RaisedError : public Error {
public:
    RaisedError(const std::string& what, std::string message) : Error(what), message_(std::move(message)) {}
    const std::string& message() const { return message_; }

private:
    std::string message_;
};

class Value;
struct Dict;
// Byte ranges [first, second) of a string, sorted and apart.
using Spans = std::vector<std::pair<size_t, size_t>>;
struct Function;
using List = std::vector<Value>;

// A Jinja value with Python's semantics. Lists and dicts are shared by
// reference, as in Python; everything else is copied.
class Value {
public:
    // Generator: what jinja2's map/select/selectattr/... return: iterable,
    // always true, neither a list nor JSON.
    enum class Type { Undefined, None, Bool, Int, Float, String, List, Dict, Function, Generator };
    // The Python sequence a List value is (is_list() holds for each): a
    // tuple prints as (1, 2), and differs from a list in ==, + and <; a dict
    // view (d.keys(), d.values(), d.items()) prints as dict_keys([...]), is
    // not subscriptable and not JSON. Each keeps its kind when copied.
    enum class Seq : uint8_t { List, Tuple, Keys, Values, Items };

    Value() : v_(Undefined{}) {}                       // undefined
    Value(std::nullptr_t) : v_(nullptr) {}             // none
    Value(bool b) : v_(b) {}
    Value(int i) : v_(int64_t(i)) {}
    Value(int64_t i) : v_(i) {}
    Value(double f) : v_(f) {}
    Value(std::string s) : v_(std::move(s)) {}
    Value(std::string_view s) : v_(std::string(s)) {}
    Value(const char* s) : v_(std::string(s)) {}
    Value(List l) : v_(std::make_shared<List>(std::move(l))) {}
    Value(std::shared_ptr<List> l) : v_(std::move(l)) {}
    Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}
    Value(std::shared_ptr<const Function> f) : v_(std::move(f)) {}
    static Value undefined(std::string name) { Value v; v.v_ = Undefined{std::move(name), {}}; return v; }
    // An undefined whose use fails with `hint` rather than "'name' is
    // undefined" (jinja2's "No caller defined", an unsafe attribute, ...).
    static Value undefined(std::string name, std::string hint) {
        Value v;
        v.v_ = Undefined{std::move(name), std::move(hint)};
        return v;
    }
    static Value tuple(List l) { return sequence(Seq::Tuple, std::move(l)); }
    static Value sequence(Seq kind, List l) {
        Value v(std::move(l));
        v.seq_ = kind;
        return v;
    }
    static Value dict();                               // an empty dict
    // A string marked safe (|safe, |escape): jinja2's Markup, which escapes
    // the plain string it is added to with +.
    static Value markup(std::string s, Spans code = {}) {
        Value v = marked(std::move(s), std::move(code));
        v.markup_ = true;
        return v;
    }
    // A string the template wrote (all its bytes marked), or one whose
    // bytes in `code` the template wrote.
    static Value code(std::string s);
    static Value marked(std::string s, Spans code);
    // jinja2's generators are lazy: an error inside one shows when it is
    // consumed, so a failed one carries its error (`error`) for then.
    static Value generator(List items, std::string error = "") {
        Value v;
        v.v_ = Generator{std::make_shared<List>(std::move(items)), std::move(error)};
        return v;
    }

    Type type() const { return Type(v_.index()); }
    bool is_undefined() const { return type() == Type::Undefined; }
    bool is_none() const { return type() == Type::None; }
    bool is_bool() const { return type() == Type::Bool; }
    bool is_int() const { return type() == Type::Int; }     // bool is not an int here
    bool is_float() const { return type() == Type::Float; }
    bool is_number() const { return is_int() || is_float(); }
    bool is_string() const { return type() == Type::String; }
    bool is_list() const { return type() == Type::List; }
    bool is_dict() const { return type() == Type::Dict; }
    bool is_function() const { return type() == Type::Function; }
    bool is_generator() const { return type() == Type::Generator; }
    bool is_markup() const { return markup_ && is_string(); }
    Seq seq_kind() const { return is_list() ? seq_ : Seq::List; }
    bool is_tuple() const { return seq_kind() == Seq::Tuple; }
    bool is_dict_view() const { return seq_kind() >= Seq::Keys; }

    bool as_bool() const { return std::get<bool>(v_); }
    int64_t as_int() const { return std::get<int64_t>(v_); }
    double as_float() const { return std::get<double>(v_); }
    double as_number() const { return is_int() ? double(as_int()) : is_bool() ? double(as_bool()) : as_float(); }
    const std::string& as_string() const { return std::get<std::string>(v_); }
    List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
    Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
    const std::shared_ptr<Dict>& dict_ptr() const { return std::get<std::shared_ptr<Dict>>(v_); }
    const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(v_); }
    const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }
    // What using this undefined value fails with ("'x' is undefined").
    std::string undefined_message() const;
    const List& generator_items() const { return *std::get<Generator>(v_).items; }
    // The bytes of a string the template wrote; null when none.
    const Spans* code_spans() const { return code_.get(); }
    const std::string& generator_error() const { return std::get<Generator>(v_).error; }

    bool truthy() const;
    // Python's str(): what {{ v }} writes ("True", "None", "[1, 'a']"; "" for undefined).
    std::string str() const;
    // Python's repr() ("'a'" for a string).
    std::string repr() const;
    // Python's ==, with 1 == 1.0 == True.
    bool operator==(const Value& o) const;

private:
    struct Undefined {
        std::string name;   // what was looked up, for the error message
        std::string hint;   // the error message, when not the usual one
    };
    struct Generator {
        std::shared_ptr<List> items;
        std::string error;
    };
    std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<List>,
                 std::shared_ptr<Dict>, std::shared_ptr<const Function>, Generator>
        v_;
    bool markup_ = false;
    Seq seq_ = Seq::List;
    std::shared_ptr<const Spans> code_;
};

// A dict with Python's insertion order. Keys are strings (JSON's), or
// numbers, booleans or none as a template's dict literal may write them.
// A namespace() is a dict whose attributes `set ns.x = ...` may assign.
struct Dict {
    std::vector<std::pair<Value, Value>> items;
    bool is_namespace = false;

    const Value* find(std::string_view key) const;
    const Value* find_key(const Value& key) const;
    void set(Value key, Value v);
};

// Arguments of a call: positional, then keyword.
struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
};

namespace detail { class Renderer; }

// A callable: a builtin, a macro or a for loop's `loop`.
struct Function {
    std::string name;
    std::function<Value(detail::Renderer&, Args&)> call;
    std::string repr;               // what str() gives, when not "<function name>"
    std::shared_ptr<Dict> attrs;    // its attributes (loop.index, macro.name); null: none
};

// JSON to Value: objects keep their key order as nlohmann stores it, so pass
// nlohmann::ordered_json to keep the document's order (tojson writes keys in
// that order). Throws Error for JSON nested over 512 deep.
Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

struct Limits {
    int64_t max_steps = 10'000'000;          // loop iterations, calls and copied 4 KiB blocks
    size_t max_output = size_t(64) << 20;    // bytes of any string, the output included
    int max_call_depth = 200;                // nested macro calls
    int max_nesting = 200;                   // nesting of the template's own syntax
    size_t max_items = size_t(1) << 20;      // items of any list
};

struct RenderOptions {
    std::optional<std::tm> now;              // strftime_now's time; else the local time
    Limits limits;
};

namespace detail { struct Stmt; }

// A rendering, with the byte ranges of `text` that the template wrote.
struct Rendered {
    std::string text;
    Spans code;
};

class Template {
public:
    // Throws Error ("line N: ...") for a syntax error.
    static Template parse(std::string_view source, const Limits& limits = {});
    // context: a dict of the template's variables (messages, tools,
    // add_generation_prompt, bos_token, ...). Throws RaisedError for the
    // template's raise_exception(msg), Error for anything else.
    std::string render(const Value& context, const RenderOptions& options = {}) const;
    Rendered render_marked(const Value& context, const RenderOptions& options = {}) const;

private:
    Template() = default;
    std::shared_ptr<const std::vector<std::shared_ptr<detail::Stmt>>> body_;
};

}  // namespace ptxlm::jinja
