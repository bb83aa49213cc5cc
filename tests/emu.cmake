# tests for emu: the PTX interpreter core (instruction semantics, faults, stats).
ptxlm_gtest(test_emu_interp test_emu_interp.cpp LIBS ptxlm_emu_core TIMEOUT 120 SANITIZE)
ptxlm_gtest(test_emu_faults test_emu_faults.cpp LIBS ptxlm_emu_core TIMEOUT 120 SANITIZE)
ptxlm_gtest(test_emu_ops test_emu_ops.cpp LIBS ptxlm_emu_core TIMEOUT 120 SANITIZE)
# shared-memory wavefronts: the bank model and its counts on hand-written kernels
ptxlm_gtest(test_emu_shared_banks test_emu_shared_banks.cpp LIBS ptxlm_emu_core TIMEOUT 60 SANITIZE)
# loads in flight per warp and dependent-load chains on hand-written kernels
ptxlm_gtest(test_emu_inflight test_emu_inflight.cpp LIBS ptxlm_emu_core TIMEOUT 60 SANITIZE)
# warp instructions by class on a hand-written kernel
ptxlm_gtest(test_emu_inst_class test_emu_inst_class.cpp LIBS ptxlm_emu_core TIMEOUT 60 SANITIZE)
ptxlm_gtest(test_emu_coop test_emu_coop.cpp LIBS ptxlm_emu_core TIMEOUT 120 SANITIZE)
# hardware-variance mode: .approx results within their ISA bounds, mul+add fusion
ptxlm_gtest(test_emu_variance test_emu_variance.cpp LIBS ptxlm_emu_core TIMEOUT 120 SANITIZE)

# emu's PTX loader and interpreter over the fuzz seeds (every builder kernel)
# and any checked-in findings, under the same address-space cap as the GGUF
# corpus: each must load and run, or be rejected, never crash.
add_test(NAME emu_ptx_corpus_replay
         COMMAND ptx_replay --rlimit-mb 2048 ${PROJECT_SOURCE_DIR}/tests/corpus/ptx)
set_tests_properties(emu_ptx_corpus_replay PROPERTIES TIMEOUT 120 LABELS "unit;sanitize")
add_dependencies(sanitize_tests ptx_replay)
