# tests for issue 4 (generation): filled in as the parts land
# The CPU backend against a float64 numpy forward pass of the synthetic models.
ptxlm_pytest(cpu_vs_numpy check_cpu_vs_numpy.py TIMEOUT 300)
ptxlm_gtest(test_cpu_backend test_cpu_backend.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 300)
# The CPU reference path against llama.cpp's logits on both real models and
# the synthetic ones (tests/golden/llamacpp_*.json).
# One ctest per real model and one for the synthetic ones, so they spread over
# the cores and each has its own TIMEOUT.
ptxlm_gtest(test_vs_llamacpp test_vs_llamacpp.cpp LIBS ptxlm_engine ptxlm_synth nlohmann_json::nlohmann_json TIMEOUT 300)
set_property(TEST test_vs_llamacpp APPEND PROPERTY ENVIRONMENT "GTEST_FILTER=*/synth_*")
foreach(m gemma3_270m smollm2_135m)
  add_test(NAME test_vs_llamacpp_${m} COMMAND test_vs_llamacpp --gtest_filter=*/${m})
  set_tests_properties(test_vs_llamacpp_${m} PROPERTIES TIMEOUT 1800 LABELS "unit")
endforeach()
# Perplexity of a public-domain text with -c 1024 against llama.cpp's tool.
ptxlm_pytest(perplexity_vs_llamacpp check_perplexity.py TIMEOUT 2400)
ptxlm_gtest(test_session test_session.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 300)
# The paged KV pool's bookkeeping (issue 21): pages, forks, copy-on-write,
# prefix reuse, eviction, against simulated page storage.
ptxlm_gtest(test_kv_pool test_kv_pool.cpp LIBS ptxlm_engine TIMEOUT 120)
# Several sequences stepped together over one KV pool (issue 21): each
# stream generates what it generates alone.
ptxlm_gtest(test_cpu_batcher test_cpu_batcher.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 300 SANITIZE)
