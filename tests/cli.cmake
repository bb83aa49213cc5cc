# tests for the ptxlm executable
ptxlm_pytest(inspect_vs_gguf_py check_inspect.py TIMEOUT 300)
