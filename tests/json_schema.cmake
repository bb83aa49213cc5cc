# JSON Schema to GBNF (engine/json_schema.h): error messages, converted
# grammars that the grammar engine parses, and the converter against the
# `jsonschema` validator over a table of schemas (Pydantic's included).
add_executable(json_schema_tool tools/json_schema_tool.cpp)
target_link_libraries(json_schema_tool PRIVATE ptxlm_grammar)
ptxlm_gtest(test_json_schema test_json_schema.cpp LIBS ptxlm_grammar TIMEOUT 60 SANITIZE)
ptxlm_pytest(json_schema_vs_jsonschema check_json_schema.py
  ARGS $<TARGET_FILE:grammar_check> $<TARGET_FILE:json_schema_tool> TIMEOUT 120)
# The seed corpus (tests/corpus/json_schema) through the fuzz entry.
add_test(NAME json_schema_corpus_replay COMMAND json_schema_replay ${PROJECT_SOURCE_DIR}/tests/corpus/json_schema)
set_tests_properties(json_schema_corpus_replay PROPERTIES TIMEOUT 60 LABELS "unit;sanitize")
add_dependencies(sanitize_tests json_schema_replay)
