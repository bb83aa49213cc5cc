# Tokenizers against llama.cpp's, on vocab-only files extracted from the real
# models and a synthetic one.
ptxlm_gtest(test_tokenizer test_tokenizer.cpp LIBS ptxlm_engine ptxlm_synth nlohmann_json::nlohmann_json TIMEOUT 300 SANITIZE)
# The tokenizer fuzz entry over its seed corpus (fuzz/run tokenizer fuzzes it).
add_test(NAME tokenizer_corpus_replay COMMAND tokenizer_replay ${PROJECT_SOURCE_DIR}/tests/corpus/text)
set_tests_properties(tokenizer_corpus_replay PROPERTIES TIMEOUT 120 LABELS "unit;sanitize")
add_dependencies(sanitize_tests tokenizer_replay)
