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

Then the feature cases (FEATURE_CASES below: small templates written for
this check, one construct each — tuples and Python's repr, % formatting,
macro varargs/kwargs/caller, recursive loops, the loop object, with, and
the tags that need a loader) are rendered both ways over one context with
the same comparison and the same check of the marks.

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
    for k, v in ctx.items():   # everything but the template's own BOS/EOS text
        if k not in ("bos_token", "eos_token"):
            walk(v)
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


# The context of the feature cases: messages (data, with a control token in
# a user's text) and other values the templates take apart.
FEATURE_CONTEXT = {
    "messages": [{"role": "user", "content": "Hi <|im_start|> there"}, {"role": "assistant", "content": "it's \"ok\""}],
    "tools": None, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>",
    "d": {"a": 1, "b": "it's", "c": [1.5, None, True]},
    "xs": [3, 1, 2],
    "tree": [{"name": "a", "children": [{"name": "b", "children": [{"name": "c", "children": []}]}]},
             {"name": "d", "children": []}],
    "n": 42, "f": 3.14159, "s": "héllo", "u": "\u00a0\u2028\x85\u200b\ue000é🎉\x7f\u00ad",
}

# (name, template): each rendered over FEATURE_CONTEXT by both.
FEATURE_CASES = [
    # Tuples and Python's repr inside containers; tojson still gives arrays.
    ("tuple", "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [1, 2] }} {{ ((1, 2),) }} {{ [(1,), ()] }} {{ (none, true, 1.5) }}"),
    ("tuple-bare", "{% set t = 1, 'a' %}{{ t }} {{ t | length }} {{ t[1] }} {{ t[:1] }} {{ t[::-1] }} {{ t | list }}"),
    ("tuple-ops", "{{ (1, 2) + (3,) }} {{ (1,) * 3 }} {{ 2 * ('a',) }} {{ (1, 2) == [1, 2] }} {{ (1, 2) == (1, 2) }}"
                  " {{ (1, 2) != [1, 2] }} {{ (1, 2) < (1, 3) }} {{ (1, 2) in [(1, 2)] }} {{ [1, 2] in [(1, 2)] }}"),
    ("tuple-list-add", "{{ [1] + (2,) }}"),
    ("tuple-list-lt", "{{ [(1, 2), [1, 3]] | max }}"),
    ("tuple-filters", "{{ (3, 1, 2) | sort }} {{ (1, 2) | join('-') }} {{ (1, 2) | first }} {{ (1, 2) | last }}"
                      " {{ (2, 1) | reverse | list }} {{ (1, 1) | unique | list }} {{ (1, 2) | string }} {{ (1, 2) | sum }}"
                      " {{ (1,) is sequence }} {{ (1,) is mapping }} {{ (1, 2).count(1) }} {{ (1, 2).index(2) }}"),
    ("tuple-tojson", "{{ (1, 'a') | tojson }} {{ {'k': (1, (2,))} | tojson }} {{ d.items() | list | tojson }}"),
    ("tuple-dict-key", "{% set m = {(1, 2): 'x'} %}{{ m }} {{ (1, 2) in m }} {{ m[(1, 2)] }}"),
    ("tuple-unhashable", "{{ {(1, [2]): 'x'} }}"),
    ("dict-items", "{{ d.items() | list }} {{ d | items | list }} {{ d | dictsort }} {{ d | dictsort | first }}"
                   " {{ d.items() | first }} {{ d.items() | map('last') | list }}"),
    ("dict-views", "{{ d.items() }} {{ d.keys() }} {{ d.values() }} {{ d.keys() | list }} {{ d.keys() | length }}"
                   " {{ 'a' in d.keys() }} {{ ('a', 1) in d.items() }} [{{ d.keys()[0] }}] {{ d.keys() is sequence }}"
                   " {{ d.keys() == ['a', 'b', 'c'] }} {{ d.keys() == d.keys() }} {{ d.values() == d.values() }}"),
    ("dict-view-tojson", "{{ d.keys() | tojson }}"),
    ("dict-view-slice", "{{ d.items()[1:] }}"),
    ("repr-strings", "{{ ['a', \"it's\", 'say \"hi\"', 'both \\' and \"', 'tab\\t', 'nl\\n', 'back\\\\slash'] }}"
                     " {{ {'k': s} }} {{ (s, n, f) }} {{ messages | map(attribute='content') | list }}"),
    ("repr-unicode", "{{ [u] }} {{ u | list }}"),
    ("undefined-attr-unsafe", "[{{ xs.append }}] {{ xs.append is defined }} [{{ (1, 2).append }}]"),
    ("unsafe-call", "{{ xs.append(1) }}"),
    # Python's % formatting.
    ("percent", "{{ '%s and %d' % ('a', 3) }} {{ '%s' % 'x' }} {{ '%r' % 'x' }} {{ '%r' % (\"it's\",) }} {{ '%05.2f' % f }}"
                " [{{ '%-5s' % 'ab' }}] [{{ '%5s' % 'ab' }}] {{ '100%%' % () }} {{ '%s' % xs }} {{ '%s' % ((1, 2),) }}"),
    ("percent-ints", "{{ '%d|%i|%u' % (n, -n, true) }} {{ '%5d|%-5d|%05d' % (42, 42, -42) }} {{ '%+d % d' % (5, 5) }}"
                     " {{ '%x %X %o' % (255, 255, 8) }} {{ '%#x %#X %#o' % (255, 255, 8) }} {{ '%.3d|%#.3x|%08.3d' % (5, 5, -5) }}"
                     " {{ '%d' % 3.9 }} {{ '%d' % -3.9 }} {{ '%d' % 1e30 }} {{ '%x' % -255 }} {{ '%-05d|' % 3 }} {{ '%ld' % 3 }}"),
    ("percent-floats", "{{ '%f %e %g %E %G' % (1.5, 12345.678, 0.00001234, 1e20, 1e-20) }} {{ '%.2f' % 2 }}"
                       " {{ '%.0f %.0f %.0f' % (0.5, 1.5, 2.5) }} {{ '%.1f %.1f' % (0.25, 0.35) }} {{ '%g %g %g' % (100000, 1000000, 1e16) }}"
                       " {{ '%#g %#.0f %.3g' % (1.0, 3.0, 1234.5) }} [{{ '%10.4f' % -f }}] {{ '%+.2e' % 12345.0 }} {{ '%-08.2f|' % -1.5 }}"
                       " {{ '%.20f' % 0.1 }} {{ '%e' % 0 }}"),
    ("percent-text", "{{ '%.3s|%5.1s|%-4r|' % ('abcdef', 'xyz', 'a') }} [{{ '%5s' % s }}] {{ '%.2s' % s }} {{ '%c%c%c' % (65, 'b', 233) }}"
                     " {{ '%s %s %s' % (none, true, 1.0) }} {{ '%r' % ([1, 'a'],) }} {{ '%a' % (s,) }} {{ '%05s|' % 'ab' }}"),
    ("percent-star", "[{{ '%*d' % (5, 3) }}] [{{ '%-*d' % (4, 1) }}] [{{ '%*d' % (-4, 1) }}] {{ '%.*f' % (1, f) }}"),
    ("percent-mapping", "{{ '%(a)s-%(b)r' % d }} {{ '%(a)05d' % d }} {{ '%s' % d }} {{ '%s %(a)s' % d }} {{ 'hi' % d }} {{ 'hi' % xs }}"),
    ("percent-undefined", "[{{ '%s' % nope }}] [{{ 'x' % nope }}] {{ '%r' % (nope,) }}"),
    ("percent-data", "{% for m in messages %}{{ '<|im_start|>%s\n%s<|im_end|>\n' % (m.role, m.content) }}{% endfor %}"),
    ("percent-filter", "{{ '%s-%s' | format(1, 'a') }} {{ '%(x)s' | format(x='y') }} {{ 5 | format }}"),
    ("percent-filter-mixed", "{{ '%s' | format(1, x=2) }}"),
    ("percent-markup", "{{ ('<%s>' | safe) % '<b>' }} {{ '%s' % ('<b>' | safe) }} {{ ('%r' | safe) % '<' }}"),
    ("percent-err-missing", "{{ '%s %s' % 'ab' }}"),
    ("percent-err-extra", "{{ '%s' % (1, 2) }}"),
    ("percent-err-extra-scalar", "{{ 'hi' % 5 }}"),
    ("percent-err-type-d", "{{ '%d' % 'x' }}"),
    ("percent-err-type-x", "{{ '%x' % 3.0 }}"),
    ("percent-err-type-f", "{{ '%f' % 'x' }}"),
    ("percent-err-char", "{{ '%q' % 1 }}"),
    ("percent-err-incomplete", "{{ '%' % 1 }}"),
    ("percent-err-key", "{{ '%(zz)s' % d }}"),
    ("percent-err-mapping", "{{ '%(a)s' % 5 }}"),
    ("percent-err-undefined", "{{ '%d' % nope }}"),
    ("percent-err-c", "{{ '%c' % 'ab' }}"),
    ("percent-err-star", "{{ '%*s' % ('a', 'b') }}"),
    ("percent-number-operand", "{{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }}"),
    ("percent-int-str", "{{ 5 % 'x' }}"),
    # Macros: varargs, kwargs and caller, only where the body reads them.
    ("macro-varargs", "{% macro m(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4, y='s') }} {{ m(1) }}"
                      " {{ m(1, (2, 3)) }}"),
    ("macro-varargs-loop", "{% macro m() %}{% for v in varargs %}{{ v }};{% endfor %}{% for k, v in kwargs.items() %}{{ k }}={{ v }};"
                           "{% endfor %}{{ varargs | length }}{{ kwargs | tojson }}{% endmacro %}{{ m(1, 'x', k='v') }}"),
    ("macro-kwargs-bound", "{% macro m(a, b=2) %}{{ a }}{{ b }}{{ kwargs }}{% endmacro %}{{ m(1, a=2) }} {{ m(1, b=3, c=4) }} {{ m(b=5, a=6) }}"),
    ("macro-too-many", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"),
    ("macro-stray-keyword", "{% macro m(a) %}{{ a }}{{ varargs }}{% endmacro %}{{ m(1, b=2) }}"),
    ("macro-kwargs-no-varargs", "{% macro m(a) %}{{ a }}{{ kwargs }}{% endmacro %}{{ m(1, 2) }}"),
    ("macro-positional-and-keyword", "{% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ m(1, a=2) }}"),
    ("macro-varargs-param", "{% macro m(varargs) %}{{ varargs }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}"),
    ("macro-varargs-set-first", "{% macro m() %}{% set varargs = 5 %}{{ varargs }}{% endmacro %}{{ m() }}{{ m(1) }}"),
    ("macro-varargs-nested", "{% macro outer() %}{% macro inner() %}{{ varargs }}{% endmacro %}{{ inner(1) }}{% endmacro %}"
                             "{{ outer(2) }}"),
    ("macro-defaults", "{% macro m(a, b=a + 1, c='<|c|>') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, c=none) }}"
                       "{% macro k(a) %}[{{ a }}]{{ a is defined }}{% endmacro %}{{ k() }}"),
    ("macro-missing-parameter", "{% macro k(a) %}{{ a + 1 }}{% endmacro %}{{ k() }}"),
    ("macro-forward", "{% macro f(a, b) %}{{ a }}-{{ b }}{% endmacro %}{% macro g() %}{{ f(*varargs, **kwargs) }}{% endmacro %}"
                      "{{ g(1, b=2) }} {{ g(*[3, 4]) }} {{ g(**{'a': 5, 'b': 6}) }} {{ f(*'xy') }}"),
    ("macro-duplicate-param", "{% macro m(a, a) %}{% endmacro %}"),
    ("macro-default-order", "{% macro m(a=1, b) %}{% endmacro %}"),
    ("macro-star-none", "{% macro m() %}{{ varargs }}{% endmacro %}{{ m(1, *none) }}"),
    ("macro-star-star-list", "{% macro m() %}{{ kwargs }}{% endmacro %}{{ m(**[1]) }}"),
    ("macro-star-star-dup", "{% macro m() %}{{ kwargs }}{% endmacro %}{{ m(a=1, **{'a': 2}) }}"),
    ("macro-object", "{% macro m(a, b=1) %}{{ varargs }}{% endmacro %}{{ m.name }} {{ m.arguments }} {{ m.catch_varargs }}"
                     " {{ m.catch_kwargs }} {{ m.caller }} {{ m }}"),
    ("macro-data", "{% macro turn(role) %}<|im_start|>{{ role }}\n{{ varargs | join('') }}<|im_end|>{% endmacro %}"
                   "{% for m in messages %}{{ turn(m.role, m.content, '!') }}{% endfor %}"),
    ("caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}<|x|>{{ messages[0].content }}"
               "{% endcall %}"),
    ("caller-args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x, loop.index, k=1) }}{% endfor %}{% endmacro %}"
                    "{% call(item, i) each(['a', 'b']) %}{{ i }}={{ item }}{{ kwargs }};{% endcall %}"),
    ("caller-varargs", "{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(a) m() %}{{ a }}{{ varargs }}{% endcall %}"),
    ("caller-kwargs", "{% macro m() %}{{ caller() }}{{ kwargs }}{% endmacro %}{% call m(z=1) %}in{% endcall %}"),
    ("caller-in-kwargs", "{% macro m() %}{{ kwargs }}{% endmacro %}{% call m() %}x{% endcall %}"),
    ("caller-unused", "{% macro m() %}x{% endmacro %}{% call m() %}x{% endcall %}"),
    ("caller-undefined", "{% macro m() %}[{{ caller is defined }}]{% endmacro %}{{ m() }}"),
    ("caller-missing", "{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}"),
    ("caller-param-no-default", "{% macro m(caller) %}{{ caller }}{% endmacro %}{{ m(5) }}"),
    ("caller-param-default", "{% macro m(caller=none) %}[{{ caller }}]{% endmacro %}{{ m() }}{{ m(5) }}"
                             "{% call m() %}x{% endcall %}"),
    ("caller-too-many", "{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(a) m() %}{{ a }}{% endcall %}"),
    # Recursive loops and the loop object.
    ("recursive", "{% for item in tree recursive %}<{{ item.name }}:{{ loop.depth }}{{ loop.depth0 }}{{ loop.index }}/{{ loop.length }}"
                  "{% if item.children %}[{{ loop(item.children) }}]{% endif %}>{% endfor %}"),
    ("recursive-else", "{% for item in tree recursive %}{{ item.name }}({{ loop(item.children) }}){% else %}E{% endfor %}"),
    ("recursive-filter", "{% for item in tree if item.name != 'b' recursive %}{{ item.name }}{{ loop(item.children) }}{% endfor %}"),
    ("recursive-index", "{% for item in tree recursive %}{{ loop.index }}{{ item.name }}{{ loop(item.children) }}{{ loop.index }}"
                        "{{ loop.first }}{% endfor %}"),
    ("recursive-depth-limit", "{% for x in tree recursive %}{{ x.name }}{% if loop.depth < 2 %}{{ loop(x.children) }}{% endif %}"
                              "{% endfor %}"),
    ("recursive-nested", "{% for x in tree recursive %}{% set outer = loop %}{% for c in x.children %}{{ loop.depth }}"
                         "{{ outer(c.children) }}{% endfor %}{{ x.name }}{% endfor %}"),
    ("recursive-break", "{% for x in tree recursive %}{{ x.name }}{{ loop(x.children) }}{% if x.name == 'b' %}{% break %}{% endif %}"
                        "{% endfor %}"),
    ("recursive-unpack", "{% for a, b in [(1, [(2, [(3, [])])])] recursive %}{{ a }}{{ loop(b) }}{% endfor %}"),
    ("recursive-length", "{% for x in tree recursive %}{{ loop(x.children) | length }}{% endfor %}"),
    ("recursive-marks", "{% for m in [messages] recursive %}{% for x in m %}<|t|>{{ x.content }}{% endfor %}{% endfor %}"),
    ("recursive-none", "{% for x in [1] recursive %}{{ loop(none) }}{% endfor %}"),
    ("recursive-no-args", "{% for x in [1] recursive %}{{ loop() }}{% endfor %}"),
    ("not-recursive", "{% for x in [1] %}{{ loop([2]) }}{% endfor %}"),
    ("recursive-wrong-order", "{% for x in tree recursive if x %}{{ x }}{% endfor %}"),
    ("loop-object", "{% for x in xs %}{{ loop.cycle('a', 'b') }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.changed(x > 1) }}"
                    "{{ loop['index'] }}{{ loop is callable }}{{ loop is mapping }}{{ loop }};{% endfor %}"),
    ("loop-changed", "{% for x in [1, 1, 2, 3, 3] %}{{ loop.changed(x) }},{% endfor %} {% for x in [1, 1, 2] %}"
                     "{{ loop.changed() }}{{ loop.changed(x, 1) }},{% endfor %}"),
    ("loop-previtem-undefined", "{% for x in xs %}[{{ loop.previtem is defined }}{{ loop.nextitem is defined }}]{% endfor %}"),
    ("loop-cycle-empty", "{% for x in xs %}{{ loop.cycle() }}{% endfor %}"),
    # with, and what needs a loader.
    ("with", "{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% set c = 3 %}{% endwith %}{{ a }}[{{ c }}]"
             "{% for x in xs %}{% with y = x * 2 %}{% if y > 4 %}{% break %}{% endif %}{{ y }}{% endwith %}{% endfor %}"),
    ("block", "{% set y = 1 %}{% for x in xs %}{% block b %}[{{ x }}{{ y }}{{ xs }}]{% set z = 2 %}{% endblock %}{% endfor %}[{{ z }}]"
              "{% for x in xs %}{% block c scoped %}[{{ x }}]{% endblock c %}{% endfor %}{% block d %}{% block e %}in{% endblock %}"
              "out{{ y }}{% endblock %}{% set y = 2 %}{% macro m(q) %}{% block f %}[{{ q }}]{% endblock %}{% endmacro %}{{ m(1) }}"),
    ("block-twice", "{% block a %}1{% endblock %}{% block a %}2{% endblock %}"),
    ("block-required", "{% block a required %}\n  {# nothing #}\n{% endblock %}"),
    ("block-required-body", "{% block a required %}x{% endblock %}"),
    ("loader-tags-not-run", "{% if false %}{% include 'x' ignore missing with context %}{% import 'x' as m without context %}"
                            "{% from 'x' import a as b, c with context %}{% extends 'x' %}{% endif %}ok"),
    ("include-syntax", "{% include %}"),
    ("include", "a\n{% include 'other.jinja' %}"),
    ("import", "{% import 'macros.jinja' as m %}"),
    ("from-import", "{% from 'macros.jinja' import m %}"),
    ("extends", "{% extends 'base.jinja' %}"),
]


def feature_cases(env):
    """FEATURE_CASES by both, with the marks checked on each of ours that renders."""
    jobs, want = [], []
    for name, src in FEATURE_CASES:
        try:
            want.append(jinja2_render(env.from_string(src), FEATURE_CONTEXT))
        except Exception as e:  # noqa: BLE001 - jinja2 refuses the template (a Python SyntaxError too)
            want.append({"error": f"compile: {type(e).__name__}: {e}", "raised": False})
        jobs.append({"template": src, "context": FEATURE_CONTEXT, "chat": True})
    p = subprocess.run([RENDER, "--batch"], input=json.dumps({"jobs": jobs}), capture_output=True, text=True, timeout=120)
    if not check(p.returncode == 0, f"jinja_render failed ({p.returncode}): {p.stdout[-2000:]} {p.stderr[-2000:]}"):
        return
    bad = 0
    for (name, src), w, g in zip(FEATURE_CASES, want, json.loads(p.stdout)["results"]):
        if "text" in g:
            errors = mark_errors(g["text"], g["code"], FEATURE_CONTEXT)
            check(not errors, f"feature case {name}: the marks of template text are wrong: " + "; ".join(errors[:3]))
        if not same(w, g):
            bad += 1
            print(f"feature case {name}: {src!r}\n  jinja2: {str(w)[:600]!r}\n  ptxlm:  {str(g)[:600]!r}")
        elif VERBOSE:
            print(f"feature case {name}: {str(w)[:200]!r}")
    check(bad == 0, f"{bad} of {len(FEATURE_CASES)} feature cases render differently")
    fails = sum(1 for w in want if "text" not in w)
    print(f"{len(FEATURE_CASES) - bad}/{len(FEATURE_CASES)} feature cases identical ({fails} where both raise)")


def main():
    env = environment()
    whitespace_fuzz(env)
    feature_cases(env)
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
