# tests for quant: the type table, f16/bf16, dequantizers against the layouts,
# quantizer error bounds; then the gguf-py cross-check through quant_tool.
ptxlm_gtest(test_quant test_quant.cpp LIBS ptxlm_gguf TIMEOUT 120 SANITIZE)
# The test recomputes expected values in float: no FMA contraction there either.
target_compile_options(test_quant PRIVATE ${PTXLM_EXACT_FP})

# Test-only tool (lands in ${PROJECT_BINARY_DIR}/tests/quant_tool):
# `dequant|quantize TYPE IN OUT`, `types`.
add_executable(quant_tool tools/quant_tool.cpp)
target_link_libraries(quant_tool PRIVATE ptxlm_gguf)
set_target_properties(quant_tool PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})

ptxlm_pytest(quant_vs_gguf_py check_quant.py ARGS --tool $<TARGET_FILE:quant_tool> TIMEOUT 300)
