# tests for the server (issue 9)
# The request parser: every field's type and range, and a fuzz pass of random
# and malformed bodies that may only ever raise the parser's ApiError.
ptxlm_gtest(test_server_request test_server_request.cpp LIBS ptxlm_server_request TIMEOUT 120 SANITIZE)
# Anthropic's /v1/messages (server/anthropic.h): the parser field by field (tools,
# tool_choice, tool_use and tool_result blocks included), the message, stream and
# error shapes, and the same fuzz pass.
ptxlm_gtest(test_server_anthropic test_server_anthropic.cpp LIBS ptxlm_server_request TIMEOUT 120 SANITIZE)
# The request corpus (tests/corpus/requests) through the fuzz entry.
add_test(NAME request_corpus_replay COMMAND request_replay ${PROJECT_SOURCE_DIR}/tests/corpus/requests)
set_tests_properties(request_corpus_replay PROPERTIES TIMEOUT 60 LABELS "unit;sanitize")
add_dependencies(sanitize_tests request_replay)
# A real `ptxlm serve --port 0` process driven by the official openai client
# and raw HTTP: endpoints, streaming, errors, slots, queue, disconnects,
# metrics, shutdown (synthetic models; one SmolLM2 answer against ptxlm run).
ptxlm_pytest(serve check_serve.py TIMEOUT 300)
# Anthropic's POST /v1/messages driven by the official anthropic client: greedy
# answers equal to /v1/chat/completions, streaming events, stop sequences,
# max_tokens, errors in Anthropic's shape, x-api-key, a dropped stream, and a
# tool-use round trip (constrained calls whose input validates, streamed alike).
ptxlm_pytest(serve_anthropic check_serve_anthropic.py TIMEOUT 180)
# llama.cpp server's utility endpoints (/tokenize, /detokenize, /apply-template,
# /props) against `ptxlm tokenize` and the chat endpoint, and --cors-origin.
ptxlm_pytest(serve_utils check_serve_utils.py TIMEOUT 120)
# Structured output and tool calls through the official openai client: parse() with
# Pydantic models at temperature 1 (50 seeds on the synthetic llama, 50 on SmolLM2),
# json_object, GBNF, tools (required, named, parallel), streamed tool calls, a tool
# round trip, and the 400s for bad schemas, grammars, tool_choice and tool_call_id.
ptxlm_pytest(serve_structured check_serve_structured.py TIMEOUT 600)
# The chat page in headless Chromium (Debian's chromium, which run.sh installs):
# it streams SmolLM2's answer, and the page's DOM holds the API's text.
ptxlm_pytest(serve_chat_page check_serve_page.py TIMEOUT 300)
