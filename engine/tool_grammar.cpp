#include "engine/tool_grammar.h"

#include <cctype>
#include <list>
#include <mutex>

#include "engine/grammar.h"
#include "engine/json_schema.h"

namespace ptxlm {

namespace {

using ojson = nlohmann::ordered_json;

bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

// "t<i>-": the prefix of tools[i]'s argument rules (built in steps: GCC 12
// warns falsely on "t" + std::to_string(i) + "-").
std::string tool_prefix(size_t i) {
    std::string p(1, 't');
    p += std::to_string(i);
    p += '-';
    return p;
}

// The schema grammar of tools[i]'s arguments, its rules prefixed "t<i>-":
// the value is rule "t<i>-root".
std::string arguments_rules(const ojson& tool, size_t i) {
    const ojson& f = tool.contains("function") ? tool["function"] : tool;
    const ojson schema = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : ojson{{"type", "object"}};
    try {
        return prefix_rules(json_schema_to_gbnf(schema), tool_prefix(i));
    } catch (const SchemaError& e) {
        throw SchemaError("tools[" + std::to_string(i) + "].function.parameters: " + e.what());
    }
}

std::string function_name(const ojson& tool) {
    const ojson& f = tool.contains("function") ? tool["function"] : tool;
    return f.at("name").get<std::string>();
}

}  // namespace

std::string prefix_rules(std::string_view g, std::string_view prefix) {
    std::string out;
    out.reserve(g.size() * 5 / 4);
    for (size_t i = 0; i < g.size();) {
        const char c = g[i];
        if (c == '"' || c == '[') {   // a literal or a class: copied as is, escapes included
            const char close = c == '"' ? '"' : ']';
            size_t j = i + 1;
            while (j < g.size() && g[j] != close) j += g[j] == '\\' ? 2 : 1;
            j = std::min(j + 1, g.size());
            out.append(g, i, j - i);
            i = j;
        } else if (c == '#') {   // a comment, to the end of the line
            const size_t j = std::min(g.find('\n', i), g.size());
            out.append(g, i, j - i);
            i = j;
        } else if (c == '{') {   // a repetition's bounds
            const size_t j = std::min(g.find('}', i) + 1, g.size());
            out.append(g, i, j - i);
            i = j;
        } else if (name_char(c)) {
            size_t j = i;
            while (j < g.size() && name_char(g[j])) ++j;
            out.append(prefix).append(g, i, j - i);
            i = j;
        } else {
            out += c;
            ++i;
        }
    }
    return out;
}

std::shared_ptr<const grammar::Grammar> compile_grammar(const std::string& gbnf) {
    // The last grammars compiled, by their text: a request that repeats a
    // schema reuses its Grammar, and with it the token filter's memo (keyed
    // by the grammar).
    static std::mutex mu;
    static std::list<std::pair<std::string, std::shared_ptr<const grammar::Grammar>>> recent;
    constexpr size_t kKept = 32;
    {
        std::lock_guard<std::mutex> lock(mu);
        for (auto it = recent.begin(); it != recent.end(); ++it) {
            if (it->first == gbnf) {
                recent.splice(recent.begin(), recent, it);
                return it->second;
            }
        }
    }
    std::shared_ptr<const grammar::Grammar> g = grammar::Grammar::parse(gbnf);
    std::lock_guard<std::mutex> lock(mu);
    recent.emplace_front(gbnf, g);
    if (recent.size() > kKept) recent.pop_back();
    return g;
}

std::string json_object_grammar() { return json_schema_to_gbnf(ojson{{"type", "object"}}); }

GrammarText tool_call_grammar(tools::Format f, const ojson& tools, std::string_view tool_choice, bool parallel) {
    const bool forced = tool_choice != "auto";
    std::string rules, alternatives;
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string name = function_name(tools[i]);
        if (forced && tool_choice != "required" && tool_choice != name) continue;
        rules += arguments_rules(tools[i], i);
        const std::string args = tool_prefix(i) + "root";
        std::string call;
        switch (f) {
            case tools::Format::Hermes:
                call = grammar::literal("<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": ") + " " + args + " " + grammar::literal("}\n</tool_call>");
                break;
            case tools::Format::Llama3:
                call = grammar::literal("{\"name\": \"" + name + "\", \"parameters\": ") + " " + args + " " + grammar::literal("}");
                break;
            case tools::Format::MistralJson:
                call = grammar::literal("{\"name\": \"" + name + "\", \"arguments\": ") + " " + args + " " + grammar::literal(", \"id\": \"") +
                       " [a-zA-Z0-9]{9} " + grammar::literal("\"}");
                break;
            case tools::Format::MistralArgs:
                call = grammar::literal("[TOOL_CALLS]" + name + "[ARGS]") + " " + args;
                break;
            case tools::Format::Generic:
            case tools::Format::None:
                call = grammar::literal("{\"name\": \"" + name + "\", \"arguments\": ") + " " + args + " " + grammar::literal("}");
                break;
        }
        alternatives += (alternatives.empty() ? "" : " | ") + std::string("( ") + call + " )";
    }
    if (alternatives.empty()) throw std::invalid_argument("tool_choice names no function of 'tools'");
    rules += "call ::= " + alternatives + "\n";
    GrammarText g;
    switch (f) {
        case tools::Format::Hermes:
            rules += parallel ? "root ::= call (\"\\n\" call)*\n" : "root ::= call\n";
            g.triggers = {"<tool_call>"};
            break;
        case tools::Format::Llama3:   // one call: the whole reply
            rules += "root ::= call\n";
            g.triggers = {"{\"name\""};
            break;
        case tools::Format::MistralJson:
            rules += parallel ? "root ::= \"[TOOL_CALLS][\" call (\", \" call)* \"]\"\n" : "root ::= \"[TOOL_CALLS][\" call \"]\"\n";
            g.triggers = {"[TOOL_CALLS]"};
            break;
        case tools::Format::MistralArgs:
            rules += parallel ? "root ::= call+\n" : "root ::= call\n";
            g.triggers = {"[TOOL_CALLS]"};
            break;
        case tools::Format::Generic:
        case tools::Format::None: {
            // Always one JSON object: the calls, or (auto) a text answer.
            rules += parallel ? "calls ::= \"{\\\"tool_calls\\\": [\" call (\", \" call)* \"]}\"\n"
                              : "calls ::= \"{\\\"tool_calls\\\": [\" call \"]}\"\n";
            if (forced) {
                rules += "root ::= calls\n";
            } else {
                rules += prefix_rules(json_schema_to_gbnf(ojson{{"type", "string"}}), "text-");
                rules += "root ::= calls | \"{\\\"response\\\": \" text-root \"}\"\n";
            }
            return {rules, {}};
        }
    }
    g.gbnf = rules;
    if (forced) g.triggers.clear();
    return g;
}

std::shared_ptr<const GrammarConstraint> make_constraint(const GrammarText& g, const tools::Formats& output) {
    switch (output.reasoning) {
        case tools::Reasoning::ThinkTags: return make_constraint(g, "<think>", "</think>", output.starts_in_reasoning);
        case tools::Reasoning::MistralThink: return make_constraint(g, "[THINK]", "[/THINK]", output.starts_in_reasoning);
        case tools::Reasoning::None: break;
    }
    return make_constraint(g, "", "", false);
}

std::shared_ptr<const GrammarConstraint> make_constraint(const GrammarText& g, const std::string& open,
                                                         const std::string& close, bool starts_in) {
    auto c = std::make_shared<GrammarConstraint>();
    c->grammar = compile_grammar(g.gbnf);
    c->triggers = g.triggers;
    if (close.empty()) return c;
    c->reasoning_open = open;
    c->reasoning_close = close;
    c->in_reasoning = starts_in;
    if (g.triggers.empty()) {
        // The whole answer follows the grammar once a reasoning block is
        // over: a little whitespace after its closing tag, then the grammar's
        // text. When the prompt did not open the block, the answer's first
        // bytes are either the opening tag (whatever follows it in that
        // token) or the grammar's text.
        std::string rules = prefix_rules(g.gbnf, "a-");
        if (!rules.empty() && rules.back() != '\n') rules += '\n';
        c->after_reasoning = compile_grammar(rules + "root ::= [ \t\r\n]{0,4} a-root\n");
        if (!starts_in && !open.empty())
            c->opening = compile_grammar(rules + "root ::= [ \t\r\n]{0,4} " + grammar::literal(open) + " .{0,64} | a-root\n");
    }
    return c;
}

}  // namespace ptxlm
