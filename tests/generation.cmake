# tests for issue 4 (generation): filled in as the parts land
# The CPU backend against a float64 numpy forward pass of the synthetic models.
ptxlm_pytest(cpu_vs_numpy check_cpu_vs_numpy.py TIMEOUT 300)
ptxlm_gtest(test_cpu_backend test_cpu_backend.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 300)
