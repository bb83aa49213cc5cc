# tests for the ptxlm executable
ptxlm_pytest(inspect_vs_gguf_py check_inspect.py TIMEOUT 300)
# run, chat, tokenize and perplexity as a user drives them, errors included.
ptxlm_pytest(cli_generation check_cli_generation.py TIMEOUT 600)
# ptxlm bench and bench/compare (against a stand-in llama-bench): output
# structure and consistency, never speed.
ptxlm_pytest(bench check_bench.py TIMEOUT 600)
# The GPU speed projection of bench's counted mode.
ptxlm_gtest(test_projection test_projection.cpp LIBS ptxlm_engine TIMEOUT 60)
