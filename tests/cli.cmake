# tests for the ptxlm executable
ptxlm_pytest(inspect_vs_gguf_py check_inspect.py TIMEOUT 300)
# run, chat, tokenize and perplexity as a user drives them, errors included.
ptxlm_pytest(cli_generation check_cli_generation.py TIMEOUT 600)
