# tests for the server (issue 9)
# The request parser: every field's type and range, and a fuzz pass of random
# and malformed bodies that may only ever raise the parser's ApiError.
ptxlm_gtest(test_server_request test_server_request.cpp LIBS ptxlm_server_request TIMEOUT 120 SANITIZE)
# A real `ptxlm serve --port 0` process driven by the official openai client
# and raw HTTP: endpoints, streaming, errors, slots, queue, disconnects,
# metrics, shutdown (synthetic models; one SmolLM2 answer against ptxlm run).
ptxlm_pytest(serve check_serve.py TIMEOUT 300)
