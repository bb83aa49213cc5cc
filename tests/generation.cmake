# tests for issue 4 (generation): filled in as the parts land
# The CPU backend against a float64 numpy forward pass of the synthetic models.
ptxlm_pytest(cpu_vs_numpy check_cpu_vs_numpy.py TIMEOUT 300)
ptxlm_gtest(test_cpu_backend test_cpu_backend.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 300)
# The CPU reference path against llama.cpp's logits on both real models and
# the synthetic ones (tests/golden/llamacpp_*.json).
ptxlm_gtest(test_vs_llamacpp test_vs_llamacpp.cpp LIBS ptxlm_engine ptxlm_synth nlohmann_json::nlohmann_json TIMEOUT 1800)
# Perplexity of a public-domain text with -c 1024 against llama.cpp's tool.
ptxlm_pytest(perplexity_vs_llamacpp check_perplexity.py TIMEOUT 1800)
ptxlm_gtest(test_session test_session.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 300)
