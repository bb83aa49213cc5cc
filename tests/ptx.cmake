# tests for ptx: the builder (pure, also under the sanitizers) and ptxas
# acceptance of every example kernel and builder stress kernel.
ptxlm_gtest(test_ptx_builder test_ptx_builder.cpp LIBS ptxlm_kernels TIMEOUT 60 SANITIZE)

# ptxas is required: CI has the toolkit. A missing ptxas fails the test
# (PTXLM_PTXAS is then empty and the test says so); it never skips.
find_program(PTXLM_PTXAS_EXECUTABLE ptxas HINTS /usr/local/cuda/bin ${CUDAToolkit_BIN_DIR})
if(NOT PTXLM_PTXAS_EXECUTABLE)
  message(WARNING "ptxas not found: test_ptxas will fail")
  set(PTXLM_PTXAS_EXECUTABLE "")
endif()
ptxlm_gtest(test_ptxas test_ptxas.cpp LIBS ptxlm_kernels TIMEOUT 300)
target_compile_definitions(test_ptxas PRIVATE PTXLM_PTXAS="${PTXLM_PTXAS_EXECUTABLE}")
# The device weight layout: alignment and exact round trips.
ptxlm_gtest(test_layout test_layout.cpp LIBS ptxlm_kernels TIMEOUT 60 SANITIZE)
