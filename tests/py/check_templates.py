"""ptxlm's chat templates against the real Jinja templates rendered by jinja2.

For each family's real template (tests/data/templates/, and SmolLM2's from
its model file), a set of conversations — with and without a system prompt,
single and multi-turn, contents with surrounding spaces, newlines and
non-ASCII text — is rendered by jinja2 the way transformers renders chat
templates (sandboxed, trim_blocks, lstrip_blocks, raise_exception) and by
ptxlm (tests/tools/render_template), with and without the generation prompt.
The two must be byte-identical, and the family detected from each template
text must be the expected one. A template ptxlm does not know is refused with
a message naming --chat-template.
"""
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
MODELS = Path(os.environ.get("PTXLM_MODELS_DIR", SRC / "models"))
RENDER = sys.argv[1] if len(sys.argv) > 1 else "build/tests/render_template"
TEMPLATES = SRC / "tests/data/templates"

# (template, expected family, bos, eos)
CASES = [
    ("chatml.jinja", "chatml", "", "<|im_end|>"),
    ("qwen2.5.jinja", "chatml", "", "<|im_end|>"),
    ("gemma3.jinja", "gemma", "<bos>", "<eos>"),
    ("llama3.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama2.jinja", "llama2", "<s>", "</s>"),
    ("mistral.jinja", "mistral", "<s>", "</s>"),
    ("phi3.jinja", "phi3", "<s>", "<|endoftext|>"),
]

S = {"role": "system", "content": "You are a terse assistant.\nAnswer in one line."}
U1 = {"role": "user", "content": "Hello! How are you?"}
A1 = {"role": "assistant", "content": "  I am fine, thank you.  "}
U2 = {"role": "user", "content": "\nWhat is 2 + 2?\n\nAnd café, 日本語, 🎉?  "}
CONVERSATIONS = [[U1], [S, U1], [U1, A1, U2], [S, U1, A1, U2], [{"role": "user", "content": "x"}]]


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def jinja_render(src, messages, gen, bos, eos):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(src).render(messages=messages, add_generation_prompt=gen, bos_token=bos, eos_token=eos)


def ours(payload):
    p = subprocess.run([RENDER], input=json.dumps(payload), capture_output=True, text=True)
    return p.returncode, json.loads(p.stdout)


def main():
    r = gguf.GGUFReader(str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    templates = [(name, (TEMPLATES / name).read_text(), fam, bos, eos) for name, fam, bos, eos in CASES]
    templates.append(("SmolLM2 (model file)", r.fields["tokenizer.chat_template"].contents(), "chatml", "<|im_start|>",
                      "<|im_end|>"))
    n = 0
    for name, src, family, bos, eos in templates:
        for conv in CONVERSATIONS:
            for gen in (True, False):
                want = jinja_render(src, conv, gen, bos, eos)
                rc, got = ours({"template": src, "messages": conv, "add_generation_prompt": gen, "bos": bos, "eos": eos})
                if not check(rc == 0, f"{name}: ptxlm refused {conv}: {got}"):
                    continue
                check(got["family"] == family, f"{name}: detected as {got['family']}, expected {family}")
                check(got["text"] == want, f"{name} ({len(conv)} messages, generation prompt {gen}):\n"
                                           f"  jinja2: {want!r}\n  ptxlm:  {got['text']!r}")
                n += 1
    print(f"{n} renderings compared over {len(templates)} templates")
    rc, got = ours({"template": "{% for m in messages %}{{ m.content }}{% endfor %}", "messages": [U1]})
    check(rc == 2 and "--chat-template" in got.get("error", ""), f"an unknown template was not refused clearly: {got}")
    rc, got = ours({"name": "vicuna", "messages": [U1]})
    check(rc == 2 and "--chat-template" in got.get("error", ""), f"an unknown template name was not refused clearly: {got}")
    rc, got = ours({"name": "gemma", "messages": [U1, U2]})
    check(rc == 2 and "alternate" in got.get("error", ""), f"gemma accepted two user turns in a row: {got}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
