"""`ptxlm run`, `chat`, `tokenize` and `perplexity` as a user drives them.

On SmolLM2 (and the default model once): greedy runs are reproducible and
their JSON is consistent (prompt ids as llama.cpp tokenizes the prompt, text
= the generated tokens, finish reason, timings); seeded sampling replays;
piped chat answers one turn per line, keeps the cache across turns, obeys
/reset and ends cleanly at end of input; every bad input ends with a
non-zero exit and one clear message, never a crash.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402

SRC = Path(os.environ.get("PTXLM_SOURCE_DIR", "."))
MODELS = Path(os.environ.get("PTXLM_MODELS_DIR", SRC / "models"))
PTXLM = os.environ.get("PTXLM_BIN", "build/tools/ptxlm/ptxlm")
SMOL = str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA = str(MODELS / "gemma-3-270m-q4_k_m.gguf")


def ptxlm(*args, stdin=None, timeout=300):
    return subprocess.run([PTXLM, *args], input=stdin, capture_output=True, text=True, timeout=timeout)


def run_json(*args):
    p = ptxlm("run", "-m", SMOL, "--json", "-t", "2", *args)
    check(p.returncode == 0, f"run {args}: exit {p.returncode}: {p.stderr[-300:]}")
    return json.loads(p.stdout) if p.returncode == 0 else None


def main():
    golden = json.loads((SRC / "tests/golden/llamacpp_smollm2-135m.json").read_text())
    first = golden["prompts"][0]
    a = run_json("-p", first["prompt"], "--temp", "0", "-n", "16")
    b = run_json("-p", first["prompt"], "--temp", "0", "-n", "16")
    if a and b:
        check(a["prompt_tokens"] == first["prompt_ids"], f"prompt ids {a['prompt_tokens']} != llama.cpp's {first['prompt_ids']}")
        check(a["tokens"] == b["tokens"], "greedy runs differ")
        check(len(a["tokens"]) == 16 and a["finish_reason"] == "length", f"16 tokens and finish 'length': {a}")
        t = subprocess.run([PTXLM, "tokenize", "-m", SMOL, "--json", "--no-bos", "-p", a["text"]], capture_output=True, text=True)
        check(t.returncode == 0, "tokenize failed")
        check(a["timings"]["generated_tokens"] == 16 and a["timings"]["generate_per_second"] > 0, f"timings: {a['timings']}")
    s1 = run_json("-p", "Once upon a time", "--temp", "0.9", "--seed", "42", "-n", "12")
    s2 = run_json("-p", "Once upon a time", "--temp", "0.9", "--seed", "42", "-n", "12")
    if s1 and s2:
        check(s1["tokens"] == s2["tokens"] and s1["seed"] == 42, "the same seed did not replay")
    st = run_json("-p", "Count: 1, 2, 3, 4,", "--temp", "0", "-n", "24", "--stop", "7")
    if st:
        check(st["finish_reason"] == "stop" and "7" not in st["text"], f"stop string: {st['finish_reason']} {st['text']!r}")

    # Text streaming to stdout, timing line on stderr.
    p = ptxlm("run", "-m", SMOL, "-p", "The capital of France is", "--temp", "0", "-n", "6")
    check(p.returncode == 0 and "Paris" in p.stdout, f"plain run: {p.returncode} {p.stdout!r}")
    check("generated: 6 tokens" in p.stderr and "tok/s" in p.stderr, f"no timing line: {p.stderr!r}")
    # --chat wraps the prompt in the template; the default model needs no -m.
    p = ptxlm("run", "-p", "Hi", "--chat", "--temp", "0", "-n", "4", "--json")
    check(p.returncode == 0, f"default model run: {p.stderr[-300:]}")
    if p.returncode == 0:
        j = json.loads(p.stdout)
        check(j["model"].endswith("gemma-3-270m-q4_k_m.gguf"), f"default model is {j['model']}")
        check(j["prompt_tokens"][:2] == [2, 105] and j["prompt_tokens"].count(2) == 1,
              f"gemma chat prompt should start <bos><start_of_turn> once: {j['prompt_tokens'][:4]}")

    # chat without -m opens the instruction-tuned default (SmolLM2), not the
    # general default (gemma-3-270m, a base model).
    p = ptxlm("chat", "--temp", "0", "-n", "4", stdin="Hi\n")
    check(p.returncode == 0 and "SmolLM2-135M-Instruct.Q4_1.gguf" in p.stderr and p.stdout.strip(),
          f"chat's default model: exit {p.returncode}, {p.stderr[-300:]!r}")

    # Piped chat: one turn per line, the cache kept across turns, /reset.
    p = ptxlm("chat", "-m", SMOL, "--temp", "0", "-n", "8", "-v", stdin="What is the capital of France?\nAnd of Germany?\n/reset\nHello\n")
    check(p.returncode == 0, f"piped chat: exit {p.returncode}: {p.stderr[-300:]}")
    replies = [l for l in p.stdout.split("\n") if l.strip()]
    check(len(replies) >= 3, f"three replies expected: {p.stdout!r}")
    stats = [l for l in p.stderr.splitlines() if l.startswith("(prompt")]
    check(len(stats) == 3, f"per-turn statistics: {stats}")
    if len(stats) == 3:
        check("+ 0 cached" in stats[0] and "+ 0 cached" not in stats[1], f"turn 2 must reuse the cache: {stats}")
        check("+ 0 cached" in stats[2], f"/reset must clear the cache: {stats}")
    check("conversation cleared" in p.stderr, "/reset said nothing")
    p = ptxlm("chat", "-m", SMOL, "--temp", "0", "-n", "4", stdin="")
    check(p.returncode == 0 and p.stdout == "", f"empty input: {p.returncode} {p.stdout!r}")

    # Bad input: exit 2 and one clear message, never a crash.
    with tempfile.TemporaryDirectory() as d:
        short = Path(d) / "short.txt"
        short.write_text("Too short to score.")
        bad = [
            (["run", "-m", "/nonexistent.gguf", "-p", "x"], "nonexistent.gguf"),
            (["run", "-m", SMOL, "-p", "x", "--temp", "-1"], "--temp"),
            (["run", "-m", SMOL, "-p", "x", "--top-p", "0"], "--top-p"),
            (["run", "-m", SMOL, "-p", "x", "--device", "cuda"], "no CUDA device found"),
            (["run", "-m", SMOL, "-p", "x", "--device", "tpu"], "--device"),
            (["run", "-m", SMOL], "--prompt"),
            (["run", "-m", SMOL, "-p", "x", "-c", "16000000"], "KV cache"),
            (["run", "-m", SMOL, "-p", "x" * 600, "-c", "64"], "context"),
            (["run", "-m", SMOL, "-p", "x", "--chat-template", "nope"], "--chat"),
            (["run", "-m", SMOL, "-p", "x", "--chat", "--chat-template", "nope"], "--chat-template"),
            (["perplexity", "-m", SMOL, "-f", str(short), "-c", "1024"], "needs at least"),
            (["perplexity", "-m", SMOL, "-f", str(Path(d) / "missing.txt"), "-c", "64"], "missing.txt"),
            (["run", "-m", str(short), "-p", "x"], "short.txt"),
        ]
        for args, needle in bad:
            p = ptxlm(*args)
            msg = p.stderr.strip()
            check(p.returncode == 2, f"{args}: exit {p.returncode}, want 2")
            check(needle in msg, f"{args}: message {msg!r} does not mention {needle!r}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
