# Tool calls and reasoning out of generated text (engine/tool_calls.h): detect() on llama.cpp's real
# templates, parse() per format, the stream against parse() at every split, the generic tools prompt.
ptxlm_gtest(test_tool_calls test_tool_calls.cpp LIBS ptxlm_tool_calls SANITIZE)
# The seed corpus (tests/corpus/tool_calls) through the fuzz entry: every format, parsed and streamed.
add_test(NAME tool_calls_corpus_replay COMMAND tool_calls_replay ${PROJECT_SOURCE_DIR}/tests/corpus/tool_calls)
set_tests_properties(tool_calls_corpus_replay PROPERTIES TIMEOUT 60 LABELS "unit;sanitize")
add_dependencies(sanitize_tests tool_calls_replay)
# Tool-call grammars (engine/tool_grammar.h) against the parsers, per format.
ptxlm_gtest(test_tool_grammar test_tool_grammar.cpp LIBS ptxlm_engine SANITIZE)
