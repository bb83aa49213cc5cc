"""`ptxlm perplexity` against llama.cpp's perplexity tool.

Both real models score tests/data/alice_ch1-2.txt with -c 1024 (five chunks;
gemma3's 512 window is crossed). The final figure must equal llama.cpp's
(tests/golden/llamacpp_perplexity.json, recorded by bench/golden-perplexity)
within 0.5%; the running figure after each chunk within 1% (a single chunk
averages only 511 predictions, so llama.cpp's own rounding noise shows more);
the standard errors within 5%. The files' SHA-256 are checked first, so a changed model
or text fails with a re-record instruction instead of a wrong comparison.
"""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402

SRC = Path(os.environ.get("PTXLM_SOURCE_DIR", "."))
MODELS = Path(os.environ.get("PTXLM_MODELS_DIR", SRC / "models"))
PTXLM = os.environ.get("PTXLM_BIN", "build/tools/ptxlm/ptxlm")
TEXT = SRC / "tests/data/alice_ch1-2.txt"
GOLDEN = SRC / "tests/golden/llamacpp_perplexity.json"
REL = 0.005
REL_CHUNK = 0.01


def sha256(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def main():
    g = json.loads(GOLDEN.read_text())
    if not check(sha256(TEXT) == g["text_sha256"], f"{TEXT} changed since the golden file was recorded: re-run bench/golden-perplexity"):
        return 1
    for name, ref in g["models"].items():
        path = MODELS / name
        if not check(sha256(path) == ref["sha256"], f"{name}: the model differs from the recorded one: re-run bench/golden-perplexity"):
            continue
        p = subprocess.run([PTXLM, "perplexity", "-m", str(path), "-f", str(TEXT), "-c", str(g["n_ctx"]), "--json",
                            "--device", "cpu"], capture_output=True, text=True)
        if not check(p.returncode == 0, f"{name}: ptxlm perplexity failed: {p.stderr[-500:]}"):
            continue
        ours = json.loads(p.stdout)
        rel = abs(ours["ppl"] - ref["ppl"]) / ref["ppl"]
        print(f"{name}: PPL {ours['ppl']:.4f} +/- {ours['ppl_stderr']:.4f}, llama.cpp {ref['ppl']:.4f} +/- "
              f"{ref['ppl_stderr']:.4f}: {100 * rel:.3f}% apart (limit {100 * REL}%)")
        check(rel <= REL, f"{name}: PPL {ours['ppl']:.4f} vs llama.cpp {ref['ppl']:.4f} ({100 * rel:.3f}%)")
        check(ours["chunks"] == ref["chunks"], f"{name}: {ours['chunks']} chunks, llama.cpp {ref['chunks']}")
        for i, (a, b) in enumerate(zip(ours["running"], ref["running"])):
            check(abs(a - b) / b <= REL_CHUNK, f"{name}: after chunk {i + 1}: {a:.4f} vs {b:.4f}")
        check(abs(ours["ppl_stderr"] - ref["ppl_stderr"]) / ref["ppl_stderr"] <= 0.05,
              f"{name}: standard error {ours['ppl_stderr']:.4f} vs {ref['ppl_stderr']:.4f}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
