# tests for emu: the PTX interpreter core (instruction semantics, faults, stats).
ptxlm_gtest(test_emu_interp test_emu_interp.cpp LIBS ptxlm_emu_core TIMEOUT 120 SANITIZE)
ptxlm_gtest(test_emu_faults test_emu_faults.cpp LIBS ptxlm_emu_core TIMEOUT 120 SANITIZE)
ptxlm_gtest(test_emu_ops test_emu_ops.cpp LIBS ptxlm_emu_core TIMEOUT 120 SANITIZE)
