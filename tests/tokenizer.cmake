# Tokenizers against llama.cpp's, on vocab-only files extracted from the real models.
ptxlm_gtest(test_tokenizer test_tokenizer.cpp LIBS ptxlm_engine nlohmann_json::nlohmann_json TIMEOUT 300 SANITIZE)
