"""The CPU backend's forward pass against a float64 numpy forward pass.

For each architecture's tiny synthetic model (llama, qwen2, gemma3 — the
gemma3 model's sliding window of 16 is crossed), `ptxlm logits --full`
evaluates a fixed 48-token sequence one token at a time through the KV cache;
tests/py/check_synth.py's numpy forward pass computes the same logits from
gguf-py's dequantized weights, all positions at once. On the reference path
(`--cpu-path reference`, what the GPU path is checked against) with an f32 KV
cache the two must agree to TOL_F32 (absolute, logits have a spread of about 6); with
the f16 cache to TOL_F16. A negative control proves the tolerance bites: the
numpy pass with a RoPE base off by 1% on one layer must miss it.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_synth as cs  # noqa: E402
from checks import check, finish  # noqa: E402

PTXLM = os.environ.get("PTXLM_BIN", "build/tools/ptxlm/ptxlm")
TOL_F32 = 2e-3
TOL_F16 = 5e-2


def ptxlm_logits(path, tokens, kv):
    p = subprocess.run([PTXLM, "logits", "-m", str(path), "--tokens", ",".join(map(str, tokens)), "--full",
                        "--kv-type", kv, "-t", "2", "--device", "cpu", "--cpu-path", "reference", "-c", "256"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"ptxlm logits failed: {p.stderr}")
    j = json.loads(p.stdout)
    return np.array([row["logits"] for row in j["positions"]], dtype=np.float64)


def forward_with_rope_defect(W, hp, tokens):
    """The numpy pass with layer 1's RoPE base 1% off (the negative control)."""
    orig = cs.rope
    calls = {"n": 0}

    def bad_rope(x, pos, base, neox):
        # rope() is called twice per layer (q, k); calls 2 and 3 are layer 1.
        layer = calls["n"] // 2
        calls["n"] += 1
        return orig(x, pos, base * 1.01 if layer == 1 else base, neox)

    cs.rope = bad_rope
    try:
        return cs.forward(W, hp, tokens)
    finally:
        cs.rope = orig


def main():
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as d:
        for arch in cs.ARCHS:
            path = Path(d) / f"{arch}.gguf"
            p = subprocess.run([str(cs.BIN), "--arch", arch, "--size", "tiny", "--out", str(path)],
                               capture_output=True, text=True)
            if not check(p.returncode == 0, f"{arch}: ptxlm-synth failed: {p.stderr}"):
                continue
            r = gguf.GGUFReader(str(path))
            hp, W = cs.hparams(r), cs.weights(r)
            tokens = [764] + [int(t) for t in rng.integers(0, 764, size=47)]
            ref = cs.forward(W, hp, tokens)
            for kv, tol in (("f32", TOL_F32), ("f16", TOL_F16)):
                ours = ptxlm_logits(path, tokens, kv)
                err = np.abs(ours - ref).max()
                top_same = np.mean(ours.argmax(1) == ref.argmax(1))
                print(f"{arch} KV {kv}: max |logit diff| {err:.2e} (tolerance {tol:.0e}), argmax agrees at {top_same:.0%}")
                check(err <= tol, f"{arch} KV {kv}: max |logit diff| {err:.3e} > {tol:.0e}")
                check(top_same == 1.0, f"{arch} KV {kv}: argmax differs at {int((1 - top_same) * len(tokens))} positions")
            bad = forward_with_rope_defect(W, hp, tokens)
            miss = np.abs(ptxlm_logits(path, tokens, "f32") - bad).max()
            print(f"{arch} negative control (layer 1 RoPE base +1%): max |logit diff| {miss:.2e}")
            check(miss > 10 * TOL_F32, f"{arch}: the RoPE defect stays within tolerance ({miss:.2e}): the test cannot see it")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
