# tests for models: the synthetic-model generator (models/synth).
ptxlm_gtest(test_synth test_synth.cpp LIBS ptxlm_synth TIMEOUT 120)
# gguf-py's reading of ptxlm-synth's files: types by the Q4_K_M rule, weight
# statistics after gguf-py's dequantizers, a numpy forward pass (peaked,
# context-dependent logits) and the chat template through jinja2.
ptxlm_pytest(synth_vs_gguf_py check_synth.py TIMEOUT 300)
# Each llama.cpp golden's SHA-256 against the file it stands for: ptxlm-synth's
# output of today (synthetic) or models/SHA256SUMS (real).
ptxlm_pytest(goldens_name_their_models check_goldens.py TIMEOUT 120)
