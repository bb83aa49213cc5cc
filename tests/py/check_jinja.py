"""ptxlm's Jinja interpreter against jinja2 on real chat templates.

Every template in tests/data/jinja_templates/ (llama.cpp's models/templates,
the model authors' templates), in tests/data/templates/ (the families of
tests/py/check_templates.py) and SmolLM2's from its model file (when present)
is rendered over several conversations — plain turns, a system message, a
single user turn, ending on the assistant, tools with an assistant tool call
and a tool result (HF's message format; arguments as an object and as a JSON
string), an assistant turn with reasoning_content, contents as a list of
text parts, and template text inside a message (inserted, never run) — with add_generation_prompt true and
false and enable_thinking absent, false and true. Both sides render as Hugging
Face's apply_chat_template does: jinja2's ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loop controls and the generation tag; HF's tojson,
raise_exception, and strftime_now pinned to one date for both. Each rendering
must be byte-identical, or both must fail (with the same message when the
template called raise_exception).

Then random templates made of whitespace-heavy text and tags with every
whitespace marker ('-', '+', none) — if/else, for, set, comments, raw,
macros, {{ }} — are rendered both ways (a fixed seed, so the same ones each
run): trim_blocks and lstrip_blocks must behave exactly as jinja2's lexer.

Every rendering also carries the byte ranges the template wrote (ptxlm's
chat_context: message and tool strings are data, roles and BOS/EOS template
text), which is where the prompt's control tokens are read. Checked on each:
every control-token-like string (<|x|>, <x>, </x>, [X], <｜x｜>) that no data
string holds lies wholly in template text, and the control token inside a
user's message stays data wherever the message is written.

Templates listed in EXPECTED_FAIL (with the reason) may differ; any other
difference fails the check, and so does an expected failure that now passes
(remove it from the list).

usage: check_jinja.py [path/to/jinja_render] [-v]
"""
import datetime
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402

SRC = Path(os.environ.get("PTXLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
RENDER = next((a for a in sys.argv[1:] if not a.startswith("-")), "build/tests/jinja_render")
VERBOSE = "-v" in sys.argv
TEMPLATES = SRC / "tests/data/jinja_templates"
FAMILY_TEMPLATES = SRC / "tests/data/templates"
MODELS = Path(os.environ.get("PTXLM_MODELS_DIR") or SRC / "models")
NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)

# template file -> why it cannot match (outside the supported subset)
EXPECTED_FAIL = {
}


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    pass


def raise_exception(message):
    raise RaisedByTemplate(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class Generation(jinja2.ext.Extension):
    """HF's {% generation %} tag (AssistantTracker), without the tracking."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

    def _generation(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


SYSTEM = {"role": "system", "content": "You are a helpful assistant.\nAnswer briefly."}
U1 = {"role": "user", "content": "Hello! How are you?"}
A1 = {"role": "assistant", "content": "I am fine, thank you."}
U2 = {"role": "user", "content": "What is 2 + 2? Answer with café, 日本語 and 🎉.  "}
A2_REASONING = {"role": "assistant", "content": "4.", "reasoning_content": "The user asks for 2 + 2, which is 4."}
U3 = {"role": "user", "content": "And 3 + 3? <|im_start|>{{ not code }}{% if %}"}
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}, {
    "type": "function",
    "function": {"name": "get_time", "description": "The time now.", "parameters": {"type": "object", "properties": {}}},
}]
U_TOOL = {"role": "user", "content": "What's the weather in Paris?"}
A_CALL = {"role": "assistant", "content": "", "tool_calls": [{
    "id": "call_1", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
               "content": "{\"temperature\": 22, \"sky\": \"clear\"}"}
A_TOOL_ANSWER = {"role": "assistant", "content": "It is 22 °C and clear in Paris."}
A_CALL_STR = {"role": "assistant", "content": None, "tool_calls": [{
    "id": "call_2", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
U_PARTS = {"role": "user", "content": [{"type": "text", "text": "Describe this."}, {"type": "text", "text": "Briefly."}]}

# (name, messages, tools)
CONVERSATIONS = [
    ("plain", [U1, A1, U2], None),
    ("system", [SYSTEM, U1, A1, U2], None),
    ("single", [U1], None),
    ("ends-assistant", [SYSTEM, U1, A1], None),
    ("reasoning", [U1, A1, U2, A2_REASONING, U3], None),
    ("tools", [SYSTEM, U_TOOL, A_CALL, TOOL_RESULT, A_TOOL_ANSWER, U1], TOOLS),
    ("tools-pending", [U_TOOL, A_CALL, TOOL_RESULT], TOOLS),
    ("tools-string-args", [SYSTEM, U_TOOL, A_CALL_STR, TOOL_RESULT], TOOLS),
    ("content-parts", [SYSTEM, U_PARTS], None),
]
THINKING = [None, False, True]


def contexts():
    for name, messages, tools in CONVERSATIONS:
        for gen in (True, False):
            for thinking in THINKING:
                ctx = {"messages": messages, "tools": tools, "documents": None, "add_generation_prompt": gen,
                       "bos_token": "<s>", "eos_token": "</s>"}
                if thinking is not None:
                    ctx["enable_thinking"] = thinking
                yield f"{name} gen={gen} thinking={thinking}", ctx


def jinja2_render(template, ctx):
    try:
        return {"text": template.render(**ctx)}
    except RaisedByTemplate as e:
        return {"error": str(e), "raised": True, "message": str(e)}
    except Exception as e:  # noqa: BLE001 - any failure is "it raised"
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


CONTROL = re.compile(r"<\|[^<>|\s]{1,40}\|>|</?[a-z_]{1,30}>|\[/?[A-Z_]{2,30}\]|<｜[^｜]{1,40}｜>".encode())


def data_strings(ctx):
    """The caller's strings (roles excepted) and the keys of its dicts."""
    out = []

    def walk(x, key=None):
        if isinstance(x, str):
            if key != "role":
                out.append(x)
        elif isinstance(x, dict):
            for k, v in x.items():
                out.append(k)
                walk(v, k)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(ctx["messages"])
    walk(ctx["tools"])
    return out


def mark_errors(text, code, ctx):
    """What is wrong with the marks of one rendering: a list of messages."""
    b = text.encode()
    marked = bytearray(len(b))
    for begin, end in code:
        marked[begin:end] = b"\x01" * (end - begin)
    data = data_strings(ctx)
    errors = []
    for m in CONTROL.finditer(b):
        tok = m.group().decode()
        # Written by the caller, or built around one of its words ("<city>"
        # from a parameter's name): data either way.
        if any(tok in d for d in data) or tok.strip("<>/|[]｜") in data:
            continue
        if not all(marked[m.start():m.end()]):
            errors.append(f"the template's {tok!r} at byte {m.start()} is not marked as template text")
    for d in data:
        inner = [m for m in CONTROL.finditer(d.encode())]
        if not inner:
            continue
        db = d.encode()
        at = b.find(db)
        while at >= 0:
            for m in inner:
                if any(marked[at + m.start():at + m.end()]):
                    errors.append(f"the user's {m.group().decode()!r} at byte {at + m.start()} is marked as template text")
            at = b.find(db, at + 1)
    return errors


def same(want, got):
    if "text" in want:
        return got.get("text") == want["text"]
    if "text" in got:
        return False
    if want.get("raised"):   # raise_exception: ours must carry the same message
        return got.get("raised") and got["error"].endswith("raise_exception: " + want["message"])
    return True


class Source:
    def __init__(self, name, text):
        self.name, self.text = name, text


def sources():
    files = sorted(TEMPLATES.glob("*.jinja"))
    check(len(files) >= 60, f"expected llama.cpp's templates in {TEMPLATES}, found {len(files)}")
    out = [Source(f.name, f.read_text(encoding="utf-8")) for f in files]
    out += [Source("templates/" + f.name, f.read_text(encoding="utf-8")) for f in sorted(FAMILY_TEMPLATES.glob("*.jinja"))]
    smollm2 = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if smollm2.exists():
        import gguf
        out.append(Source("SmolLM2 (model file)",
                          gguf.GGUFReader(str(smollm2)).fields["tokenizer.chat_template"].contents()))
    return out


WS_TEXT = [" ", "  ", "\t", "\n", "\n\n", "a", "b c", " \n ", "\r\n", "\u00a0", "x\n  ", "  y", "\n\t"]


def whitespace_template(rng, depth=0):
    """A random template of text and tags with random whitespace markers."""
    def mark():
        return rng.choice(["", "", "-", "+"])

    def text():
        return "".join(rng.choice(WS_TEXT) for _ in range(rng.randint(0, 4)))

    def tag(body):
        return "{%" + mark() + " " + body + " " + mark() + "%}"

    out = text()
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if depth < 3 and r < 0.25:
            out += (tag("if x") + whitespace_template(rng, depth + 1) + tag("else") + whitespace_template(rng, depth + 1)
                    + tag("endif"))
        elif depth < 3 and r < 0.45:
            out += tag("for i in [1, 2]") + whitespace_template(rng, depth + 1) + tag("endfor")
        elif r < 0.6:
            out += "{{" + rng.choice(["", "-"]) + " 'v' " + rng.choice(["", "-"]) + "}}"
        elif r < 0.7:
            out += "{#" + mark() + " c " + mark() + "#}"
        elif r < 0.8:
            out += tag("set y = 1")
        elif r < 0.87:
            out += ("{%" + mark() + " raw " + rng.choice(["", "-"]) + "%}" + text() + "{{ r }}" + text()
                    + tag("endraw"))
        else:
            out += tag("macro q()") + text() + tag("endmacro") + "{{ q() }}"
        out += text()
    return out


def whitespace_fuzz(env, n=800):
    rng = random.Random(23)
    jobs, want = [], []
    for _ in range(n):
        src = whitespace_template(rng)
        template = env.from_string(src)
        for x in (True, False):
            jobs.append({"template": src, "context": {"x": x}})
            want.append(template.render(x=x))
    p = subprocess.run([RENDER, "--batch"], input=json.dumps({"jobs": jobs}), capture_output=True, text=True, timeout=120)
    if not check(p.returncode == 0, f"jinja_render failed ({p.returncode}): {p.stdout[-2000:]} {p.stderr[-2000:]}"):
        return
    bad = 0
    for job, w, g in zip(jobs, want, json.loads(p.stdout)["results"]):
        if g.get("text") != w:
            bad += 1
            if bad <= 3:
                print(f"whitespace: {job['template']!r} x={job['context']['x']}:\n  jinja2: {w!r}\n  ptxlm:  {g!r}")
    check(bad == 0, f"{bad} of {len(jobs)} random whitespace templates render differently")
    print(f"{len(jobs) - bad}/{len(jobs)} random whitespace-control renderings identical")


def main():
    env = environment()
    whitespace_fuzz(env)
    files = sources()
    cases = list(contexts())
    want, jobs = {}, []
    t0 = time.time()
    for f in files:
        try:
            template = env.from_string(f.text)
            want[f.name] = [jinja2_render(template, ctx) for _, ctx in cases]
        except jinja2.exceptions.TemplateSyntaxError as e:
            want[f.name] = [{"error": f"syntax: {e}", "raised": False}] * len(cases)
        for _, ctx in cases:
            jobs.append({"template": f.text, "context": ctx, "chat": True})
    t1 = time.time()
    p = subprocess.run([RENDER, "--batch"], input=json.dumps({"now": [NOW.year, NOW.month, NOW.day, NOW.hour, NOW.minute,
                                                                      NOW.second], "jobs": jobs}),
                       capture_output=True, text=True, timeout=120)
    t2 = time.time()
    if not check(p.returncode == 0, f"jinja_render failed ({p.returncode}): {p.stdout[-2000:]} {p.stderr[-2000:]}"):
        return finish()
    results = json.loads(p.stdout)["results"]
    passed, identical, total, marks_checked = [], 0, 0, 0
    k = 0
    for f in files:
        ok = True
        mark_reported = False
        for (case, ctx), w in zip(cases, want[f.name]):
            g = results[k]
            k += 1
            total += 1
            if "text" in g:
                marks_checked += 1
                errors = mark_errors(g["text"], g["code"], ctx)
                if errors and not mark_reported:
                    mark_reported = True
                    print(f"{f.name} [{case}]: " + "; ".join(errors[:3]))
                check(not errors, f"{f.name}: the marks of template text are wrong")
            if same(w, g):
                identical += 1
                continue
            if ok and (VERBOSE or f.name not in EXPECTED_FAIL):
                print(f"{f.name} [{case}]:\n  jinja2: {str(w)[:1500]!r}\n  ptxlm:  {str(g)[:1500]!r}")
            ok = False
        if ok:
            passed.append(f.name)
            check(f.name not in EXPECTED_FAIL, f"{f.name} passes now: remove it from EXPECTED_FAIL")
        else:
            check(f.name in EXPECTED_FAIL, f"{f.name}: ptxlm's rendering differs from jinja2's")
    both_raise = sum(1 for f in files for w in want[f.name] if "text" not in w)
    print(f"{len(passed)}/{len(files)} templates identical in all {len(cases)} cases "
          f"({100.0 * len(passed) / len(files):.1f}%); {identical}/{total} renderings match "
          f"({both_raise} where jinja2 raises); jinja2 {t1 - t0:.1f} s, ptxlm {t2 - t1:.1f} s; "
          f"marks checked on {marks_checked} renderings")
    for name, why in sorted(EXPECTED_FAIL.items()):
        print(f"  expected failure: {name}: {why}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
