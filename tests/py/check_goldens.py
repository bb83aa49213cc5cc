"""Every llama.cpp golden names the bytes it was recorded from.

tests/golden/llamacpp_*.json carry the SHA-256 of the model llama.cpp ran
(bench/golden-llamacpp, bench/golden-perplexity). test_vs_llamacpp and
perplexity_vs_llamacpp regenerate the synthetic ones with ptxlm-synth and load
the real ones from models/, so a generator that changed its output, or a model
file that changed upstream, would otherwise show up as a tolerance failure far
from its cause. Here:
- each synthetic golden (llamacpp_synth-<arch>[-<mix>][_f32].json, its model
  <arch>[-<mix>]-tiny.gguf) against ptxlm-synth's file of today, byte for byte
  by SHA-256;
- each real-model golden against models/SHA256SUMS, which `models/fetch`
  checks every download against.
A mismatch names the command that re-records the golden.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402

SRC = Path(os.environ.get("PTXLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BIN = Path(os.environ.get("PTXLM_BINARY_DIR", SRC / "build")) / "models" / "synth" / "ptxlm-synth"
GOLDEN = SRC / "tests" / "golden"


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def synth_file(tmp, model, cache):
    """ptxlm-synth's tiny file for a golden's model name (<arch>[-<mix>]-tiny.gguf)."""
    if model in cache:
        return cache[model]
    tag = model.removesuffix("-tiny.gguf")
    arch, _, mix = tag.partition("-")
    path = Path(tmp) / model
    p = subprocess.run([str(BIN), "--arch", arch, "--size", "tiny", "--out", str(path)] +
                       (["--types", mix] if mix else []), capture_output=True, text=True)
    cache[model] = (path, tag) if p.returncode == 0 else (None, f"ptxlm-synth {arch} {mix}: {p.stderr.strip()}")
    return cache[model]


def main():
    if not BIN.exists():
        print(f"FAIL: {BIN} not built")
        return 1
    sums = {}
    for line in (SRC / "models" / "SHA256SUMS").read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            sums[name] = digest
    cache = {}
    synthetic = real = 0
    with tempfile.TemporaryDirectory() as tmp:
        for g in sorted(GOLDEN.glob("llamacpp_*.json")):
            rec = json.loads(g.read_text())
            if g.name == "llamacpp_synth_tiny.json":
                continue   # check_synth.py checks its models' SHA-256 against the same generator
            # The perplexity golden: one record per real model; the others name one model.
            models = rec["models"] if "models" in rec else {rec["model"]: {"sha256": rec["sha256"]}}
            for model, m in models.items():
                want = m["sha256"]
                if g.name.startswith("llamacpp_synth-"):
                    path, tag = synth_file(tmp, model, cache)
                    if not check(path is not None, f"{g.name}: {tag}"):
                        continue
                    arch, _, mix = tag.partition("-")
                    got = sha256(path)
                    check(got == want, f"{g.name} was recorded on a {model} of SHA-256 {want}; ptxlm-synth writes "
                          f"{got} today. If the generator changed on purpose, re-record with `bench/golden-llamacpp "
                          f"--models synth --archs {arch}{':' + mix if mix else ''}`")
                    synthetic += 1
                else:
                    check(model in sums, f"{g.name}: {model} is not in models/SHA256SUMS")
                    check(sums.get(model) == want, f"{g.name} was recorded on a {model} of SHA-256 {want}; "
                          f"models/SHA256SUMS has {sums.get(model)}: re-record the golden for the new file")
                    real += 1
    print(f"{synthetic} synthetic and {real} real-model golden records name the bytes they were recorded from")
    check(synthetic >= 20 and real >= 4, f"too few goldens checked ({synthetic} synthetic, {real} real)")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
