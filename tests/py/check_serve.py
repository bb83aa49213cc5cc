"""`ptxlm serve` as clients drive it: a real server process on loopback
(`--port 0`), the official `openai` client and raw HTTP.

On a tiny synthetic llama (fast, fixed weights): chat and completions,
streamed and not (the streamed text joined equals the answer), the chunk
format (one id, role first, valid UTF-8, finish reason, usage chunk,
[DONE]), stop strings, max_tokens reaching "length", seeded replay, usage
against `ptxlm tokenize`, logprobs in both endpoints' shapes, every error
case with its status and OpenAI-style body, a loop of bad requests after
which answers are unchanged, 8 concurrent clients each getting the answer it
gets alone, two streams advancing together with --parallel 2, a cached
prefix reused, a client that disconnects mid-stream freeing its slot, a full
queue answering 503, /metrics as Prometheus text (with --parallel 2 the
slots' shared KV pages and the batched steps), the API key, SIGTERM
during a stream (an error event, exit 0), and a KV pool too small for its
8 slots: preempted greedy streams answer as one by one, 16 clients with
random disconnects and bad requests leave no page in use that no slot
holds. On SmolLM2: the server's greedy
chat answer equals `ptxlm run --chat --temp 0`.
"""
import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402

SRC = Path(os.environ.get("PTXLM_SOURCE_DIR", "."))
MODELS = Path(os.environ.get("PTXLM_MODELS_DIR", SRC / "models"))
PTXLM = os.environ.get("PTXLM_BIN", "build/tools/ptxlm/ptxlm")
SYNTH = Path(os.environ.get("PTXLM_BINARY_DIR", "build")) / "models" / "synth" / "ptxlm-synth"
SMOL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
TMP = tempfile.TemporaryDirectory()


class Server:
    """A `ptxlm serve --port 0` process; stderr goes to a file (never a full pipe)."""

    def __init__(self, model, *args, env=None):
        self.log = open(Path(TMP.name) / f"serve-{time.monotonic_ns()}.log", "w+")
        self.p = subprocess.Popen([PTXLM, "serve", "-m", str(model), "--port", "0", *args], stdout=subprocess.PIPE,
                                  stderr=self.log, text=True, env={**os.environ, **(env or {})})
        line = self.p.stdout.readline()
        m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)\n", line)
        if not m:
            self.p.kill()
            raise RuntimeError(f"serve printed {line!r}; log: {self.stderr()}")
        self.port = int(m.group(1))
        self.first_health = self.get("/health")
        deadline = time.time() + 60
        while self.get("/health")[0] != 200:
            if time.time() > deadline or self.p.poll() is not None:
                raise RuntimeError(f"never ready: {self.stderr()}")
            time.sleep(0.05)

    def stderr(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def request(self, method, path, body=None, headers=None, raw=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, data, {"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        out = r.status, r.read(), dict(r.getheaders())
        conn.close()
        return out

    def get(self, path, headers=None):
        try:
            s, b, _ = self.request("GET", path, headers=headers)
            return s, b
        except OSError as e:
            return 0, str(e).encode()

    def post(self, path, body, headers=None):
        s, b, _ = self.request("POST", path, body, headers)
        return s, json.loads(b)

    def client(self, key="none"):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=key, max_retries=0, timeout=120)

    def metrics(self, headers=None):
        s, b = self.get("/metrics", headers)
        check(s == 200, f"/metrics: {s} {b[:200]!r}")
        return parse_prometheus(b.decode())

    def stop(self, sig=signal.SIGTERM, timeout=20):
        self.p.send_signal(sig)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None


def parse_prometheus(text):
    """{(name, frozenset(labels)): value}; every sample line must be well formed."""
    samples = {}
    sample = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)?\})? (\S+)')
    for line in text.splitlines():
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = sample.fullmatch(line)
        if not check(m is not None, f"not a Prometheus sample line: {line!r}"):
            continue
        labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"', m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(5))
    return samples


def metric(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def sse(server, path, body, headers=None, stop_after=None, linger_rst=False):
    """Raw streaming request: (status, [decoded data payloads], raw bytes). stop_after=n: read n events, then drop the
    connection."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
    r = conn.getresponse()
    events, raw = [], b""
    if r.status != 200:
        raw = r.read()
        conn.close()
        return r.status, [], raw
    while True:
        line = r.readline()
        if not line:
            break
        raw += line
        if line.startswith(b"data: "):
            payload = line[6:].rstrip(b"\n")
            events.append(payload if payload == b"[DONE]" else json.loads(payload))
            if stop_after is not None and len(events) >= stop_after:
                if linger_rst:
                    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.sock.close()
                break
    conn.close()
    return r.status, events, raw


def error_shape(status, body, want_status, what, param=None):
    ok = check(status == want_status, f"{what}: status {status}, expected {want_status}: {body}")
    err = body.get("error") if isinstance(body, dict) else None
    ok = check(isinstance(err, dict) and isinstance(err.get("message"), str) and err["message"] and "type" in err
               and "code" in err, f"{what}: not an OpenAI error body: {body}") and ok
    if param is not None and err:
        ok = check(err.get("param") == param, f"{what}: param {err.get('param')!r}, expected {param!r}") and ok
    return ok


def synth(arch, size):
    out = Path(TMP.name) / f"{arch}-{size}.gguf"
    p = subprocess.run([str(SYNTH), "--arch", arch, "--size", size, "--out", str(out)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"ptxlm-synth: {p.stderr}")
    return out


def tokenize(model, text):
    p = subprocess.run([PTXLM, "tokenize", "-m", str(model), "-p", text, "--json"], capture_output=True, text=True)
    return json.loads(p.stdout)["ids"]


USER = [{"role": "user", "content": "Tell me about the keeper of the lighthouse."}]


def check_basics(s, model):
    c = s.client()
    check(s.get("/health") == (200, b'{"status":"ok"}'), f"/health: {s.get('/health')}")
    check(s.first_health[0] in (200, 503), f"/health while loading: {s.first_health}")
    if s.first_health[0] == 503:
        check(json.loads(s.first_health[1])["error"]["code"] == "loading", f"503 body: {s.first_health}")
    models = c.models.list().data
    check(len(models) == 1 and models[0].id == "llama-tiny", f"models: {models}")
    check(models[0].model_extra.get("context_length") == 4096, f"context length: {models[0]}")
    check(c.models.retrieve("llama-tiny").id == "llama-tiny", "GET /v1/models/llama-tiny")
    st, page, hdr = s.request("GET", "/")
    check(st == 200 and hdr.get("Content-Type", "").startswith("text/html") and b"/v1/chat/completions" in page
          and b"getReader" in page and not re.search(rb"(src|href)=\"https?:", page), "the chat page at /")

    # Chat: non-streamed and streamed greedy answers agree.
    r = c.chat.completions.create(model="gpt-4o", messages=USER, max_tokens=24, temperature=0)
    ch = r.choices[0]
    check(r.model == "llama-tiny" and r.object == "chat.completion" and r.id.startswith("chatcmpl-"), f"chat: {r}")
    check(ch.message.role == "assistant" and ch.finish_reason in ("stop", "length"), f"chat choice: {ch}")
    check(r.usage.completion_tokens <= 24 and (ch.finish_reason == "stop" or r.usage.completion_tokens == 24),
          f"usage: {r.usage} for finish {ch.finish_reason}")
    run = subprocess.run([PTXLM, "run", "-m", str(model), "--chat", "-p", USER[0]["content"], "--temp", "0", "-n", "24",
                          "--json", "-t", "1"], capture_output=True, text=True)
    want = json.loads(run.stdout)
    check(r.usage.prompt_tokens == len(want["prompt_tokens"]), f"chat prompt_tokens {r.usage.prompt_tokens} != "
          f"{len(want['prompt_tokens'])} (ptxlm run --chat)")
    check(ch.message.content == want["text"], f"chat answer {ch.message.content!r} != ptxlm run's {want['text']!r}")
    check(r.model_extra.get("timings", {}).get("predicted_n") == r.usage.completion_tokens, f"timings: {r}")
    chunks = list(c.chat.completions.create(model="x", messages=USER, max_tokens=24, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(k.choices[0].delta.content or "" for k in chunks if k.choices)
    check(text == ch.message.content, f"streamed {text!r} != {ch.message.content!r}")
    check(len({k.id for k in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-"), "one id per stream")
    check(chunks[0].choices[0].delta.role == "assistant", f"first delta carries the role: {chunks[0]}")
    check(all(k.object == "chat.completion.chunk" and k.model == "llama-tiny" and k.created > 0 for k in chunks),
          "chunk fields")
    fin = [k for k in chunks if k.choices and k.choices[0].finish_reason]
    check(len(fin) == 1 and fin[0].choices[0].finish_reason == ch.finish_reason, f"one final chunk: {fin}")
    check(not chunks[-1].choices and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
          and chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens, f"usage chunk: {chunks[-1]}")

    # Completions, prompt counted by `ptxlm tokenize`.
    prompt = "The keeper climbed the stairs"
    cr = c.completions.create(model="x", prompt=prompt, max_tokens=20, temperature=0)
    check(cr.object == "text_completion" and cr.id.startswith("cmpl-"), f"completion: {cr}")
    check(cr.usage.prompt_tokens == len(tokenize(model, prompt)), f"prompt_tokens {cr.usage.prompt_tokens}")
    check(cr.choices[0].finish_reason == "length" and cr.usage.completion_tokens == 20, f"max_tokens: {cr}")
    streamed = list(c.completions.create(model="x", prompt=prompt, max_tokens=20, temperature=0, stream=True))
    check("".join(k.choices[0].text for k in streamed if k.choices) == cr.choices[0].text, "streamed completion")
    check(streamed[-1].choices[0].finish_reason == "length", f"final chunk {streamed[-1]}")
    run = subprocess.run([PTXLM, "run", "-m", str(model), "-p", prompt, "--temp", "0", "-n", "20", "--json", "-t", "1"],
                         capture_output=True, text=True)
    check(cr.choices[0].text == json.loads(run.stdout)["text"], "completion != ptxlm run -p")

    # Raw stream: valid UTF-8 bytes throughout, data: lines, [DONE] last.
    st, events, raw = sse(s, "/v1/chat/completions", {"messages": USER, "max_tokens": 40, "temperature": 0.9,
                                                       "seed": 7, "stream": True})
    try:
        raw.decode("utf-8", errors="strict")
        utf8 = True
    except UnicodeDecodeError:
        utf8 = False
    check(st == 200 and utf8 and events and events[-1] == b"[DONE]", f"raw SSE: {st} {raw[:300]!r}")
    check(all(l.startswith(b"data: ") for l in raw.split(b"\n\n") if l.strip()), "every event is a data: line")

    # Stop strings, in both modes: the text ends before the stop string.
    base = cr.choices[0].text
    stop = next((base[i:i + 3] for i in range(4, len(base) - 3) if base[i:i + 3].strip() and base.find(base[i:i + 3]) == i), None)
    if check(stop is not None, f"no stop string candidate in {base!r}"):
        sr = c.completions.create(model="x", prompt=prompt, max_tokens=20, temperature=0, stop=[stop, "zzzz"])
        check(sr.choices[0].finish_reason == "stop" and sr.choices[0].text == base[:base.find(stop)],
              f"stop {stop!r}: {sr.choices[0]}")
        ss = list(c.completions.create(model="x", prompt=prompt, max_tokens=20, temperature=0, stop=stop, stream=True))
        check("".join(k.choices[0].text for k in ss) == base[:base.find(stop)] and ss[-1].choices[0].finish_reason == "stop",
              "streamed stop string")

    # Seeded sampling replays; other seeds give other text.
    def sampled(seed):
        return c.completions.create(model="x", prompt=prompt, max_tokens=24, temperature=1.0, seed=seed).choices[0].text
    a = sampled(42)
    check(a == sampled(42), "seed 42 did not replay")
    check(any(sampled(x) != a for x in (43, 44, 45)), "different seeds gave the same text")

    # Logprobs: chat (content list, top alternatives) and completions (parallel arrays).
    lr = c.chat.completions.create(model="x", messages=USER, max_tokens=12, temperature=0, logprobs=True, top_logprobs=3)
    content = lr.choices[0].logprobs.content
    check(len(content) == lr.usage.completion_tokens or lr.choices[0].finish_reason == "stop",
          f"{len(content)} logprobs for {lr.usage.completion_tokens} tokens")
    check(all(e.logprob <= 0 and len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token
              and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6 and isinstance(e.bytes, list) for e in content),
          f"chat logprobs: {content[:2]}")
    check(lr.choices[0].message.content == ch.message.content[:len(lr.choices[0].message.content)],
          "logprobs change the greedy answer")
    sl = list(c.chat.completions.create(model="x", messages=USER, max_tokens=12, temperature=0, logprobs=True,
                                        top_logprobs=3, stream=True))
    streamed_lp = [e.token for k in sl if k.choices and k.choices[0].logprobs for e in k.choices[0].logprobs.content]
    check(streamed_lp == [e.token for e in content], "streamed logprobs != non-streamed")
    cl = c.completions.create(model="x", prompt=prompt, max_tokens=10, temperature=0, logprobs=2)
    lp = cl.choices[0].logprobs
    check(len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 10
          and all(len(t) == 2 for t in lp.top_logprobs) and lp.text_offset[0] == 0, f"completion logprobs: {lp}")

    # logit_bias through the official client: +100 on a token the greedy
    # answer does not start with makes every token that one (until max_tokens);
    # -100 on the greedy answer's first token changes the first token.
    first = lr.choices[0].logprobs.content[0]
    bos = len(tokenize(model, ""))   # the ids every text starts with (BOS where the model adds one)
    word = next(w for w in (" blue", " seven", " zebra", " x", "a")
                if len(tokenize(model, w)) == bos + 1 and w != first.token)
    forced = tokenize(model, word)[bos]
    fr = c.chat.completions.create(model="x", messages=USER, max_tokens=5, temperature=0, logprobs=True,
                                   logit_bias={str(forced): 100})
    check(fr.choices[0].message.content == word * 5 and fr.usage.completion_tokens == 5,
          f"logit_bias +100 on {word!r} ({forced}): {fr.choices[0].message.content!r}")
    fs = list(c.completions.create(model="x", prompt=prompt, max_tokens=3, temperature=0.7, seed=3, stream=True,
                                   logit_bias={str(forced): 100}))
    check("".join(k.choices[0].text for k in fs if k.choices) == word * 3, f"streamed logit_bias: {fs}")
    # n = 3: three indexed choices, each its own seed stream (seed + index:
    # choice i equals a one-choice request with seed 7 + i), streamed and not;
    # usage counts the prompt once.
    many = c.completions.create(model="x", prompt=prompt, max_tokens=12, temperature=1.0, seed=7, n=3)
    alone = [c.completions.create(model="x", prompt=prompt, max_tokens=12, temperature=1.0, seed=7 + i)
             for i in range(3)]
    check(sorted(ch.index for ch in many.choices) == [0, 1, 2], f"n=3 indexes: {many.choices}")
    texts = {ch.index: ch.text for ch in many.choices}
    check(all(texts[i] == alone[i].choices[0].text for i in range(3)), f"n=3 != seeds 7..9: {texts}")
    check(len(set(texts.values())) > 1, f"n=3 gave one text thrice: {texts}")
    check(many.usage.prompt_tokens == alone[0].usage.prompt_tokens and
          many.usage.completion_tokens == sum(a.usage.completion_tokens for a in alone), f"n=3 usage: {many.usage}")
    # The prompt is evaluated once: a fresh 200-token prompt with n = 4 costs
    # its tokens once plus at most a partly filled KV page (16 positions)
    # per further choice, which each recomputes.
    fresh = " ".join(f"lamp{i}" for i in range(60))
    before = metric(s.metrics(), "ptxlm_prompt_tokens_total")
    four = c.completions.create(model="x", prompt=fresh, max_tokens=2, temperature=1.0, n=4)
    spent = metric(s.metrics(), "ptxlm_prompt_tokens_total") - before
    check(four.usage.prompt_tokens > 100 and spent <= four.usage.prompt_tokens + 3 * 16,
          f"n=4 evaluated {spent} prompt tokens for a {four.usage.prompt_tokens}-token prompt")
    chunks = list(c.chat.completions.create(model="x", messages=USER, max_tokens=8, temperature=1.0, seed=11, n=2,
                                            stream=True, stream_options={"include_usage": True}))
    got = {0: "", 1: ""}
    finals = {}
    for k in chunks:
        for ch in k.choices:
            got[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finals[ch.index] = ch.finish_reason
    solo = [c.chat.completions.create(model="x", messages=USER, max_tokens=8, temperature=1.0, seed=11 + i)
            for i in range(2)]
    check(got == {i: solo[i].choices[0].message.content for i in range(2)} and set(finals) == {0, 1},
          f"streamed n=2: {got} {finals}")
    check(not chunks[-1].choices and chunks[-1].usage.completion_tokens == sum(x.usage.completion_tokens for x in solo),
          f"streamed n=2 usage: {chunks[-1]}")
    first_id = tokenize(model, first.token)[bos:]
    if check(len(first_id) == 1, f"{first.token!r} is not one token: {first_id}"):
        br = c.chat.completions.create(model="x", messages=USER, max_tokens=1, temperature=0, logprobs=True,
                                       logit_bias={str(first_id[0]): -100})
        check(br.choices[0].logprobs.content[0].token != first.token, f"logit_bias -100: {br.choices[0]}")
    return a


def check_errors(s):
    bad = [
        ("malformed JSON", "/v1/chat/completions", '{"messages": [', 400, None),
        ("not an object", "/v1/chat/completions", "[1, 2]", 400, None),
        ("wrong type", "/v1/chat/completions", {"messages": USER, "temperature": "hot"}, 400, "temperature"),
        ("out of range", "/v1/chat/completions", {"messages": USER, "top_p": 1.5}, 400, "top_p"),
        ("max_tokens 0", "/v1/chat/completions", {"messages": USER, "max_tokens": 0}, 400, "max_tokens"),
        ("unknown role", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400,
         "messages[0].role"),
        ("empty messages", "/v1/chat/completions", {"messages": []}, 400, "messages"),
        ("no messages", "/v1/chat/completions", {"prompt": "x"}, 400, "messages"),
        ("image part", "/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "x"}}]}]}, 400, "messages[0].content[0].type"),
        ("n = 0", "/v1/chat/completions", {"messages": USER, "n": 0}, 400, "n"),
        ("n over the slots and queue", "/v1/completions", {"prompt": "x", "n": 11}, 400, "n"),
        ("five stops", "/v1/completions", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
        ("two prompts", "/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt"),
        ("token out of vocab", "/v1/completions", {"prompt": [1, 99999]}, 400, "prompt"),
        ("logit_bias out of vocab", "/v1/chat/completions", {"messages": USER, "logit_bias": {"99999": 5}}, 400,
         "logit_bias"),
        ("logit_bias over 100", "/v1/completions", {"prompt": "x", "logit_bias": {"5": 100.5}}, 400, "logit_bias"),
        ("misspelt field", "/v1/chat/completions", {"messages": USER, "max_token": 5}, 400, "max_token"),
        ("unsupported field", "/v1/chat/completions", {"messages": USER, "reasoning_effort": "low"}, 400,
         "reasoning_effort"),
    ]
    for what, path, body, status, param in bad:
        st, b, _ = s.request("POST", path, raw=body if isinstance(body, str) else json.dumps(body))
        error_shape(st, json.loads(b), status, what, param)
    # An empty prompt is BOS alone on this vocabulary (SmolLM2's, without BOS, refuses it).
    st, b = s.post("/v1/completions", {"prompt": "", "max_tokens": 2})
    check(st == 200 and b["usage"]["prompt_tokens"] == 1, f"empty prompt: {st} {b}")
    # A prompt longer than the context: 400 saying by how much (4096 positions, one kept free).
    st, b, _ = s.request("POST", "/v1/completions", {"prompt": [5] * 4200})
    if error_shape(st, json.loads(b), 400, "prompt too long", "prompt"):
        msg = json.loads(b)["error"]["message"]
        check("105 tokens too many" in msg and json.loads(b)["error"]["code"] == "context_length_exceeded", msg)
    st, b, _ = s.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "lighthouse " * 5000}]})
    error_shape(st, json.loads(b), 400, "chat prompt too long", "messages")
    # Over --max-body: 413.
    st, b, _ = s.request("POST", "/v1/completions", raw=json.dumps({"prompt": "x" * 70000}))
    error_shape(st, json.loads(b), 413, "body over --max-body")
    st, b, _ = s.request("GET", "/v1/nothing")
    error_shape(st, json.loads(b), 404, "unknown route")
    st, b, h = s.request("GET", "/v1/chat/completions")
    error_shape(st, json.loads(b), 405, "GET on a POST route")
    check(h.get("Allow") == "POST", f"Allow header: {h}")
    st, b, _ = s.request("POST", "/health", {})
    error_shape(st, json.loads(b), 405, "POST /health")
    st, b, _ = s.request("GET", "/v1/models/gpt-4")
    error_shape(st, json.loads(b), 404, "unknown model id", "model")


def check_concurrency(s):
    c = s.client()
    prompts = [f"The keeper counted {n} ships and" for n in range(8)]
    alone = [c.completions.create(model="x", prompt=p, max_tokens=16, temperature=0).choices[0].text for p in prompts]
    check(len(set(alone)) > 1, f"eight prompts, one answer: {alone}")
    got = [None] * 8

    def one(i):
        got[i] = s.client().completions.create(model="x", prompt=prompts[i], max_tokens=16, temperature=0).choices[0].text

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(got == alone, f"8 concurrent clients: {sum(a != b for a, b in zip(got, alone))} answers differ from alone")

    # --parallel 2: the second stream's first token arrives before the first
    # stream ends. b starts once a has its first token; each asks for 4000
    # tokens (the tiny model decodes about 10,000 tokens/s on one thread, so
    # a alone would run for about 0.4 s: ample time for b to join).
    times = {}
    a_started = threading.Event()

    def stream(name):
        stamps = []
        for k in s.client().completions.create(model="x", prompt="The keeper", max_tokens=4000, temperature=0,
                                               stream=True):
            if k.choices and k.choices[0].text:
                stamps.append(time.monotonic())
                a_started.set()
        times[name] = stamps

    a = threading.Thread(target=stream, args=("a",))
    a.start()
    a_started.wait(timeout=60)
    b = threading.Thread(target=stream, args=("b",))
    b.start()
    a.join()
    b.join()
    if check(times.get("a") and times.get("b"), f"streams: {times.keys()}"):
        check(times["b"][0] < times["a"][-1] and times["a"][0] < times["b"][-1],
              f"not interleaved: a {times['a'][0]:.3f}..{times['a'][-1]:.3f}, b {times['b'][0]:.3f}..{times['b'][-1]:.3f}")


def check_cache_and_disconnect(s):
    c = s.client()
    first = c.chat.completions.create(model="x", messages=USER, max_tokens=16, temperature=0)
    conv = USER + [{"role": "assistant", "content": first.choices[0].message.content},
                   {"role": "user", "content": "And then?"}]
    second = c.chat.completions.create(model="x", messages=conv, max_tokens=8, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    check(cached >= first.usage.prompt_tokens, f"cached_tokens {cached} < the first prompt's {first.usage.prompt_tokens}")
    check(second.model_extra["timings"]["cache_n"] == cached, f"timings.cache_n: {second.model_extra['timings']}")

    # A client that drops the connection mid-stream frees its slot.
    before = s.metrics()
    t0 = time.monotonic()
    st, events, _ = sse(s, "/v1/completions", {"prompt": "The keeper", "max_tokens": 3000, "temperature": 0,
                                               "stream": True}, stop_after=5, linger_rst=True)
    check(st == 200 and len(events) == 5, f"stream before disconnect: {st} {len(events)}")
    deadline = time.monotonic() + 5
    while metric(s.metrics(), "ptxlm_slots_active") != 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    freed = time.monotonic() - t0
    after = s.metrics()
    gen = metric(after, "ptxlm_generated_tokens_total") - metric(before, "ptxlm_generated_tokens_total")
    check(metric(after, "ptxlm_slots_active") == 0 and gen < 500, f"slot not freed: {gen} tokens generated, {freed:.2f} s")
    print(f"disconnect: slot free {freed * 1000:.0f} ms after the client closed, {gen:.0f} tokens generated in all")
    t1 = time.monotonic()
    r = c.completions.create(model="x", prompt="The keeper", max_tokens=4, temperature=0)
    check(r.usage.completion_tokens == 4 and time.monotonic() - t1 < 5, "the next request after a disconnect")


def check_metrics(s, requests_before):
    m = s.metrics()
    for name in ("ptxlm_prompt_tokens_total", "ptxlm_generated_tokens_total", "ptxlm_generated_tokens_per_second",
                 "ptxlm_queue_depth", "ptxlm_slots_active", "ptxlm_slots_total", "ptxlm_prompt_tokens_cached_total"):
        check(metric(m, name) is not None, f"/metrics lacks {name}")
    check(metric(m, "ptxlm_slots_total") == 2 and metric(m, "ptxlm_slots_active") == 0 and metric(m, "ptxlm_queue_depth") == 0,
          "slots and queue at rest")
    check(metric(m, "ptxlm_generated_tokens_per_second") > 0 and metric(m, "ptxlm_prompt_tokens_cached_total") > 0,
          "throughput and cache figures")
    check(metric(m, "ptxlm_kv_cache_tokens", slot="0") is not None and metric(m, "ptxlm_kv_cache_usage_ratio", slot="1") is not None,
          "KV use per slot")
    # The two CPU slots share one paged KV pool and are stepped together: the
    # pages add up, the slots' cached tokens are in used pages, and the steps
    # batched more than one token on average (two streams ran together).
    pages = [metric(m, "ptxlm_kv_pages", state=st) for st in ("used", "cached", "free")]
    held = sum(metric(m, "ptxlm_kv_cache_tokens", slot=str(i)) for i in range(2))
    size = metric(m, "ptxlm_kv_page_positions")
    check(None not in pages and sum(pages) == metric(m, "ptxlm_kv_pages_total") and size
          and pages[0] * size >= held > (pages[0] - 2) * size,
          f"KV pages {pages} of {metric(m, 'ptxlm_kv_pages_total')}, {held} positions held")
    steps, tokens = metric(m, "ptxlm_batch_steps_total"), metric(m, "ptxlm_batch_step_tokens_total")
    check(steps and tokens > steps, f"batched steps: {steps} steps, {tokens} tokens")
    ok = metric(m, "ptxlm_requests_total", endpoint="/v1/chat/completions", status="200") or 0
    check(ok >= requests_before, f"requests_total chat 200: {ok}")
    check((metric(m, "ptxlm_requests_total", endpoint="/v1/completions", status="400") or 0) >= 3, "400s counted")
    check((metric(m, "ptxlm_requests_total", endpoint="other", status="404") or 0) >= 1, "404s counted")


def check_bad_loop(s, reference):
    # Many bad requests in a row; afterwards the server answers as before.
    c = s.client()
    for i in range(40):
        s.request("POST", "/v1/chat/completions", raw=["{", "[]", '{"messages": 1}', '{"messages": [{"role": "x"}]}',
                                                       json.dumps({"messages": USER, "temperature": 9})][i % 5])
        s.request("GET", f"/nope/{i}")
    again = c.completions.create(model="x", prompt="The keeper climbed the stairs", max_tokens=24, temperature=1.0,
                                 seed=42).choices[0].text
    check(again == reference, "answers changed after a loop of bad requests")


def check_api_key(model):
    s = Server(model, "-t", "1", env={"PTXLM_API_KEY": "sekret"})
    try:
        try:
            s.client("wrong").chat.completions.create(model="x", messages=USER, max_tokens=2)
            check(False, "a wrong key was accepted")
        except openai.AuthenticationError as e:
            check(e.status_code == 401 and e.body.get("code") == "invalid_api_key", f"401 body: {e.body}")
        st, b, _ = s.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
        error_shape(st, json.loads(b), 401, "missing key")
        r = s.client("sekret").chat.completions.create(model="x", messages=USER, max_tokens=3, temperature=0)
        check(r.usage.completion_tokens > 0, "the right key")
        k = list(s.client("sekret").completions.create(model="x", prompt="The", max_tokens=3, stream=True))
        check(k and k[-1].choices[0].finish_reason, "streaming with the key")
        check(s.get("/health")[0] == 200 and s.get("/v1/models")[0] == 200, "/health and /v1/models stay open")
        check(s.get("/metrics")[0] == 401 and s.get("/metrics", {"Authorization": "Bearer sekret"})[0] == 200,
              "/metrics needs the key")
    finally:
        check(s.stop() == 0, "key server exit")


def check_queue_and_sigterm(model):
    s = Server(model, "-t", "1", "-c", "4096", "--parallel", "1", "--queue", "1")
    try:
        body = {"prompt": "The keeper", "max_tokens": 3500, "temperature": 0, "stream": True}
        results = {}

        def stream(name):
            results[name] = sse(s, "/v1/completions", body)

        first = threading.Thread(target=stream, args=("first",))
        first.start()
        deadline = time.monotonic() + 10
        while metric(s.metrics(), "ptxlm_slots_active") != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        queued = threading.Thread(target=stream, args=("queued",))
        queued.start()
        while metric(s.metrics(), "ptxlm_queue_depth") != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        st, b, _ = s.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
        if error_shape(st, json.loads(b), 503, "full queue"):
            check(json.loads(b)["error"]["code"] == "server_busy", f"503 body: {b}")
        try:
            s.client().completions.create(model="x", prompt="x", max_tokens=1)
            check(False, "the openai client got an answer from a full server")
        except openai.InternalServerError as e:
            check(e.status_code == 503, f"openai client on a full queue: {e}")
        # SIGTERM while one stream runs and one waits: both end with an error event; exit 0.
        time.sleep(0.2)
        t0 = time.monotonic()
        rc = s.stop()
        first.join(10)
        queued.join(10)
        check(rc == 0, f"exit code after SIGTERM: {rc}; log: {s.stderr()[-500:]}")
        check(time.monotonic() - t0 < 10, "shutdown took too long")
        st, events, _ = results.get("first", (0, [], b""))
        check(st == 200 and len(events) > 1 and isinstance(events[-1], dict) and "error" in events[-1]
              and events[-1]["error"]["code"] == "shutting_down", f"the running stream's end: {events[-1:]}")
        st, events, raw = results.get("queued", (0, [], b""))
        check(st == 503 and json.loads(raw)["error"]["code"] == "shutting_down", f"the queued request: {st} {raw[:200]!r}")
    finally:
        if s.p.poll() is None:
            s.p.kill()


def check_smollm2():
    # The reference arithmetic: the answer's first token is a near-tie ("The"
    # 25.33 vs "L" 25.24), which the quantized path's 8-bit activations may
    # flip; the semantic check below wants the float32 answer.
    s = Server(SMOL, "-t", "2", "-c", "512", "--cpu-path", "reference")
    try:
        q = "What is the capital of France?"
        r = s.client().chat.completions.create(model="x", messages=[{"role": "user", "content": q}], max_tokens=12,
                                               temperature=0)
        run = subprocess.run([PTXLM, "run", "-m", str(SMOL), "--chat", "-p", q, "--temp", "0", "-n", "12", "--json",
                              "-t", "2", "--cpu-path", "reference"], capture_output=True, text=True)
        want = json.loads(run.stdout)
        check(r.choices[0].message.content == want["text"], f"SmolLM2: {r.choices[0].message.content!r} != "
              f"ptxlm run's {want['text']!r}")
        check(r.usage.prompt_tokens == len(want["prompt_tokens"]), "SmolLM2 prompt tokens")
        st, b = s.post("/v1/completions", {"prompt": "", "max_tokens": 2})
        error_shape(st, b, 400, "SmolLM2 empty prompt", "prompt")
        check("Paris" in r.choices[0].message.content, f"SmolLM2 answer: {r.choices[0].message.content!r}")
        check(s.get("/v1/models")[0] == 200 and json.loads(s.get("/v1/models")[1])["data"][0]["id"] ==
              "SmolLM2-135M-Instruct.Q4_1", "SmolLM2 model id")
    finally:
        check(s.stop() == 0, "SmolLM2 server exit")


def check_small_pool(model):
    """--parallel 8 over a KV pool of two contexts (512 positions, 32 pages):
    concurrent greedy requests whose prompts alone need 1.5 pools are preempted
    and resumed, their answers those made one by one; then 16 streaming
    clients, some dropping the connection at random points, some sending a
    bad request; afterwards no sequence runs or waits, the pages in use are
    only those the slots' cached conversations hold, and the server answers
    as before."""
    import random
    s = Server(model, "-t", "1", "-c", "256", "--parallel", "8", "--kv-size", "512", "--queue", "32")
    try:
        c = s.client()
        # Prompts of about 70 to 140 tokens: about 760 positions in all before
        # any generated token.
        prompts = [f"The keeper of lighthouse {n} counted the ships" + " and the waves" * (15 + 4 * n) for n in range(8)]
        alone = [c.completions.create(model="x", prompt=p, max_tokens=64, temperature=0).choices[0].text
                 for p in prompts]
        # The tiny model answers a request in milliseconds, so the eight
        # overlap only when they start together: clients made beforehand, a
        # barrier, and up to five rounds until one shows a preemption (a
        # round without one, when the requests happened not to overlap, has
        # nothing to test; every round's answers must equal those alone).
        clients = [s.client() for _ in range(8)]
        pre = None
        for rnd in range(5):
            got = [None] * 8
            start = threading.Barrier(8)

            def one(i):
                start.wait()
                got[i] = clients[i].completions.create(model="x", prompt=prompts[i], max_tokens=64,
                                                       temperature=0).choices[0].text

            threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            check(got == alone, f"small pool, 8 concurrent greedy clients, round {rnd + 1}: "
                                f"{sum(a != b for a, b in zip(got, alone))} answers differ from one by one")
            pre = metric(s.metrics(), "ptxlm_preemptions_total")
            if pre:
                break
        print(f"small pool: {pre or 0:.0f} preemptions after {rnd + 1} round(s) of 8 concurrent requests")
        check(pre is not None and pre > 0,
              f"no preemption in 5 rounds in a pool of 512 positions for prompts of ~760: {pre}")

        rng = random.Random(7)
        plan = [(rng.choice(["complete", "complete", "drop", "drop", "bad"]), rng.randint(20, 100), rng.randint(1, 30))
                for _ in range(16)]
        outcome = [None] * 16

        def client(i):
            kind, max_tokens, drop_after = plan[i]
            body = {"prompt": prompts[i % 8] + f" {i}", "max_tokens": max_tokens, "temperature": 0.8, "seed": i,
                    "stream": True}
            if kind == "bad":
                body["temperature"] = -1
            try:
                st, events, raw = sse(s, "/v1/completions", body, stop_after=drop_after if kind == "drop" else None,
                                      linger_rst=kind == "drop")
            except OSError as e:
                outcome[i] = (kind, f"OSError {e}")
                return
            if kind == "bad":
                outcome[i] = (kind, "ok" if st == 400 else f"status {st}")
            elif kind == "drop":
                outcome[i] = (kind, "ok" if st == 200 and events else f"status {st}, {len(events)} events")
            else:
                done = events and events[-1] == b"[DONE]" and any(
                    isinstance(e, dict) and e.get("choices") and e["choices"][0].get("finish_reason") for e in events)
                outcome[i] = (kind, "ok" if st == 200 and done else f"status {st}, {len(events)} events, no end")

        threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        bad = [(i, o) for i, o in enumerate(outcome) if o is None or o[1] != "ok"]
        check(not bad, f"16 clients on a small pool: {bad}")
        deadline = time.monotonic() + 10
        while metric(s.metrics(), "ptxlm_slots_active") != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        m = s.metrics()
        seqs = (metric(m, "ptxlm_sequences", state="running"), metric(m, "ptxlm_sequences", state="waiting"))
        check(metric(m, "ptxlm_slots_active") == 0 and seqs == (0, 0), f"at rest: active "
              f"{metric(m, 'ptxlm_slots_active')}, sequences running/waiting {seqs}")
        size = metric(m, "ptxlm_kv_page_positions")
        # Each slot's sequence holds the pages of its positions in the pool
        # (pages shared by a common prefix counted once in `used`).
        each = [-(-metric(m, "ptxlm_kv_cache_tokens", slot=str(i)) // size) for i in range(8)]
        held, used = sum(each), metric(m, "ptxlm_kv_pages", state="used")
        check(metric(m, "ptxlm_kv_pages_total") == 32 and max(each) <= used <= held,
              f"page leak: {used} pages in use, the slots' sequences hold {each} (pages of {size})")
        buckets = [metric(m, "ptxlm_batch_step_sequences_bucket", le=le) for le in ("1", "8", "+Inf")]
        check(None not in buckets and buckets[0] < buckets[1] <= buckets[2], f"step sizes: {buckets}")
        print(f"small pool: {pre:.0f} preemptions, then {used:.0f} pages in use for {held:.0f} held; "
              f"steps by sequences <=1/<=8/all {buckets}")
        again = c.completions.create(model="x", prompt=prompts[3], max_tokens=64, temperature=0).choices[0].text
        check(again == alone[3], "the answer after the stress differs")
    finally:
        rc = s.stop()
        check(rc == 0, f"small pool server exit code {rc}")
        if failures_so_far():
            print(s.stderr()[-3000:])
    # A pool smaller than one context is refused at start.
    p = subprocess.run([PTXLM, "serve", "-m", str(model), "--port", "0", "-c", "256", "--parallel", "2",
                        "--kv-size", "100"], capture_output=True, text=True, timeout=60)
    check(p.returncode != 0 and "100 positions" in p.stderr and "256" in p.stderr,
          f"--kv-size 100 with -c 256: exit {p.returncode}, {p.stderr[-300:]!r}")
    # The pool's options with one slot: refused by name, not ignored.
    for flag in (["--kv-size", "512"], ["--batch-tokens", "8"]):
        p = subprocess.run([PTXLM, "serve", "-m", str(model), "--port", "0", "-c", "256", "--parallel", "1", *flag],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and flag[0] in p.stderr and "--parallel 1" in p.stderr,
              f"{flag[0]} with --parallel 1: exit {p.returncode}, {p.stderr[-300:]!r}")


def main():
    model = synth("llama", "tiny")
    t0 = time.monotonic()
    s = Server(model, "-t", "1", "-c", "4096", "--parallel", "2", "--queue", "8", "--max-body", "65536")
    try:
        reference = check_basics(s, model)
        print(f"basics: {time.monotonic() - t0:.1f} s")
        check_errors(s)
        check_bad_loop(s, reference)
        check_concurrency(s)
        print(f"concurrency: {time.monotonic() - t0:.1f} s")
        check_cache_and_disconnect(s)
        check_metrics(s, 3)
    finally:
        rc = s.stop()
        check(rc == 0, f"exit code {rc}")
        if failures_so_far():
            print(s.stderr()[-3000:])
    print(f"main server: {time.monotonic() - t0:.1f} s")
    check_api_key(model)
    check_queue_and_sigterm(model)
    print(f"queue and shutdown: {time.monotonic() - t0:.1f} s")
    check_small_pool(model)
    print(f"small pool: {time.monotonic() - t0:.1f} s")
    check_smollm2()
    print(f"total: {time.monotonic() - t0:.1f} s")
    return finish()


def failures_so_far():
    from checks import failures
    return bool(failures)


if __name__ == "__main__":
    sys.exit(main())
