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
    auto c = std::make_shared<GrammarConstraint>();
    switch (output.reasoning) {
        case tools::Reasoning::ThinkTags: c->reasoning_open = "<think>"; c->reasoning_close = "</think>"; break;
        case tools::Reasoning::MistralThink: c->reasoning_open = "[THINK]"; c->reasoning_close = "[/THINK]"; break;
        case tools::Reasoning::None: break;
    }
    if (g.triggers.empty() && output.starts_in_reasoning && !c->reasoning_close.empty()) {
        // The prompt opened a reasoning block and the whole answer follows the
        // grammar: the answer closes the block first, so that its reader
        // finds the rest outside it.
        c->grammar = compile_grammar(prefix_rules(g.gbnf, "a-") + "root ::= " + grammar::literal(c->reasoning_close + "\n\n") + " a-root\n");
    } else {
        c->grammar = compile_grammar(g.gbnf);
        c->in_reasoning = output.starts_in_reasoning;
    }
    c->triggers = g.triggers;
    return c;
}

}  // namespace ptxlm
