"""`ptxlm inspect` reports what gguf.GGUFReader reports.

For each model given (default: the two real models under PTXLM_MODELS_DIR,
plus tiny synthetic qwen2, gemma3, qwen3, llama3, mistral3, phi3, phi4mini and gemma4 models from ptxlm-synth):
architecture, hyperparameters, tokenizer summary, chat-template presence,
every tensor's name, type, shape and byte size, and the totals per type must
equal what the reference reader derives from the same file. Then the error
contract: a missing, a truncated and a non-GGUF file each give exit code 2
and exactly one line on stderr.
"""
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import gguf

BIN = os.environ.get("PTXLM_BIN", "build/tools/ptxlm/ptxlm")
SYNTH = Path(os.environ.get("PTXLM_BINARY_DIR", "build")) / "models" / "synth" / "ptxlm-synth"
MODELS = Path(os.environ.get("PTXLM_MODELS_DIR", "models"))
REAL = ["gemma-3-270m-q4_k_m.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"]

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def scalar(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v


def per_layer(r, key, n_layer, default=None):
    v = scalar(r, key, default)
    if isinstance(v, list):
        return v[0] if len(set(v)) == 1 else v
    return v


def expected(path):
    r = gguf.GGUFReader(path)
    arch = scalar(r, "general.architecture")
    n_layer = scalar(r, f"{arch}.block_count")
    n_embd = scalar(r, f"{arch}.embedding_length")
    n_head = per_layer(r, f"{arch}.attention.head_count", n_layer)
    hd = n_embd // (n_head if isinstance(n_head, int) else n_head[0])
    hp = {
        "n_layer": n_layer,
        "n_embd": n_embd,
        "n_head": n_head,
        "n_head_kv": per_layer(r, f"{arch}.attention.head_count_kv", n_layer, n_head),
        "n_ff": per_layer(r, f"{arch}.feed_forward_length", n_layer),
        "n_ctx_train": scalar(r, f"{arch}.context_length"),
        "head_dim_k": scalar(r, f"{arch}.attention.key_length", hd),
        "head_dim_v": scalar(r, f"{arch}.attention.value_length", hd),
        "rope_base": scalar(r, f"{arch}.rope.freq_base", 10000.0),
        "rope_dims": scalar(r, f"{arch}.rope.dimension_count", scalar(r, f"{arch}.attention.key_length", hd)),
        "rms_eps": scalar(r, f"{arch}.attention.layer_norm_rms_epsilon"),
        "sliding_window": scalar(r, f"{arch}.attention.sliding_window", 0) if arch in ("gemma3", "gemma4") else 0,
        "rope_scaling": scalar(r, f"{arch}.rope.scaling.type"),
        "rope_scaling_factor": scalar(r, f"{arch}.rope.scaling.factor", scalar(r, f"{arch}.rope.scale_linear")),
        "rope_orig_ctx": scalar(r, f"{arch}.rope.scaling.original_context_length", scalar(r, f"{arch}.context_length")),
        "attn_temperature_scale": scalar(r, f"{arch}.attention.temperature_scale"),
        "rope_attn_factor": scalar(r, f"{arch}.rope.scaling.attn_factor"),
        "rope_factors": [s for s in ("long", "short") if any(t.name == f"rope_factors_{s}.weight" for t in r.tensors)],
        "sliding_window_unused": scalar(r, f"{arch}.attention.sliding_window", 0) if arch == "phi3" else 0,
        "final_logit_softcapping": scalar(r, f"{arch}.final_logit_softcapping"),
    }
    g4 = arch == "gemma4"   # Gemma 4's keys, read for gemma4 only
    pattern = scalar(r, f"{arch}.attention.sliding_window_pattern") if g4 else None
    hp["sliding_layers"] = None if pattern is None else [i for i, v in enumerate(pattern) if v]
    hp["head_dim_k_swa"] = scalar(r, f"{arch}.attention.key_length_swa") if g4 else None
    hp["head_dim_v_swa"] = scalar(r, f"{arch}.attention.value_length_swa") if g4 else None
    hp["rope_dims_swa"] = scalar(r, f"{arch}.rope.dimension_count_swa", hp["rope_dims"]) if g4 else None
    hp["shared_kv_layers"] = scalar(r, f"{arch}.attention.shared_kv_layers", 0) if g4 else 0
    hp["n_embd_per_layer"] = scalar(r, f"{arch}.embedding_length_per_layer_input", 0) if g4 else 0
    tok = {
        "model": scalar(r, "tokenizer.ggml.model", ""),
        "pre": scalar(r, "tokenizer.ggml.pre", ""),
        "n_vocab": len(r.fields["tokenizer.ggml.tokens"].data) if "tokenizer.ggml.tokens" in r.fields else 0,
        "bos_id": scalar(r, "tokenizer.ggml.bos_token_id"),
        "eos_id": scalar(r, "tokenizer.ggml.eos_token_id"),
        "eot_id": scalar(r, "tokenizer.ggml.eot_token_id"),
        "add_bos": scalar(r, "tokenizer.ggml.add_bos_token"),
    }
    tensors = []
    totals = defaultdict(lambda: [0, 0, 0])
    for t in r.tensors:
        shape = [int(d) for d in t.shape]
        tensors.append({"name": t.name, "type": t.tensor_type.name, "shape": shape, "bytes": int(t.n_bytes)})
        tot = totals[t.tensor_type.name]
        tot[0] += 1
        tot[1] += int(t.n_elements)
        tot[2] += int(t.n_bytes)
    return {
        "architecture": arch,
        "name": scalar(r, "general.name", ""),
        "metadata_keys": len([k for k in r.fields if not k.startswith("GGUF.")]),
        "alignment": int(r.alignment),
        "hparams": hp,
        "tokenizer": tok,
        "chat_template": "tokenizer.chat_template" in r.fields,
        "tensors": tensors,
        "totals": {k: v for k, v in totals.items()},
    }


def close(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(b)))
    return a == b


def compare(path):
    out = subprocess.run([BIN, "inspect", "--json", str(path)], capture_output=True, text=True, timeout=120)
    check(out.returncode == 0, f"{path}: inspect exit code {out.returncode}: {out.stderr.strip()}")
    if out.returncode != 0:
        return
    got = json.loads(out.stdout)
    want = expected(str(path))
    for key in ("architecture", "name", "metadata_keys", "alignment", "chat_template"):
        check(got[key] == want[key], f"{path.name}: {key}: ours {got[key]!r}, gguf-py {want[key]!r}")
    for key, w in want["hparams"].items():
        check(close(got["hparams"][key], w), f"{path.name}: hparams.{key}: ours {got['hparams'][key]!r}, gguf-py {w!r}")
    for key, w in want["tokenizer"].items():
        check(got["tokenizer"][key] == w, f"{path.name}: tokenizer.{key}: ours {got['tokenizer'][key]!r}, gguf-py {w!r}")
    check(len(got["tensors"]) == len(want["tensors"]),
          f"{path.name}: {len(got['tensors'])} tensors, gguf-py {len(want['tensors'])}")
    for g, w in zip(got["tensors"], want["tensors"]):
        check(g == w, f"{path.name}: tensor {w['name']}: ours {g}, gguf-py {w}")
    got_totals = {t["type"]: [t["tensors"], t["elements"], t["bytes"]] for t in got["totals"]}
    check(got_totals == want["totals"], f"{path.name}: totals: ours {got_totals}, gguf-py {want['totals']}")
    check(got["tensor_bytes"] == sum(t["bytes"] for t in want["tensors"]), f"{path.name}: tensor_bytes")
    human = subprocess.run([BIN, "inspect", str(path)], capture_output=True, text=True, timeout=120)
    check(human.returncode == 0 and want["architecture"] in human.stdout and "Q" in human.stdout,
          f"{path.name}: human-readable inspect failed or lacks the architecture")
    rows = {l[:18].strip(): l[18:].strip() for l in human.stdout.splitlines() if l.startswith("  ") and len(l) > 18}
    hpw = want["hparams"]
    check(rows.get("head dim", "").split(" ")[0] == str(hpw["head_dim_k"]),
          f"{path.name}: human-readable head dim {rows.get('head dim')!r}, gguf-py {hpw['head_dim_k']}")
    if hpw["rope_scaling"] is not None:
        check(rows.get("rope scaling", "").startswith(hpw["rope_scaling"]) and
              f"factor {hpw['rope_scaling_factor']:g}" in rows.get("rope scaling", ""),
              f"{path.name}: human-readable rope scaling {rows.get('rope scaling')!r}")
    if hpw["attn_temperature_scale"] is not None:
        check(f"every {hpw['rope_orig_ctx']} positions" in rows.get("attn temperature", ""),
              f"{path.name}: human-readable attention temperature {rows.get('attn temperature')!r}")
    if hpw["sliding_layers"] is not None:
        check(rows.get("sliding layers", "") == " ".join(map(str, hpw["sliding_layers"])) and
              f"sliding layers {hpw['head_dim_k_swa']}" in rows.get("head dim", "") and
              f"the last {hpw['shared_kv_layers']} layers" in rows.get("shared kv", "") and
              rows.get("per-layer embd", "").startswith(str(hpw["n_embd_per_layer"])),
              f"{path.name}: human-readable gemma4 rows {rows!r}")
    if hpw["rope_factors"]:
        check(rows.get("longrope", "").startswith("factors " + ", ".join(hpw["rope_factors"])) and
              f"original context of {hpw['rope_orig_ctx']}" in rows.get("longrope", ""),
              f"{path.name}: human-readable longrope {rows.get('longrope')!r}")
    print(f"ok: {path.name}: {len(want['tensors'])} tensors, {len(want['totals'])} types agree with gguf-py")


def check_error(args, what):
    out = subprocess.run([BIN, "inspect"] + args, capture_output=True, text=True, timeout=60)
    lines = [l for l in out.stderr.splitlines() if l.strip()]
    check(out.returncode == 2, f"{what}: exit code {out.returncode}, want 2")
    check(len(lines) == 1, f"{what}: want one line on stderr, got {lines!r}")
    check(out.stdout == "", f"{what}: nothing on stdout, got {out.stdout[:200]!r}")
    print(f"ok: {what}: {lines[0] if lines else ''}")


def main():
    paths = [Path(p) for p in sys.argv[1:]] or [MODELS / n for n in REAL]
    synth_dir = tempfile.TemporaryDirectory()
    if not sys.argv[1:]:
        for arch in ("qwen2", "gemma3", "qwen3", "llama3", "mistral3", "phi3", "phi4mini", "gemma4"):
            out = Path(synth_dir.name) / f"{arch}-tiny.gguf"
            p = subprocess.run([str(SYNTH), "--arch", arch, "--size", "tiny", "--out", str(out)],
                               capture_output=True, text=True, timeout=60)
            check(p.returncode == 0, f"ptxlm-synth --arch {arch} failed: {p.stderr.strip()}")
            paths.append(out)
    for p in paths:
        if not p.exists():
            failures.append(f"{p} is missing: run ./run.sh test (or models/fetch) to fetch it")
            print("FAIL:", failures[-1])
            continue
        compare(p)
    with tempfile.TemporaryDirectory() as d:
        check_error([str(Path(d) / "nope.gguf")], "missing file")
        trunc = Path(d) / "trunc.gguf"
        with open(paths[0], "rb") as f:
            trunc.write_bytes(f.read(1000))
        check_error([str(trunc)], "truncated file")
        text = Path(d) / "text.gguf"
        text.write_text("hello, this is not a model\n")
        check_error([str(text)], "not a GGUF file")
    print(f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
