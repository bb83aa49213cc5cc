"""`ptxlm perplexity` against llama.cpp's perplexity tool.

Both real models score tests/data/alice_ch1-2.txt with -c 1024 (five chunks;
gemma3's 512 window is crossed) on the quantized path with the best kernels
the engine selects here (PTXLM_CPU_ISA caps them). The final figure must
equal llama.cpp's (tests/golden/llamacpp_perplexity.json, recorded by
bench/golden-perplexity) within REL; the running figure after each chunk
within REL_CHUNK (a single chunk averages only 511 predictions, so rounding
noise shows more); the standard errors within REL_STDERR (BOUNDS, per ISA). Every lower ISA
(the ISAs are ordered, each a superset of the one before) scores the first
chunk with --cpu-isa and is held to REL_CHUNK. The files' SHA-256 are
checked first, so a changed model or text fails with a re-record instruction
instead of a wrong comparison.

Negative control: SmolLM2 with its RoPE base a tenth of the file's (a copy
of the file with that one value patched) must move each figure by at least
twice its widest bound.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402

SRC = Path(os.environ.get("PTXLM_SOURCE_DIR", "."))
MODELS = Path(os.environ.get("PTXLM_MODELS_DIR", SRC / "models"))
PTXLM = os.environ.get("PTXLM_BIN", "build/tools/ptxlm/ptxlm")
TEXT = SRC / "tests/data/alice_ch1-2.txt"
GOLDEN = SRC / "tests/golden/llamacpp_perplexity.json"
ISAS = ["scalar", "avx2", "avx512", "avx512vnni"]
# (REL, REL_CHUNK, REL_STDERR) per ISA: 1.25 x the largest maximum measured
# (issue 19, 2026-11-25, AMD EPYC, both models): final PPL avx2 0.177%
# (SmolLM2; gemma 0.097%); running figure avx2 0.640% (gemma; SmolLM2
# 0.177%), scalar (first chunk) 0.130%; standard error avx2 0.17%. avx512 and
# avx512vnni were not measured (no such machine in that session): they keep
# the bounds they passed before (0.5%, 1%, 5%) until a run there measures
# them (this script prints every figure). With the packed AVX2 kernels
# (2026-11-27, Zen 3 EPYC, fresh clone at 0387af5): final PPL avx2 0.434%
# (SmolLM2, 19.1686 against llama.cpp's 19.0858; the same build with
# PTXLM_CPU_PACK=0 gives 19.1195, 0.18%: the per-row float order moves this
# model's figure by ~2 of its standard errors over 5 chunks; gemma 0.192%);
# running figure 0.642% (SmolLM2); standard error 0.58% (SmolLM2; gemma
# 0.34%). On an AVX-512 VNNI Xeon (2026-11-28, Intel family 6 model 207,
# the AVX-512 Isas on the packed AVX2 kernels): final PPL avx512vnni 0.236%
# (gemma; SmolLM2 0.077%); running figure 1.158% (gemma's first chunk, on
# avx512 and avx512vnni alike; SmolLM2 0.291%; avx2 0.176% on that machine:
# the paths differ only in float order, which moves a first chunk of 511
# predictions by up to ~1%: PTXLM_CPU_PACK=0 gives avx512 0.57%, avx2
# 0.64%); standard error 0.24%.
# Bounds: 1.25 x the largest of all those, one set for every Isa.
MEASURED = (0.0055, 0.0145, 0.0073)
BOUNDS = {isa: MEASURED for isa in ISAS}
# The negative control's defect: the RoPE base a tenth of the file's (SmolLM2's
# 100000 read as llama's default 10000). Measured: PPL 19.9% off, every chunk
# at least 19.8%, the standard error 25%; a base 10% off moved the first
# chunk by only 0.26%.
ROPE_OFF = 0.1


def sha256(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def perplexity(path, n_ctx, *extra):
    p = subprocess.run([PTXLM, "perplexity", "-m", str(path), "-f", str(TEXT), "-c", str(n_ctx), "--json",
                        "--device", "cpu", *extra], capture_output=True, text=True)
    if not check(p.returncode == 0, f"{path.name} {' '.join(extra)}: ptxlm perplexity failed: {p.stderr[-500:]}"):
        return None
    return json.loads(p.stdout)


def rel(a, b):
    return abs(a - b) / b


def isa_of(run):
    # "quantized (avx2)" -> "avx2"
    return run["cpu_path"].split("(")[1].rstrip(")")


def with_rope_base_off(src, dst, factor):
    """Copies the GGUF `src` to `dst` with its <arch>.rope.freq_base multiplied by `factor`."""
    data = bytearray(src.read_bytes())
    key = b".rope.freq_base"
    at = data.find(key + b"\x06\x00\x00\x00")   # key, then GGUF value type 6 (float32)
    if at < 0:
        return False
    value = at + len(key) + 4
    (base,) = struct.unpack_from("<f", data, value)
    struct.pack_into("<f", data, value, base * factor)
    dst.write_bytes(bytes(data))
    return True


def main():
    g = json.loads(GOLDEN.read_text())
    if not check(sha256(TEXT) == g["text_sha256"], f"{TEXT} changed since the golden file was recorded: re-run bench/golden-perplexity"):
        return 1
    for name, ref in g["models"].items():
        path = MODELS / name
        if not check(sha256(path) == ref["sha256"], f"{name}: the model differs from the recorded one: re-run bench/golden-perplexity"):
            continue
        ours = perplexity(path, g["n_ctx"])
        if ours is None:
            continue
        best = isa_of(ours)
        REL, REL_CHUNK, REL_STDERR = BOUNDS[best]
        print(f"{name} {best}: PPL {ours['ppl']:.4f} +/- {ours['ppl_stderr']:.4f}, llama.cpp {ref['ppl']:.4f} +/- "
              f"{ref['ppl_stderr']:.4f}: {100 * rel(ours['ppl'], ref['ppl']):.3f}% apart (limit {100 * REL:.2f}%); chunks "
              f"{max(rel(a, b) for a, b in zip(ours['running'], ref['running'])) * 100:.3f}% (limit {100 * REL_CHUNK:.2f}%); "
              f"standard error {100 * rel(ours['ppl_stderr'], ref['ppl_stderr']):.2f}% (limit {100 * REL_STDERR:.2f}%)")
        check(rel(ours["ppl"], ref["ppl"]) <= REL, f"{name}: PPL {ours['ppl']:.4f} vs llama.cpp {ref['ppl']:.4f}")
        check(ours["chunks"] == ref["chunks"], f"{name}: {ours['chunks']} chunks, llama.cpp {ref['chunks']}")
        for i, (a, b) in enumerate(zip(ours["running"], ref["running"])):
            check(rel(a, b) <= REL_CHUNK, f"{name}: after chunk {i + 1}: {a:.4f} vs {b:.4f}")
        check(rel(ours["ppl_stderr"], ref["ppl_stderr"]) <= REL_STDERR,
              f"{name}: standard error {ours['ppl_stderr']:.4f} vs {ref['ppl_stderr']:.4f}")
        for isa in ISAS[:ISAS.index(best)]:
            low = perplexity(path, g["n_ctx"], "--chunks", "1", "--cpu-isa", isa)
            if low is None:
                continue
            d, REL_CHUNK = rel(low["running"][0], ref["running"][0]), BOUNDS[isa][1]
            print(f"{name} {isa}: after chunk 1 PPL {low['running'][0]:.4f} vs {ref['running'][0]:.4f}: {100 * d:.3f}% "
                  f"apart (limit {100 * REL_CHUNK:.2f}%)")
            check(isa_of(low) == isa, f"{name}: --cpu-isa {isa} ran {low['cpu_path']}")
            check(d <= REL_CHUNK, f"{name} {isa}: after chunk 1: {low['running'][0]:.4f} vs {ref['running'][0]:.4f}")

    # The negative control: every tolerance above, on every ISA, must see the
    # defect twice over.
    REL, REL_CHUNK, REL_STDERR = (max(b[i] for b in BOUNDS.values()) for i in range(3))
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    ref = g["models"][name]
    with tempfile.TemporaryDirectory() as tmp:
        broken = Path(tmp) / "rope-off.gguf"
        if check(with_rope_base_off(MODELS / name, broken, ROPE_OFF), f"{name}: no float32 rope.freq_base to patch"):
            bad = perplexity(broken, g["n_ctx"])
            if bad is not None:
                d_ppl = rel(bad["ppl"], ref["ppl"])
                d_chunk = min(rel(a, b) for a, b in zip(bad["running"], ref["running"]))
                d_err = rel(bad["ppl_stderr"], ref["ppl_stderr"])
                print(f"negative control, {name} with its RoPE base x{ROPE_OFF}: PPL {100 * d_ppl:.3f}% apart (must be "
                      f"at least {200 * REL:.2f}%), every chunk at least {100 * d_chunk:.3f}% ({200 * REL_CHUNK:.2f}%), "
                      f"standard error {100 * d_err:.3f}% ({200 * REL_STDERR:.2f}%)")
                check(d_ppl >= 2 * REL, f"the wrong RoPE base moves PPL by only {100 * d_ppl:.3f}%: REL cannot see it")
                check(d_chunk >= 2 * REL_CHUNK, f"the wrong RoPE base moves a chunk by only {100 * d_chunk:.3f}%: "
                      "REL_CHUNK cannot see it")
                check(d_err >= 2 * REL_STDERR, f"the wrong RoPE base moves the standard error by only {100 * d_err:.3f}%: "
                      "REL_STDERR cannot see it")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
