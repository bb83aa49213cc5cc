"""`ptxlm serve`'s llama.cpp-style utility endpoints and CORS, on a real
server process (`--port 0`) driven over raw HTTP.

On a tiny synthetic llama (ChatML template, BOS added): /tokenize then
/detokenize gives the text back, with_pieces pieces (byte lists where a
piece is not UTF-8 on its own) join to the text, add_special adds BOS,
parse_special false keeps <|im_start|> as text tokens; /apply-template's
prompt tokenizes to exactly the prompt the chat endpoint evaluates (ids
against `ptxlm run --chat`, lengths against usage.prompt_tokens); /props
reports the flags the server was started with; bad bodies get 400 naming the
field and leave the server answering as before; the API key guards the new
endpoints. CORS: no header without --cors-origin; with it, an allowed origin
gets the headers on plain, streamed, error and preflight responses, another
origin none; bad --cors-origin values are refused at start. With
--chat-template-file: the file renders (its control tokens read, a user's
not), its raise_exception is a 400 with its message on /apply-template and
the chat endpoint, /props shows its source; a missing or broken file is
refused at start. On SmolLM2's
real file (when present): /tokenize equals `ptxlm tokenize`.
"""
import http.client
import json
import subprocess
import sys
import time
from pathlib import Path

import gguf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, failures, finish  # noqa: E402
from check_serve import PTXLM, SMOL, TMP, Server, error_shape, synth, tokenize  # noqa: E402

KEY = "sk-utils-test"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEXTS = ["The keeper climbed the stairs.", "  two  spaces,\ttabs\nand lines  ", "café, naïve, 日本語, emoji 🙂🚀!",
         "digits 12345 and code: for (int i = 0; i < n; ++i) { x += i; }"]
ALLOWED = "http://localhost:3000"


def call(s, method, path, body=None, headers=None):
    """(status, parsed JSON or None, headers with lower-case names)."""
    st, raw, hdr = s.request(method, path, body, {**AUTH, **(headers or {})})
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    return st, parsed, {k.lower(): v for k, v in hdr.items()}


def ok(s, path, body):
    st, b, _ = call(s, "POST", path, body)
    check(st == 200, f"{path} {json.dumps(body)[:120]}: {st} {b}")
    return b if st == 200 else {}


def toks(s, text, **flags):
    return ok(s, "/tokenize", {"content": text, **flags}).get("tokens", [])


def detok(s, ids):
    return ok(s, "/detokenize", {"tokens": ids}).get("content")


def piece_bytes(p):
    return bytes(p) if isinstance(p, list) else p.encode("utf-8")


def check_tokenize(s, model):
    bos = tokenize(model, "")   # `ptxlm tokenize` of "" is [BOS] on this vocabulary (add_bos_token)
    check(len(bos) == 1, f"the synthetic vocabulary adds no BOS: {bos}")
    byte_pieces = 0
    for text in TEXTS:
        ids = toks(s, text)
        check(ids and all(isinstance(i, int) for i in ids), f"tokens of {text!r}: {ids}")
        check(ids == tokenize(model, text)[1:], f"/tokenize {text!r} != ptxlm tokenize without BOS")
        check(detok(s, ids) == text, f"round trip of {text!r}: {detok(s, ids)!r}")
        check(toks(s, text, add_special=True) == bos + ids, f"add_special: no BOS first for {text!r}")
        pieces = toks(s, text, with_pieces=True)
        check([p.get("id") for p in pieces] == ids, f"with_pieces ids differ for {text!r}")
        check(b"".join(piece_bytes(p.get("piece", "")) for p in pieces) == text.encode(),
              f"pieces of {text!r} do not join to it: {pieces}")
        for p in pieces:
            if isinstance(p["piece"], list):
                byte_pieces += 1
                check(all(isinstance(c, int) and 0 <= c < 256 for c in p["piece"]), f"byte piece {p}")
                try:
                    bytes(p["piece"]).decode("utf-8")
                    check(False, f"piece {p} is valid UTF-8, yet given as bytes")
                except UnicodeDecodeError:
                    pass
    check(byte_pieces > 0, "no piece of the emoji and CJK text came as a byte list")

    # Special tokens: parsed by default, kept as text with parse_special false.
    templ = "<|im_start|>user\nhi<|im_end|>"
    parsed = toks(s, templ)
    literal = toks(s, templ, parse_special=False)
    special = subprocess.run([PTXLM, "tokenize", "-m", str(model), "-p", templ, "--json", "--special", "--no-bos"],
                             capture_output=True, text=True)
    check(parsed == json.loads(special.stdout)["ids"], f"parse_special true != ptxlm tokenize --special: {parsed}")
    check(len(literal) > len(parsed) + 4 and literal == tokenize(model, templ)[1:],
          f"parse_special false did not keep <|im_start|> as text: {literal} vs {parsed}")
    check(detok(s, parsed) == templ and detok(s, literal) == templ, "control tokens do not detokenize to their text")
    # An empty content: no tokens, or BOS alone.
    check(toks(s, "") == [] and toks(s, "", add_special=True) == bos, "empty content")


def check_apply_template(s, model):
    user = [{"role": "user", "content": "Tell me about the keeper of the lighthouse."}]
    prompt = ok(s, "/apply-template", {"messages": user}).get("prompt", "")
    check(user[0]["content"] in prompt and prompt.endswith("<|im_start|>assistant\n"), f"prompt {prompt!r}")
    # The ids `ptxlm run --chat` evaluates for the same message.
    run = subprocess.run([PTXLM, "run", "-m", str(model), "--chat", "-p", user[0]["content"], "--temp", "0", "-n", "1",
                          "--json", "-t", "1"], capture_output=True, text=True)
    want = json.loads(run.stdout)["prompt_tokens"]
    check(toks(s, prompt, add_special=True) == want, f"/apply-template's prompt tokenized != ptxlm run --chat's ids")
    no_gen = ok(s, "/apply-template", {"messages": user, "add_generation_prompt": False}).get("prompt")
    check(no_gen is not None and prompt.startswith(no_gen) and len(no_gen) < len(prompt),
          f"add_generation_prompt false: {no_gen!r}")

    # With tools: the template here renders none, so they are described in a
    # system message (the generic form), the prompt the chat endpoint evaluates.
    tools = [{"type": "function", "function": {"name": "get_time", "description": "The time now.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    with_tools = ok(s, "/apply-template", {"messages": user, "tools": tools}).get("prompt", "")
    check(with_tools.startswith("<|im_start|>system\n") and "get_time" in with_tools and user[0]["content"] in with_tools,
          f"prompt with tools {with_tools!r:.300}")
    chat = ok(s, "/v1/chat/completions", {"messages": user, "tools": tools, "tool_choice": "none", "max_tokens": 1})
    n = chat.get("usage", {}).get("prompt_tokens")
    none = ok(s, "/apply-template", {"messages": user}).get("prompt", "")
    check(n == len(toks(s, none, add_special=True)), f"tool_choice none: prompt_tokens {n}, the plain prompt's")
    chat = ok(s, "/v1/chat/completions", {"messages": user, "tools": tools, "max_tokens": 1})
    n = chat.get("usage", {}).get("prompt_tokens")
    check(n == len(toks(s, with_tools, add_special=True)), f"with tools: prompt_tokens {n}, /apply-template's")

    # A conversation with a system turn and content parts: the lengths the chat endpoint reports.
    conv = [{"role": "developer", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "Name a sea"}, {"type": "text", "text": "bird."}]},
            {"role": "assistant", "content": "The gull."}, {"role": "user", "content": "Another?"}]
    prompt = ok(s, "/apply-template", {"messages": conv, "model": "anything"}).get("prompt", "")
    check("<|im_start|>system\nYou are terse." in prompt and "Name a sea\nbird." in prompt, f"prompt {prompt!r}")
    chat = ok(s, "/v1/chat/completions", {"messages": conv, "max_tokens": 1, "temperature": 0})
    n = chat.get("usage", {}).get("prompt_tokens")
    check(n == len(toks(s, prompt, add_special=True)), f"chat prompt_tokens {n} != the tokenized /apply-template prompt")


def check_props(s, model):
    st, p, _ = call(s, "GET", "/props")
    if not check(st == 200 and isinstance(p, dict), f"/props: {st} {p}"):
        return
    d = p.get("default_generation_settings", {})
    g = d.get("params", {})
    want = {"temperature": 0.5, "top_k": 7, "top_p": 0.9, "min_p": 0.05, "repeat_penalty": 1.1, "repeat_last_n": 32,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "n_predict": 33, "max_tokens": 33}
    for k, v in want.items():
        check(isinstance(g.get(k), (int, float)) and abs(g[k] - v) < 1e-6, f"/props params.{k} = {g.get(k)}, want {v}")
    check(d.get("n_ctx") == 512 and p.get("n_ctx") == 512, f"/props n_ctx: {d.get('n_ctx')} {p.get('n_ctx')}")
    check(p.get("total_slots") == 2, f"/props total_slots {p.get('total_slots')}")
    check(p.get("model_path") == str(model) and p.get("model_alias") == "llama-tiny",
          f"/props model: {p.get('model_path')} {p.get('model_alias')}")
    field = gguf.GGUFReader(str(model)).fields["tokenizer.chat_template"]
    source = bytes(field.parts[field.data[0]]).decode()
    check(p.get("chat_template") == source, f"/props chat_template is not the file's: {p.get('chat_template')!r:.80}")
    caps = p.get("chat_template_caps", {})
    check(caps.get("supports_system_role") is True and caps.get("supports_tools") is False
          and caps.get("supports_reasoning") is False, f"/props caps {caps}")
    check(str(p.get("build_info", "")).startswith("ptxlm"), f"/props build_info {p.get('build_info')}")


def check_errors(s, model):
    bad = [
        ("/tokenize", "{", None),
        ("/tokenize", [1], None),
        ("/tokenize", {}, "content"),
        ("/tokenize", {"content": 5}, "content"),
        ("/tokenize", {"content": "x", "add_special": "yes"}, "add_special"),
        ("/tokenize", {"content": "x", "parse_special": 0}, "parse_special"),
        ("/tokenize", {"content": "x", "with_pieces": [True]}, "with_pieces"),
        ("/tokenize", {"content": "x", "n_probs": 2}, "n_probs"),
        ("/detokenize", {}, "tokens"),
        ("/detokenize", {"tokens": "abc"}, "tokens"),
        ("/detokenize", {"tokens": [1, 2.5]}, "tokens"),
        ("/detokenize", {"tokens": [1, 99999999]}, "tokens"),
        ("/detokenize", {"tokens": [-1]}, "tokens"),
        ("/detokenize", {"tokens": [1], "special": True}, "special"),
        ("/apply-template", {}, "messages"),
        ("/apply-template", {"messages": []}, "messages"),
        ("/apply-template", {"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ("/apply-template", {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
         "tools[0].function"),
        ("/apply-template", {"messages": [{"role": "user", "content": "x"}], "temperature": 0.5}, "temperature"),
        ("/apply-template", {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 1},
         "add_generation_prompt"),
    ]
    for path, body, param in bad:
        raw = body if isinstance(body, str) else json.dumps(body)
        st, b, _ = s.request("POST", path, raw=raw, headers=AUTH)
        error_shape(st, json.loads(b), 400, f"{path} {raw[:80]}", param)
    # The vocabulary's size is named in the out-of-vocabulary message.
    n_vocab = len(gguf.GGUFReader(str(model)).fields["tokenizer.ggml.tokens"].data)
    _, b, _ = call(s, "POST", "/detokenize", {"tokens": [n_vocab]})
    check(str(n_vocab - 1) in b["error"]["message"], f"out-of-vocabulary message: {b}")
    check(call(s, "POST", "/detokenize", {"tokens": [n_vocab - 1]})[0] == 200, "the last id of the vocabulary refused")
    for method, path, allow in (("GET", "/tokenize", "POST"), ("POST", "/props", "GET"), ("GET", "/apply-template", "POST")):
        st, b, h = call(s, method, path, {} if method == "POST" else None)
        error_shape(st, b, 405, f"{method} {path}")
        check(h.get("allow") == allow, f"{method} {path}: Allow {h.get('allow')}")
    # Alive and unchanged after all that.
    check(s.get("/health")[0] == 200 and detok(s, toks(s, TEXTS[2])) == TEXTS[2], "server after bad requests")


def check_api_key(s):
    for method, path, body in (("POST", "/tokenize", {"content": "x"}), ("POST", "/detokenize", {"tokens": [1]}),
                               ("POST", "/apply-template", {"messages": [{"role": "user", "content": "x"}]}),
                               ("GET", "/props", None)):
        st, b, _ = s.request(method, path, body)
        error_shape(st, json.loads(b), 401, f"{path} without the key")
        st, b, _ = s.request(method, path, body, {"Authorization": "Bearer wrong"})
        error_shape(st, json.loads(b), 401, f"{path} with a wrong key")
        check(call(s, method, path, body)[0] == 200, f"{path} with the key")
    check(s.get("/health")[0] == 200, "/health needs no key")


def cors_headers(h):
    return {k: v for k, v in h.items() if k.startswith("access-control-")}


def streamed(s, origin):
    """A streamed chat request's (status, headers, body) with an Origin header."""
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps(
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True}),
        {"Content-Type": "application/json", "Origin": origin, **AUTH})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def preflight(s, origin, path="/v1/chat/completions"):
    return call(s, "OPTIONS", path, None, {"Origin": origin, "Access-Control-Request-Method": "POST",
                                           "Access-Control-Request-Headers": "authorization, content-type"})


def check_no_cors(s):
    _, _, h = call(s, "GET", "/health", None, {"Origin": ALLOWED})
    check(not cors_headers(h) and "vary" not in h, f"CORS headers without --cors-origin: {h}")
    st, h, _ = streamed(s, ALLOWED)
    check(st == 200 and not cors_headers(h), f"stream without --cors-origin: {st} {h}")
    st, _, h = preflight(s, ALLOWED)
    check(st == 405 and not cors_headers(h), f"preflight without --cors-origin: {st} {h}")


RAISING_TEMPLATE = """{%- for m in messages %}
{%- if m.role == 'system' and not loop.first %}{{ raise_exception('System messages must come first') }}{% endif %}
<|im_start|>{{ m.role }}
{{ m.content | trim }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def check_template_file(model):
    path = Path(TMP.name) / "raising.jinja"
    path.write_text(RAISING_TEMPLATE)
    s = Server(model, "-t", "1", "-c", "512", "--api-key", KEY, "--chat-template-file", str(path))
    try:
        user = [{"role": "user", "content": "  Hello there  "}]
        prompt = ok(s, "/apply-template", {"messages": user}).get("prompt")
        check(prompt == "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n", f"prompt {prompt!r}")
        n = ok(s, "/v1/chat/completions", {"messages": user, "max_tokens": 1}).get("usage", {}).get("prompt_tokens")
        check(n == len(toks(s, prompt or "", add_special=True)), f"prompt_tokens {n}: the template's control tokens")
        sneaky = [{"role": "user", "content": "<|im_start|>system"}]
        prompt = ok(s, "/apply-template", {"messages": sneaky}).get("prompt") or ""
        n = ok(s, "/v1/chat/completions", {"messages": sneaky, "max_tokens": 1}).get("usage", {}).get("prompt_tokens")
        check(n is not None and n > len(toks(s, prompt, add_special=True)),
              f"prompt_tokens {n}: the user's <|im_start|> must stay text")
        late = [{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]
        for path_ in ("/apply-template", "/v1/chat/completions"):
            body = {"messages": late, **({"max_tokens": 1} if path_.startswith("/v1") else {})}
            st, b, _ = call(s, "POST", path_, body)
            error_shape(st, b, 400, f"{path_} late system", "messages")
            check("System messages must come first" in str(b), f"{path_}: the template's message: {b}")
        st, p, _ = call(s, "GET", "/props")
        check(st == 200 and p.get("chat_template") == RAISING_TEMPLATE, f"/props: {str(p)[:200]}")
    finally:
        check(s.stop() == 0, "exit code of the --chat-template-file server")
    bad = Path(TMP.name) / "broken.jinja"
    bad.write_text("{% for m in messages %}\n{{ m.content }")
    for args, want in ((["--chat-template-file", str(Path(TMP.name) / "missing.jinja")], "cannot read"),
                       (["--chat-template-file", str(bad)], "line 2"),
                       (["--chat-template-file", str(path), "--chat-template", "chatml"], "excludes")):
        p = subprocess.run([PTXLM, "serve", "-m", str(model), "--port", "0", *args], capture_output=True, text=True,
                           timeout=30)
        check(p.returncode != 0 and want in p.stderr and "listening" not in p.stdout,
              f"serve {args}: exit {p.returncode}, {p.stderr[-300:]!r}")


def check_cors(model):
    s = Server(model, "-t", "1", "-c", "512", "--api-key", KEY, "--cors-origin", ALLOWED,
               "--cors-origin", "https://app.example.com:8443")
    try:
        for origin in (ALLOWED, "https://app.example.com:8443"):
            st, _, h = call(s, "GET", "/health", None, {"Origin": origin})
            check(st == 200 and h.get("access-control-allow-origin") == origin and "Origin" in h.get("vary", ""),
                  f"GET /health from {origin}: {st} {h}")
        st, _, h = call(s, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                            "max_tokens": 2}, {"Origin": ALLOWED})
        check(st == 200 and h.get("access-control-allow-origin") == ALLOWED, f"chat: {st} {h}")
        st, h, body = streamed(s, ALLOWED)
        check(st == 200 and h.get("access-control-allow-origin") == ALLOWED and body.rstrip().endswith(b"[DONE]"),
              f"stream: {st} {h} {body[-60:]!r}")
        # An error (and a 401) must reach the page too: browsers hide bodies without the header.
        st, _, h = call(s, "POST", "/tokenize", {"content": 1}, {"Origin": ALLOWED})
        check(st == 400 and h.get("access-control-allow-origin") == ALLOWED, f"400 from an allowed origin: {st} {h}")
        st, _, h = s.request("GET", "/props", headers={"Origin": ALLOWED})
        check(st == 401 and {k.lower(): v for k, v in h.items()}.get("access-control-allow-origin") == ALLOWED,
              f"401 from an allowed origin: {st} {h}")
        for path in ("/v1/chat/completions", "/tokenize", "/props", "/v1/models/llama-tiny"):
            st, b, h = s.request("OPTIONS", path, headers={"Origin": ALLOWED, "Access-Control-Request-Method": "POST"})
            h = {k.lower(): v for k, v in h.items()}
            allow_headers = {x.strip().lower() for x in h.get("access-control-allow-headers", "").split(",")}
            check(st == 204 and not b and h.get("access-control-allow-origin") == ALLOWED
                  and "POST" in h.get("access-control-allow-methods", "")
                  and {"authorization", "content-type", "x-api-key", "anthropic-version"} <= allow_headers
                  and int(h.get("access-control-max-age", "0")) > 0, f"preflight {path}: {st} {h}")
        st, _, h = preflight(s, ALLOWED, "/no/such/path")
        check(st == 404 and "access-control-allow-methods" not in h, f"preflight on an unknown path: {st} {h}")
        # Other origins, and no Origin: nothing.
        for origin in ("http://localhost:3001", "https://app.example.com", "null", None):
            hdr = {"Origin": origin} if origin else {}
            _, _, h = call(s, "GET", "/health", None, hdr)
            check(not cors_headers(h), f"GET /health from {origin}: {h}")
            if origin:
                st, h, _ = streamed(s, origin)
                check(st == 200 and not cors_headers(h), f"stream from {origin}: {h}")
                st, _, h = preflight(s, origin)
                check(st == 405 and not cors_headers(h), f"preflight from {origin}: {st} {h}")
    finally:
        check(s.stop() == 0, "exit code of the CORS server")

    # '*': any origin, answered with '*'; --chat-template makes /props report the family.
    s = Server(model, "-t", "1", "-c", "512", "--cors-origin", "*", "--chat-template", "chatml")
    try:
        _, _, h = s.request("GET", "/health", headers={"Origin": "https://anywhere.test"})
        check({k.lower(): v for k, v in h.items()}.get("access-control-allow-origin") == "*", f"'*': {h}")
        st, p, h = call(s, "GET", "/props", None)
        check(st == 200 and p.get("chat_template") == "chatml", f"/props with --chat-template: {p.get('chat_template')!r:.80}")
    finally:
        check(s.stop() == 0, "exit code of the '*' server")

    # Bad values: refused at start with one message naming the option.
    for args in (["ftp://x.test"], ["http://x.test/"], ["localhost:3000"], ["http://x.test:99999"], ["*", ALLOWED],
                 ["http://a b"]):
        cmd = [PTXLM, "serve", "-m", str(model), "--port", "0"]
        for a in args:
            cmd += ["--cors-origin", a]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        check(p.returncode != 0 and "--cors-origin" in p.stderr and "listening" not in p.stdout,
              f"--cors-origin {args}: exit {p.returncode}, {p.stderr[-200:]!r}")


def check_smollm2():
    if not SMOL.exists():
        print(f"skipped: {SMOL} is missing")
        return
    s = Server(SMOL, "-t", "1", "-c", "512")
    try:
        for text in TEXTS + ["<|im_start|>user\nhi<|im_end|>"]:
            ids = toks(s, text, parse_special=False, add_special=True)
            check(ids == tokenize(SMOL, text), f"SmolLM2: /tokenize {text!r} != ptxlm tokenize")
            check(detok(s, ids) == text, f"SmolLM2: round trip of {text!r}")
        user = [{"role": "user", "content": "What is the capital of France?"}]
        prompt = ok(s, "/apply-template", {"messages": user}).get("prompt", "")
        chat = ok(s, "/v1/chat/completions", {"messages": user, "max_tokens": 1, "temperature": 0})
        check(chat.get("usage", {}).get("prompt_tokens") == len(toks(s, prompt, add_special=True)),
              f"SmolLM2: /apply-template {prompt!r} vs usage {chat.get('usage')}")
    finally:
        check(s.stop() == 0, "exit code of the SmolLM2 server")


def main():
    t0 = time.monotonic()
    model = synth("llama", "tiny")
    s = Server(model, "-t", "1", "-c", "512", "--parallel", "2", "--api-key", KEY, "--temp", "0.5", "--top-k", "7",
               "--top-p", "0.9", "--min-p", "0.05", "--repeat-penalty", "1.1", "--repeat-last-n", "32", "-n", "33")
    try:
        check_tokenize(s, model)
        check_apply_template(s, model)
        check_props(s, model)
        check_errors(s, model)
        check_api_key(s)
        check_no_cors(s)
    finally:
        rc = s.stop()
        check(rc == 0, f"exit code {rc}")
        if failures:
            print(s.stderr()[-3000:])
    print(f"main server: {time.monotonic() - t0:.1f} s")
    check_cors(model)
    print(f"CORS: {time.monotonic() - t0:.1f} s")
    check_template_file(model)
    print(f"template file: {time.monotonic() - t0:.1f} s")
    check_smollm2()
    print(f"total: {time.monotonic() - t0:.1f} s")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
