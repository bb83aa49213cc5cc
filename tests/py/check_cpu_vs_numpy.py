"""The CPU backend's forward pass against a float64 numpy forward pass.

For each architecture's tiny synthetic model (llama, qwen2, gemma3, qwen3,
llama3, mistral3, phi3, phi4mini and gemma4 — the gemma models' sliding window of 16 is
crossed, mistral3's temperature steps at 16 and 32, and phi3 and phi4mini
(partial rotary: 48 of 64 dims) run at a context of 256 (LongRoPE's short
factors) and of 1024 (the long ones, past its original 512)), `ptxlm logits --full`
evaluates a fixed 48-token sequence one token at a time through the KV cache;
tests/py/check_synth.py's numpy forward pass computes the same logits from
gguf-py's dequantized weights, all positions at once. On the reference path
(`--cpu-path reference`, what the GPU path is checked against) with an f32 KV
cache the two must agree to TOL_F32 (absolute, logits have a spread of about 6); with
the f16 cache to TOL_F16. Negative controls prove each tolerance bites: the
numpy pass with layer 1's RoPE base off by 1% must miss the f32 run by at
least twice TOL_F32, and off by 10% must miss the f16 run by at least twice
TOL_F16.

The reference path is the same plain C++ on every ISA (--cpu-isa picks the
quantized path's kernels only), so one measurement holds for all.
Tolerances are 1.25 x the largest maximum measured (issue 19, 2026-11-25,
AMD EPYC): f32 1.71e-05 (gemma3; llama 7.49e-06, qwen2 7.54e-06), f16
1.61e-02 (gemma3; llama 4.11e-03, qwen2 4.16e-03). Negative controls: 1% off
vs f32 2.47e-02 (qwen2) .. 3.98e-02 (gemma3); 10% off vs f16 2.41e-01 (qwen2) .. 3.76e-01
(gemma3). qwen3 and llama3 (issue 25, 2026-11-27, same machine type): f32
7.65e-06 / 6.64e-06, f16 4.84e-03 / 4.12e-03; controls 1.96e-02 / 4.40e-03
(f32) and 1.94e-01 / 4.28e-02 (f16: llama3's is just over twice TOL_F16, as
its positions are divided by 4 and its slow pairs by up to 8 more, so a
base change turns the angles less). mistral3 (issue 25): f32 8.62e-06, f16
6.57e-03; controls 9.94e-03 and 9.89e-02. phi3 (issue 25, an AVX-512
machine): f32 7.49e-06 at 256 and 7.56e-06 at 1024, f16 4.30e-03; controls
3.92e-02 and 3.63e-01, and the short factors' run 8.17 off the long ones'.
phi4mini (issue 25, 2026-11-28, an AVX-512 VNNI machine): f32 7.29e-06 at
256 and 6.84e-06 at 1024, f16 4.71e-03; controls 8.41e-02 and 8.26e-01, the
short factors' run 8.86 off the long ones'. gemma4 (issue 25, 2026-11-28,
the AVX-512 VNNI machine; two GELUs, seven RMSNorms a layer and a soft-cap):
f32 2.39e-05, over TOL_F32, so its own bound 3.0e-05; f16 1.70e-02, within
TOL_F16 but under its 1.25 margin, so 2.2e-02 (TOL_OF); controls 6.30e-02
and 5.79e-01.
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
TOL_F32 = 2.2e-5
TOL_OF = {"gemma4": (3.0e-5, 2.2e-2)}   # (f32, f16): 1.25 x its measured 2.39e-05 and 1.70e-02
TOL_F16 = 2.0e-2


def ptxlm_logits(path, tokens, kv, ctx=256):
    p = subprocess.run([PTXLM, "logits", "-m", str(path), "--tokens", ",".join(map(str, tokens)), "--full",
                        "--kv-type", kv, "-t", "2", "--device", "cpu", "--cpu-path", "reference", "-c", str(ctx)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"ptxlm logits failed: {p.stderr}")
    j = json.loads(p.stdout)
    return np.array([row["logits"] for row in j["positions"]], dtype=np.float64)


def forward_with_rope_defect(W, hp, tokens, factor):
    """The numpy pass with layer 1's RoPE base times `factor` (the negative controls)."""
    orig = cs.rope
    calls = {"n": 0}

    def bad_rope(x, pos, base, neox, factors=None, yarn=None, mscale=1.0, n_rot=None):
        # rope() is called twice per layer (q, k); calls 2 and 3 are layer 1.
        layer = calls["n"] // 2
        calls["n"] += 1
        return orig(x, pos, base * factor if layer == 1 else base, neox, factors, yarn, mscale, n_rot)

    cs.rope = bad_rope
    try:
        return cs.forward(W, hp, tokens)
    finally:
        cs.rope = orig


def check_longrope(arch, path, W, hp, tokens, short_run):
    """phi3 (and phi4mini) at a context of 1024, past its original 512: the
    long factors, on both sides; and the short run must not pass for the long one."""
    long_hp = dict(hp, n_ctx_seq=1024)
    ref = cs.forward(W, long_hp, tokens)
    ours = ptxlm_logits(path, tokens, "f32", ctx=1024)
    err = np.abs(ours - ref).max()
    miss = np.abs(short_run - ref).max()
    print(f"{arch} KV f32, context 1024 (LongRoPE's long factors): max |logit diff| {err:.2e} (tolerance {TOL_F32:.0e}); "
          f"the short factors' run is {miss:.2e} off it (must be at least {2 * TOL_F32:.1e})")
    check(err <= TOL_F32, f"{arch} context 1024: max |logit diff| {err:.3e} > {TOL_F32:.0e}")
    check(miss >= 2 * TOL_F32, f"{arch}: the long and short factors differ by only {miss:.2e}")


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
            runs = {}
            tol_f32, tol_f16 = TOL_OF.get(arch, (TOL_F32, TOL_F16))
            for kv, tol in (("f32", tol_f32), ("f16", tol_f16)):
                ours = runs[kv] = ptxlm_logits(path, tokens, kv)
                err = np.abs(ours - ref).max()
                top_same = np.mean(ours.argmax(1) == ref.argmax(1))
                print(f"{arch} KV {kv}: max |logit diff| {err:.2e} (tolerance {tol:.0e}), argmax agrees at {top_same:.0%}")
                check(err <= tol, f"{arch} KV {kv}: max |logit diff| {err:.3e} > {tol:.0e}")
                check(top_same == 1.0, f"{arch} KV {kv}: argmax differs at {int((1 - top_same) * len(tokens))} positions")
            for kv, tol, factor in (("f32", tol_f32, 1.01), ("f16", tol_f16, 1.1)):
                miss = np.abs(runs[kv] - forward_with_rope_defect(W, hp, tokens, factor)).max()
                print(f"{arch} negative control, KV {kv} against layer 1's RoPE base {100 * (factor - 1):.0f}% off: "
                      f"max |logit diff| {miss:.2e} (must be at least {2 * tol:.1e})")
                check(miss >= 2 * tol, f"{arch} KV {kv}: the RoPE defect is only {miss:.2e} off: the tolerance cannot see it")
            if arch in ("phi3", "phi4mini"):
                check_longrope(arch, path, W, hp, tokens, runs["f32"])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
