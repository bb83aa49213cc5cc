# GBNF grammars (engine/grammar.h): the parser, the recognizer and the token
# filter against a brute force; grammar_check, the CLI the JSON Schema checks
# drive; grammar-mask-bench, the filter's speed on the real vocabularies
# (bench/grammar-mask runs it); the fuzz seeds through grammar_replay.
ptxlm_gtest(test_grammar test_grammar.cpp LIBS ptxlm_grammar SANITIZE)
add_executable(grammar_check tools/grammar_check.cpp)
target_link_libraries(grammar_check PRIVATE ptxlm_grammar nlohmann_json::nlohmann_json)
add_executable(grammar_mask_bench ${PROJECT_SOURCE_DIR}/bench/grammar_mask_bench.cpp)
target_link_libraries(grammar_mask_bench PRIVATE ptxlm_engine)
add_test(NAME grammar_corpus_replay COMMAND grammar_replay ${PROJECT_SOURCE_DIR}/tests/corpus/grammars)
set_tests_properties(grammar_corpus_replay PROPERTIES TIMEOUT 60 LABELS "unit;sanitize")
add_dependencies(sanitize_tests grammar_replay)
