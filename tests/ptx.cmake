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
# bench/sass: loops and their instruction classes in the SASS ptxas makes (nvdisasm from
# requirements.txt; missing, the test fails), known answers from hand-written PTX on sm_80-90,
# its gates, and gemma-3-270m's GEMV hot loops printed (14 s on one core).
ptxlm_pytest(check_sass check_sass.py TIMEOUT 120)
