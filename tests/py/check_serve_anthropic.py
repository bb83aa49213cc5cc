"""`ptxlm serve`'s Anthropic Messages API (POST /v1/messages) as the official
`anthropic` client drives it, on a tiny synthetic llama behind --api-key.

A text message (system prompt, content blocks, several turns) whose greedy
answer and token counts equal the same conversation through
/v1/chat/completions; the streamed message (text_stream joined, the final
message's usage and stop_reason) equal to it, and the raw events in
Anthropic's order and shape; stop_sequences giving "stop_sequence" with the
string matched (streamed and not); max_tokens giving "max_tokens"; bad
requests as anthropic.BadRequestError in Anthropic's error shape; a wrong
key in `x-api-key` or as Bearer (AuthenticationError), a missing one, the
right one either way; max_tokens 0 (the prompt only); a client that
drops its stream freeing the slot; and the server alive and unchanged after.

Tool use, sampled at temperature 1 (random weights, so the tool-call grammar
alone makes the calls valid): tool_choice {"type": "any"} gives stop_reason
"tool_use" and tool_use blocks ("toolu_" ids) whose input validates
(jsonschema) against the tool's input_schema; the same requests streamed
(`client.messages.stream`) give the same names and inputs for the same seed;
{"type": "tool"} calls the named tool, disable_parallel_tool_use one call
only; the calls sent back with tool_result blocks (one an error) and
tool_choice {"type": "none"} give a text answer; a tool_choice naming no
tool and a tool_result answering no tool_use are 400s naming them.
"""
import http.client
import json
import socket
import struct
import sys
import time
from pathlib import Path

import anthropic
import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_serve import Server, metric, synth  # noqa: E402
from checks import check, finish  # noqa: E402

KEY = "sekret"
# The anthropic client no longer has sampling parameters (Anthropic's newer
# models dropped them); the server reads them as Anthropic defined them.
GREEDY = {"extra_body": {"temperature": 0}}
SYSTEM = "You are the keeper's biographer."
# Text blocks of one message are joined by newlines on both endpoints.
TURNS = [
    {"role": "user", "content": [{"type": "text", "text": "Tell me about the keeper"},
                                 {"type": "text", "text": "of the lighthouse."}]},
    {"role": "assistant", "content": "He lived alone on the rock."},
    {"role": "user", "content": "What did he do at night?"},
]


WEATHER_SCHEMA = {"type": "object",
                  "properties": {"city": {"type": "string", "maxLength": 20},
                                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                  "required": ["city", "unit"], "additionalProperties": False}
TIME_SCHEMA = {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET", "PST"]}},
               "required": ["zone"], "additionalProperties": False}
TOOLS = [{"name": "get_weather", "description": "The weather in a city.", "input_schema": WEATHER_SCHEMA},
         {"name": "get_time", "description": "The time in a zone.", "input_schema": TIME_SCHEMA}]
SCHEMAS = {t["name"]: t["input_schema"] for t in TOOLS}
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def client(s, key=KEY):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{s.port}", api_key=key, max_retries=0, timeout=120)


def raw_stream(s, body, headers=None, stop_after=None):
    """POST /v1/messages streamed over raw HTTP: (status, [(event name, data)]). stop_after=n: read n events, then
    reset the connection."""
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    conn.request("POST", "/v1/messages", json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json", "x-api-key": KEY, **(headers or {})})
    r = conn.getresponse()
    events, name = [], None
    if r.status != 200:
        r.read()
        conn.close()
        return r.status, events
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"event: "):
            name = line[7:].rstrip(b"\n").decode()
        elif line.startswith(b"data: "):
            events.append((name, json.loads(line[6:])))
            name = None
            if stop_after is not None and len(events) >= stop_after:
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.sock.close()
                break
    conn.close()
    return r.status, events


def check_message(s):
    """The text message, against /v1/chat/completions; returns the greedy answer."""
    c = client(s)
    r = c.messages.create(model="claude-x", max_tokens=32, **GREEDY, system=SYSTEM, messages=TURNS)
    check(r.type == "message" and r.role == "assistant" and r.id.startswith("msg_") and r.model == "llama-tiny",
          f"message: {r}")
    check(len(r.content) == 1 and r.content[0].type == "text" and r.content[0].text, f"content: {r.content}")
    check(r.stop_reason in ("end_turn", "max_tokens") and r.stop_sequence is None, f"stop: {r}")
    check(r.usage.output_tokens <= 32 and (r.stop_reason == "end_turn" or r.usage.output_tokens == 32),
          f"usage {r.usage} against {r.stop_reason}")
    text = r.content[0].text

    oa = s.client(KEY)
    oc = oa.chat.completions.create(model="x", max_tokens=32, temperature=0,
                                    messages=[{"role": "system", "content": SYSTEM}, *TURNS])
    check(oc.choices[0].message.content == text, f"/v1/messages {text!r} != /v1/chat/completions "
                                                 f"{oc.choices[0].message.content!r}")
    check(r.usage.input_tokens == oc.usage.prompt_tokens and r.usage.output_tokens == oc.usage.completion_tokens,
          f"usage {r.usage} != chat's {oc.usage}")
    want = {"stop": "end_turn", "length": "max_tokens"}.get(oc.choices[0].finish_reason)
    check(r.stop_reason == want, f"stop_reason {r.stop_reason} for finish_reason {oc.choices[0].finish_reason}")
    return r


def check_stream(s, ref):
    c = client(s)
    with c.messages.stream(model="claude-x", max_tokens=32, **GREEDY, system=SYSTEM, messages=TURNS) as st:
        pieces = list(st.text_stream)
        final = st.get_final_message()
    text = ref.content[0].text
    check(len(pieces) > 1 and "".join(pieces) == text, f"text_stream {pieces!r} != {text!r}")
    check(final.content[0].text == text and final.id.startswith("msg_"), f"final message: {final}")
    check(final.stop_reason == ref.stop_reason and final.stop_sequence is None, f"final stop: {final}")
    check(final.usage.output_tokens == ref.usage.output_tokens and final.usage.input_tokens == ref.usage.input_tokens,
          f"final usage {final.usage} != {ref.usage}")

    # The raw events: Anthropic's order, an `event:` line naming each, one id.
    status, events = raw_stream(s, {"model": "m", "max_tokens": 8, "temperature": 0, "system": SYSTEM,
                                    "messages": TURNS})
    names = [n for n, _ in events]
    check(status == 200 and names[:3] == ["message_start", "ping", "content_block_start"]
          and names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
          and set(names[3:-3]) == {"content_block_delta"}, f"event order: {names}")
    check(all(d.get("type") == n for n, d in events), f"event names and data types differ: {events}")
    if check(len(events) > 6, f"too few events: {names}"):
        start, delta = events[0][1]["message"], events[-2][1]
        check(start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] > 0,
              f"message_start: {start}")
        # 8 tokens, unless the 32-token answer ended before that.
        want = ("max_tokens", 8) if ref.usage.output_tokens >= 8 else ("end_turn", ref.usage.output_tokens)
        check((delta["delta"]["stop_reason"], delta["usage"]["output_tokens"]) == want,
              f"message_delta: {delta}, expected {want}")
        check(all(d["index"] == 0 and d["delta"]["type"] == "text_delta" for _, d in events[3:-3]), "text deltas")
        joined = "".join(d["delta"]["text"] for _, d in events[3:-3])
        check(text.startswith(joined), f"8 streamed tokens {joined!r} are not the answer's start {text!r}")


def check_stops(s, ref):
    c = client(s)
    base = ref.content[0].text
    # A stop string from the greedy answer whose first occurrence is past the start.
    stop = next((base[i:i + 3] for i in range(4, len(base) - 3)
                 if base[i:i + 3].strip() and base.find(base[i:i + 3]) == i), None)
    if check(stop is not None, f"no stop sequence candidate in {base!r}"):
        r = c.messages.create(model="m", max_tokens=32, **GREEDY, system=SYSTEM, messages=TURNS,
                              stop_sequences=["zzzz", stop])
        check(r.stop_reason == "stop_sequence" and r.stop_sequence == stop, f"stop {stop!r}: {r}")
        check(r.content[0].text == base[:base.find(stop)], f"text before {stop!r}: {r.content[0].text!r}")
        with c.messages.stream(model="m", max_tokens=32, **GREEDY, system=SYSTEM, messages=TURNS,
                               stop_sequences=[stop]) as st:
            streamed = "".join(st.text_stream)
            final = st.get_final_message()
        check(streamed == base[:base.find(stop)] and final.stop_reason == "stop_sequence"
              and final.stop_sequence == stop, f"streamed stop {stop!r}: {streamed!r} {final}")
    # A stop sequence the answer never holds changes nothing.
    r = c.messages.create(model="m", max_tokens=32, **GREEDY, system=SYSTEM, messages=TURNS,
                          stop_sequences=["\u2603never\u2603"])
    check(r.content[0].text == base and r.stop_sequence is None and r.stop_reason == ref.stop_reason,
          f"an absent stop sequence: {r}")
    check(ref.usage.output_tokens > 3, f"the reference answer is too short: {ref}")
    r = c.messages.create(model="m", max_tokens=3, **GREEDY, system=SYSTEM, messages=TURNS)
    check(r.stop_reason == "max_tokens" and r.usage.output_tokens == 3 and r.stop_sequence is None
          and base.startswith(r.content[0].text), f"max_tokens 3: {r}")
    # max_tokens 0 (Anthropic's cache warm-up): the prompt runs, nothing is generated.
    r = c.messages.create(model="m", max_tokens=0, system=SYSTEM, messages=TURNS)
    check(r.stop_reason == "max_tokens" and r.usage.output_tokens == 0 and r.content[0].text == ""
          and r.usage.input_tokens == ref.usage.input_tokens, f"max_tokens 0: {r}")


def error_body(e, want_type, word):
    body = e.body if isinstance(e.body, dict) else {}
    err = body.get("error") or {}
    return check(body.get("type") == "error" and err.get("type") == want_type and word in err.get("message", ""),
                 f"error body {e.body!r}: expected {want_type} naming {word!r}")


def check_errors(s):
    c = client(s)
    bad = [
        ("temperature above 1", {"extra_body": {"temperature": 1.5}}, "temperature"),
        ("tool_choice naming no tool", {"tools": TOOLS, "tool_choice": {"type": "tool", "name": "get_moon"}},
         "get_moon"),
        ("tool_result answering no tool_use", {"messages": [*TURNS[:2], {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_nothing", "content": "22"}]}]}, "toolu_nothing"),
        ("thinking", {"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
        ("unknown field", {"extra_body": {"frequency_penalty": 1}}, "frequency_penalty"),
        ("image block", {"messages": [{"role": "user", "content": [{"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}, "image"),
    ]
    for what, kw, word in bad:
        args = {"model": "m", "max_tokens": 4, "messages": TURNS, **kw}
        try:
            c.messages.create(**args)
            check(False, f"{what}: accepted")
        except anthropic.BadRequestError as e:
            check(e.status_code == 400, f"{what}: status {e.status_code}")
            error_body(e, "invalid_request_error", word)
    # Without the client: max_tokens missing, malformed JSON, a GET, in Anthropic's shape.
    for what, method, raw, status in [("no max_tokens", "POST", json.dumps({"model": "m", "messages": TURNS}), 400),
                                      ("bad JSON", "POST", "{", 400), ("GET", "GET", None, 405)]:
        st, b, _ = s.request(method, "/v1/messages", raw=raw, headers={"x-api-key": KEY})
        body = json.loads(b)
        check(st == status and body.get("type") == "error" and body["error"]["type"] == "invalid_request_error"
              and body["error"]["message"], f"{what}: {st} {body}")


def tool_uses(r):
    return [(b.name, b.input) for b in r.content if b.type == "tool_use"]


def valid_tool_use(r, names, what):
    """stop_reason tool_use, only tool_use blocks, each with a toolu_ id, a name in names and a valid input."""
    ok = check(r.stop_reason == "tool_use" and r.content and all(b.type == "tool_use" for b in r.content),
               f"{what}: {r.stop_reason} {r.content}")
    for b in r.content:
        if b.type != "tool_use":
            continue
        ok &= check(b.id.startswith("toolu_") and len(b.id) == 30 and b.name in names, f"{what}: {b}")
        try:
            jsonschema.validate(b.input, SCHEMAS[b.name])
        except (jsonschema.ValidationError, KeyError) as e:
            ok = check(False, f"{what}: input {b.input!r} invalid for {b.name}: {e}")
    return ok


def check_tools(s):
    c = client(s)
    t0 = time.monotonic()

    def ask(seed, **kw):
        args = {"model": "m", "max_tokens": 300, "messages": WEATHER, "tools": TOOLS[:1],
                "tool_choice": {"type": "any"}, "extra_body": {"temperature": 1, "seed": seed}, **kw}
        return c.messages.create(**args), args

    for seed in range(3):
        r, args = ask(seed)
        valid_tool_use(r, {"get_weather"}, f"tool_choice any seed {seed}")
        with c.messages.stream(**args) as st:
            final = st.get_final_message()
        check(tool_uses(final) == tool_uses(r) and final.stop_reason == "tool_use",
              f"streamed seed {seed}: {tool_uses(final)} ({final.stop_reason}) != {tool_uses(r)}")
    r, _ = ask(4, tools=TOOLS, tool_choice={"type": "tool", "name": "get_time"})
    valid_tool_use(r, {"get_time"}, "tool_choice get_time")
    r, _ = ask(5, tools=TOOLS, tool_choice={"type": "any", "disable_parallel_tool_use": True})
    if valid_tool_use(r, {"get_weather", "get_time"}, "disable_parallel_tool_use"):
        check(len(r.content) == 1, f"disable_parallel_tool_use: {len(r.content)} calls")

    # The round trip: the calls back as the assistant's turn, their results (one an error), no more tools.
    first, _ = ask(6)
    if check(tool_uses(first), f"round trip: no call to answer: {first}"):
        # The blocks as the client returned them (their unset fields null when dumped).
        conv = [*WEATHER, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "22 degrees",
                                              "is_error": i > 0} for i, b in enumerate(first.content)]}]
        a = c.messages.create(model="m", max_tokens=16, messages=conv, tools=TOOLS[:1],
                              tool_choice={"type": "none"}, extra_body={"temperature": 1, "seed": 1})
        check(a.stop_reason in ("end_turn", "max_tokens") and [b.type for b in a.content] == ["text"],
              f"round trip: {a}")
    print(f"tool use: {time.monotonic() - t0:.1f} s")


def header_client(s, key):
    """A client that sends the key as Anthropic's API does, in `x-api-key` (this client version sends its api_key
    as `Authorization: Bearer`)."""
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{s.port}", api_key=None, auth_token=None,
                               default_headers={"X-Api-Key": key}, max_retries=0, timeout=120)


def check_auth(s):
    for what, c in [("Bearer", client(s, "wrong")), ("x-api-key", header_client(s, "wrong"))]:
        try:
            c.messages.create(model="m", max_tokens=2, messages=TURNS)
            check(False, f"a wrong key was accepted ({what})")
        except anthropic.AuthenticationError as e:
            check(e.status_code == 401, f"wrong key ({what}): status {e.status_code}")
            error_body(e, "authentication_error", "API key")
    r = header_client(s, KEY).messages.create(model="m", max_tokens=2, messages=TURNS)
    check(r.usage.output_tokens == 2, f"the right key in x-api-key: {r}")
    body = {"model": "m", "max_tokens": 2, "temperature": 0, "messages": TURNS}
    st, b, _ = s.request("POST", "/v1/messages", body)
    check(st == 401 and json.loads(b)["error"]["type"] == "authentication_error", f"no key: {st} {b!r}")
    st, b, _ = s.request("POST", "/v1/messages", body, headers={"Authorization": f"Bearer {KEY}"})
    check(st == 200 and json.loads(b)["type"] == "message", f"Bearer key: {st} {b!r}")
    st, b, _ = s.request("POST", "/v1/messages", body, headers={"Authorization": "Bearer wrong"})
    check(st == 401, f"wrong Bearer key: {st} {b!r}")


def check_disconnect(s):
    auth = {"Authorization": f"Bearer {KEY}"}
    before = s.metrics(auth)
    t0 = time.monotonic()
    st, events = raw_stream(s, {"model": "m", "max_tokens": 3000, "temperature": 0, "messages": TURNS}, stop_after=6)
    check(st == 200 and len(events) == 6, f"stream before the disconnect: {st} {len(events)}")
    deadline = time.monotonic() + 5
    while metric(s.metrics(auth), "ptxlm_slots_active") != 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    after = s.metrics(auth)
    gen = metric(after, "ptxlm_generated_tokens_total") - metric(before, "ptxlm_generated_tokens_total")
    check(metric(after, "ptxlm_slots_active") == 0 and gen < 500,
          f"slot not freed after a disconnect: {gen} tokens, {time.monotonic() - t0:.2f} s")


def main():
    t0 = time.monotonic()
    model = synth("llama", "tiny")
    s = Server(model, "-t", "1", "-c", "4096", env={"PTXLM_API_KEY": KEY})
    try:
        ref = check_message(s)
        check_stream(s, ref)
        check_stops(s, ref)
        check_errors(s)
        check_tools(s)
        check_auth(s)
        check_disconnect(s)
        # Alive, and the same answer as before.
        check(s.get("/health")[0] == 200, "health after the checks")
        again = client(s).messages.create(model="m", max_tokens=32, **GREEDY, system=SYSTEM, messages=TURNS)
        check(again.content[0].text == ref.content[0].text, "the answer changed after the error checks")
    finally:
        rc = s.stop()
        check(rc == 0, f"exit code {rc}")
        if finish_failed():
            print(s.stderr()[-3000:])
    print(f"total: {time.monotonic() - t0:.1f} s")
    return finish()


def finish_failed():
    from checks import failures
    return bool(failures)


if __name__ == "__main__":
    sys.exit(main())
