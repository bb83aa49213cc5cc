# tests for gguf: reader/writer unit tests, the malformed corpus, and
# cross-checks against gguf-py on our writer's output and the real models.
ptxlm_gtest(test_gguf test_gguf.cpp LIBS ptxlm_gguf SANITIZE)

# Test-only tool: `write-sample OUT` and `dump FILE` (our reader's view as JSON).
add_executable(gguf_tool tools/gguf_tool.cpp)
target_link_libraries(gguf_tool PRIVATE ptxlm_gguf nlohmann_json::nlohmann_json)

ptxlm_pytest(gguf_writer_vs_gguf_py check_gguf.py
  ARGS --tool $<TARGET_FILE:gguf_tool> --sample
  TIMEOUT 120)
ptxlm_pytest(gguf_real_models_vs_gguf_py check_gguf.py
  ARGS --tool $<TARGET_FILE:gguf_tool>
       ${PTXLM_MODELS_DIR}/gemma-3-270m-q4_k_m.gguf
       ${PTXLM_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf
  TIMEOUT 180)

# Every corpus file through the fuzz entry under a 1 GiB address-space cap:
# malformed files must be rejected with an Error, never crash or over-allocate.
add_test(NAME gguf_corpus_replay
         COMMAND gguf_replay --rlimit-mb 1024
                 ${PROJECT_SOURCE_DIR}/tests/corpus/gguf ${PROJECT_SOURCE_DIR}/tests/corpus/gguf-valid)
# Also part of the sanitizer run (there the address-space cap is skipped: ASan
# needs its shadow memory).
set_tests_properties(gguf_corpus_replay PROPERTIES TIMEOUT 60 LABELS "unit;sanitize")
add_dependencies(sanitize_tests gguf_replay)
