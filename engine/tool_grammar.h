// Grammars for constrained answers: a tool call in a model family's format
// (engine/tool_calls.h) with arguments valid under each function's JSON
// Schema, any JSON object (response_format json_object), and the plumbing
// that puts several JSON Schema grammars into one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/session.h"
#include "engine/tool_calls.h"

namespace ptxlm {

// A grammar's text and where it starts holding (GrammarConstraint::triggers:
// empty for the whole answer).
struct GrammarText {
    std::string gbnf;
    std::vector<std::string> triggers;
};

// The answer of a tool-calling turn in format `f` (Generic when the template
// renders no tools). tool_choice "required" or a function's name: the whole
// answer is one call (one or more when `parallel`), of that function when
// named. "auto": the answer may be text; a call, from the format's opening
// (the trigger) on, must be well formed; for Generic, whose answer is always
// one JSON object, either {"response": text} or the calls. Each function's
// arguments follow its `parameters` schema (any object when it has none).
// Throws SchemaError (engine/json_schema.h) naming tools[i] for a schema the
// converter cannot honour.
GrammarText tool_call_grammar(tools::Format f, const nlohmann::ordered_json& tools, std::string_view tool_choice,
                              bool parallel);

// Grammar::parse, remembering the last grammars compiled (by their text):
// the same grammar again is the same Grammar, whose token-filter memo it
// reuses. Throws grammar::GrammarError.
std::shared_ptr<const grammar::Grammar> compile_grammar(const std::string& gbnf);

// Any JSON object (response_format {"type": "json_object"}).
std::string json_object_grammar();

// `gbnf` with every rule name prefixed (references included; literals,
// classes and comments untouched), so that grammars can be joined.
std::string prefix_rules(std::string_view gbnf, std::string_view prefix);

// A GrammarConstraint from grammar text (throws grammar::GrammarError), its
// triggers, and the reasoning block of `output`: triggers count after it, and
// a grammar for the whole answer holds after it (the model may think first).
std::shared_ptr<const GrammarConstraint> make_constraint(const GrammarText& g, const tools::Formats& output);
// The same with the reasoning block's tags spelled out (empty: none);
// `starts_in`: the prompt opened the block.
std::shared_ptr<const GrammarConstraint> make_constraint(const GrammarText& g, const std::string& open,
                                                         const std::string& close, bool starts_in);

}  // namespace ptxlm
