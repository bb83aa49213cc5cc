"""ptxlm's chat templates against the real Jinja templates rendered by jinja2.

For each family's real templates (tests/data/templates/, and SmolLM2's from
its model file), a set of conversations — with and without a system prompt
(empty, or with surrounding spaces), single and multi-turn, ending on the
user or on the assistant, contents with surrounding spaces, newlines and
non-ASCII text — is rendered by jinja2 the way transformers renders chat
templates (sandboxed, trim_blocks, lstrip_blocks, raise_exception,
strftime_now, a tojson that keeps non-ASCII) and by ptxlm
(tests/tools/render_template), with and without the generation prompt. The
two must be byte-identical, the family detected from each template text must
be the expected one, and starts_with_bos() must say whether the text begins
with the BOS text. Conversations a template itself refuses (Gemma 2 has no
system role) are skipped; every template must still be compared on most.

Templates that look like a family but render differently (refused-*.jinja:
Mistral v7, Qwen3 thinking, LFM2, Firefunction, Apriel) must be refused with
a message naming --chat-template, as must an unknown template and name.

When llama.cpp's models/templates folder is present (PTXLM_LLAMA_TEMPLATES,
else the copy under build-peer/), every template there that ptxlm accepts
must render byte-identically too: accepted implies exact.
"""
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402

SRC = Path(os.environ.get("PTXLM_SOURCE_DIR", "."))
MODELS = Path(os.environ.get("PTXLM_MODELS_DIR") or SRC / "models")
RENDER = sys.argv[1] if len(sys.argv) > 1 else "build/tests/render_template"
TEMPLATES = SRC / "tests/data/templates"
LLAMA_TEMPLATES = Path(os.environ.get("PTXLM_LLAMA_TEMPLATES") or
                       SRC / "build-peer/src/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates")

# (template, expected family, bos, eos) as the models' tokenizers define them
CASES = [
    ("chatml.jinja", "chatml", "", "<|im_end|>"),
    ("qwen2.5.jinja", "chatml", "", "<|im_end|>"),
    ("gemma3.jinja", "gemma", "<bos>", "<eos>"),
    ("gemma2.jinja", "gemma", "<bos>", "<eos>"),
    ("llama3.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama3.1.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama3.2.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama2.jinja", "llama2", "<s>", "</s>"),
    ("mistral.jinja", "mistral", "<s>", "</s>"),
    ("mistral-nemo.jinja", "mistral", "<s>", "</s>"),
    ("phi3.jinja", "phi3", "<s>", "<|endoftext|>"),
]

S = {"role": "system", "content": "You are a terse assistant.\nAnswer in one line."}
S_SPACED = {"role": "system", "content": "  Be brief.\n "}
S_EMPTY = {"role": "system", "content": ""}
U1 = {"role": "user", "content": "Hello! How are you?"}
A1 = {"role": "assistant", "content": "  I am fine, thank you.  "}
U2 = {"role": "user", "content": "\nWhat is 2 + 2?\n\nAnd café, 日本語, 🎉?  "}
A2 = {"role": "assistant", "content": "4.\nÇa va? ✓"}
U3 = {"role": "user", "content": "x"}
CONVERSATIONS = [[U1], [S, U1], [U1, A1, U2], [S, U1, A1, U2], [U3], [U1, A1], [S, U1, A1],
                 [S_SPACED, U2], [S_EMPTY, U1], [U1, A1, U2, A2, U3]]


MARK = "\x01BOS\x01"


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def tojson(x, indent=None, ensure_ascii=False, sort_keys=False):
    return json.dumps(x, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def jinja_render(src, messages, gen, bos, eos):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    env.filters["tojson"] = tojson
    return env.from_string(src).render(messages=messages, add_generation_prompt=gen, bos_token=bos, eos_token=eos)


def ours(payload):
    p = subprocess.run([RENDER], input=json.dumps(payload), capture_output=True, text=True)
    try:
        return p.returncode, json.loads(p.stdout)
    except json.JSONDecodeError:
        return p.returncode, {"error": f"unreadable output {p.stdout!r} {p.stderr!r}"}


def compare(name, src, family, bos, eos):
    """Renders every conversation both ways; returns (compared, skipped)."""
    n = skipped = 0
    for conv in CONVERSATIONS:
        for gen in (True, False):
            try:
                want = jinja_render(src, conv, gen, bos, eos)
            except jinja2.exceptions.TemplateError:
                skipped += 1    # the template itself refuses this conversation
                continue
            rc, got = ours({"template": src, "messages": conv, "add_generation_prompt": gen, "bos": bos, "eos": eos})
            if not check(rc == 0, f"{name}: ptxlm refused {conv}: {got}"):
                continue
            n += 1
            check(got["family"] == family, f"{name}: detected as {got['family']}, expected {family}")
            check(got["text"] == want, f"{name} ({[m['role'] for m in conv]}, generation prompt {gen}):\n"
                                       f"  jinja2: {want!r}\n  ptxlm:  {got['text']!r}")
            # Whether the template writes BOS first, with a BOS text no
            # template writes by itself (SmolLM2's BOS is <|im_start|>).
            marked = jinja_render(src, conv, gen, MARK, eos).startswith(MARK)
            check(got["starts_with_bos"] == marked, f"{name}: starts_with_bos() is {got['starts_with_bos']}, "
                                                    f"jinja2 {'writes' if marked else 'does not write'} BOS first")
    return n, skipped


def refused(src):
    rc, got = ours({"template": src, "messages": [U1]})
    err = got.get("error", "")
    return rc == 2 and "unrecognised chat template" in err and "--chat-template NAME" in err, got


def main():
    r = gguf.GGUFReader(str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    templates = [(name, (TEMPLATES / name).read_text(encoding="utf-8"), fam, bos, eos) for name, fam, bos, eos in CASES]
    templates.append(("SmolLM2 (model file)", r.fields["tokenizer.chat_template"].contents(), "chatml", "<|im_start|>",
                      "<|im_end|>"))
    total = 0
    for name, src, family, bos, eos in templates:
        n, skipped = compare(name, src, family, bos, eos)
        check(n >= len(CONVERSATIONS), f"{name}: only {n} renderings compared ({skipped} refused by jinja2)")
        total += n
    print(f"{total} renderings compared over {len(templates)} templates")

    # SmolLM2's built-in system prompt is carried over from the template text.
    rc, got = ours({"template": templates[-1][1], "messages": [U3], "add_generation_prompt": False})
    check(rc == 0 and "You are a helpful AI assistant named SmolLM, trained by Hugging Face" in got.get("text", ""),
          f"SmolLM2's default system prompt is missing: {got}")

    negatives = sorted(TEMPLATES.glob("refused-*.jinja"))
    check(len(negatives) >= 5, f"expected the refused-*.jinja controls, found {len(negatives)}")
    for f in negatives:
        ok, got = refused(f.read_text(encoding="utf-8"))
        check(ok, f"{f.name} was not refused clearly: {got}")
    ok, got = refused("{% for m in messages %}{{ m.content }}{% endfor %}")
    check(ok, f"an unknown template was not refused clearly: {got}")
    rc, got = ours({"name": "vicuna", "messages": [U1]})
    check(rc == 2 and "--chat-template" in got.get("error", ""), f"an unknown template name was not refused clearly: {got}")
    rc, got = ours({"name": "gemma", "messages": [U1, U2]})
    check(rc == 2 and "alternate" in got.get("error", ""), f"gemma accepted two user turns in a row: {got}")

    # Accepted implies exact, over llama.cpp's collection of real templates.
    if LLAMA_TEMPLATES.is_dir():
        accepted = swept = 0
        for f in sorted(LLAMA_TEMPLATES.glob("*.jinja")):
            src = f.read_text(encoding="utf-8")
            rc, got = ours({"template": src, "messages": [U1]})
            if rc != 0:
                continue
            n, _ = compare(f"llama.cpp {f.name}", src, got["family"], "<BOS>", "<EOS>")
            accepted += 1
            swept += n
        print(f"llama.cpp templates: {accepted} accepted, {swept} renderings compared ({LLAMA_TEMPLATES})")
        check(accepted >= 8, f"only {accepted} of llama.cpp's templates were accepted")
    else:
        print(f"llama.cpp templates not found at {LLAMA_TEMPLATES}: sweep not run")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
