"""The GPU decode path's efficiency report, counted on emu.

For each model: `ptxlm bench --device cuda` with emu as the driver counts one
token's work (bench's counted mode: launches, unique and L2-sector bytes, the
weight loads' sector efficiency, a row per kernel with registers and spills
from ptxas for sm_90, blocks per SM and bytes in flight per SM) and projects a
rate for a named GPU. The models: the 4096-wide synthetic Q4_K_M model (two
Llama-2-7B layers), both real models, and two Llama-3-8B layers
(`llama3-8b-slice`), which Q4_K_M types as the two kinds of layer the full
model has 16 of each; that slice is scaled to Llama-3-8B's 32 layers and
128256-token vocabulary with the projection of engine/projection.h (each
launch: a fixed overhead, 1.3 us in a graph, plus its bytes at 90% of peak
bandwidth, slowed in proportion when the grid has fewer blocks than SMs).

    bench/efficiency [--project h100-sxm] [--out docs/efficiency.md]

Every figure is counted or projected, never measured: the report says so.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("PTXLM_BUILD_DIR", os.path.join(ROOT, "build"))
PTXLM = os.path.join(BUILD, "tools", "ptxlm", "ptxlm")
SYNTH = os.path.join(BUILD, "models", "synth", "ptxlm-synth")
EMU = os.path.join(BUILD, "emu", "lib", "libcuda.so.1")

# Llama-3-8B: 32 layers, 128256-token vocabulary, Q6_K output (Q4_K_M).
L3_LAYERS, L3_VOCAB = 32, 128256
MARKER = "<!-- report: bench/efficiency replaces everything below -->"
# engine/projection.h's model.
GRAPH_LAUNCH_US, ACHIEVABLE = 1.3, 0.9


def log(msg):
    print(f"efficiency: {msg}", file=sys.stderr, flush=True)


def synth(size, out):
    if not os.path.exists(out):
        log(f"generating the synthetic llama {size} model")
        subprocess.run([SYNTH, "--arch", "llama", "--size", size, "--out", out], check=True, capture_output=True)
    return out


def counted(model, gpu):
    log(f"counting one token of {os.path.basename(model)} on emu")
    t = time.time()
    env = dict(os.environ, PTXLM_LIBCUDA=EMU)
    p = subprocess.run([PTXLM, "bench", "-m", model, "--device", "cuda", "-p", "0", "-n", "1", "-r", "1", "-o", "json",
                        "--project", gpu], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"efficiency: ptxlm bench failed on {model}:\n{p.stderr}")
    log(f"  done in {time.time() - t:.0f} s")
    return json.loads(p.stdout)[0]["counted"]


def launch_us(blocks, nbytes, gpu):
    """One launch in a graph, as engine/projection.cpp projects it."""
    share = min(1.0, blocks / gpu["sms"])
    return GRAPH_LAUNCH_US + (nbytes / (gpu["gbs"] * 1e3 * ACHIEVABLE * share) if nbytes else 0.0)


def scale_slice(c, gpu):
    """Llama-3-8B from its two-layer slice: each layer kernel's launches x 16
    (the slice's 2 layers are one of each of the 16 + 16 layer kinds), the LM
    head's bytes x 128256 / the slice's vocabulary (its grid already fills
    every SM), the embedding row, clear and argmax once."""
    assert c["n_layer"] == 2, c["n_layer"]
    us, launches, nbytes = 0.0, 0, 0.0
    for k in c["kernels"]:
        per_launch = k["unique_bytes"] / k["launches"]
        n, b, blocks = k["launches"], per_launch, k["blocks"]
        if k["part"] == "layer":
            n = k["launches"] * L3_LAYERS // c["n_layer"]
        elif k["part"] == "head":
            b, blocks = per_launch * L3_VOCAB / c["n_vocab"], max(blocks, gpu["sms"])
        us += n * launch_us(blocks, b, gpu)
        launches += n
        nbytes += n * b
    return {"launches": launches, "bytes": nbytes, "us": us, "tok_s": 1e6 / us,
            "share": nbytes * (1e6 / us) / (gpu["gbs"] * 1e9)}


def summary_row(name, c):
    pj = c["projected"]
    return (f"| {name} | {c['token_bytes'] / 1e6:.1f} | {c['launches']} | {c['launches_below_sm_count']} | "
            f"{c['unique_over_weights']:.3f} | {c['requested_over_weights']:.3f} | {100 * c['sector_efficiency']:.1f}% | "
            f"{pj['tokens_per_s']:.0f} | {100 * pj['bandwidth_share']:.0f}% |")


def kernel_table(c):
    rows = ["| kernel | launches | blocks | threads | regs | spill B | blocks/SM fit | resident/SM | "
            "in flight/SM KiB | unique MB | L2 MB | weight sector eff. |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]

    def f(v, fmt, scale=1.0):
        return "n/a" if v is None else fmt % (v * scale)

    for k in c["kernels"]:
        rows.append(f"| {k['kernel']} | {k['launches']} | {k['blocks']} | {k['threads']} | {f(k['registers'], '%d')} | "
                    f"{f(k['spill_bytes'], '%d')} | {f(k['blocks_per_sm'], '%d')} | "
                    f"{f(k['resident_blocks_per_sm'], '%d')} | {f(k['in_flight_bytes_per_sm'], '%.1f', 1 / 1024)} | "
                    f"{k['unique_bytes'] / 1e6:.2f} | {k['requested_bytes'] / 1e6:.2f} | "
                    f"{f(k['weight_sector_efficiency'], '%.1f%%', 100)} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", default="h100-sxm", help="the GPU to project for (ptxlm bench --project)")
    ap.add_argument("--out", help="write the Markdown report here (default: stdout)")
    ap.add_argument("--cache", default=os.path.join(BUILD, "efficiency"), help="where the synthetic models go")
    a = ap.parse_args()
    for f in (PTXLM, SYNTH, EMU):
        if not os.path.exists(f):
            sys.exit(f"efficiency: {f} is missing: build first (./run.sh test or cmake --build build)")
    os.makedirs(a.cache, exist_ok=True)
    models = [("synthetic llama wide4096 (2 Llama-2-7B layers, Q4_K_M)", synth("wide4096", os.path.join(a.cache, "wide4096.gguf"))),
              ("synthetic llama3-8b-slice (2 Llama-3-8B layers, Q4_K_M)",
               synth("llama3-8b-slice", os.path.join(a.cache, "llama3-8b-slice.gguf"))),
              ("SmolLM2-135M-Instruct Q4_1", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")),
              ("gemma-3-270m Q4_K_M", os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))]
    results = [(name, path, counted(path, a.project)) for name, path in models]
    pj0 = results[0][2]["projected"]
    gpu = {"sms": pj0["sms"], "gbs": pj0["bandwidth_gbs"]}
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()

    out = [f"Counted on emu at ptxlm {commit}: one token at depth 0 per model, graph schedule; rates "
           f"projected for {pj0['description']} ({gpu['sms']} SMs, {gpu['gbs']:.0f} GB/s), never measured.", "",
           "| model | MB a token reads | launches | launches < SMs | unique / MB read | L2 sectors / MB read | "
           "weight sector eff. | projected tok/s | of peak BW |",
           "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    out += [summary_row(name, c) for name, _, c in results]
    l3 = scale_slice(results[1][2], gpu)
    out += ["", f"Llama-3-8B Q4_K_M, scaled from llama3-8b-slice ({L3_LAYERS} layers, vocabulary {L3_VOCAB}): "
            f"{l3['launches']} launches, {l3['bytes'] / 1e9:.2f} GB per token, projected {l3['tok_s']:.0f} tok/s "
            f"({l3['us']:.0f} us per token, {l3['launches'] * GRAPH_LAUNCH_US:.0f} us of it launch overhead, "
            f"{100 * l3['share']:.0f}% of peak bandwidth)."]
    for name, _, c in results:
        out += ["", f"### {name}", "", kernel_table(c)]
    text = "\n".join(out) + "\n"
    if a.out:
        # An existing file keeps what precedes the marker (its prose).
        head = ""
        if os.path.exists(a.out):
            with open(a.out) as f:
                old = f.read()
            if MARKER in old:
                head = old[:old.index(MARKER) + len(MARKER)] + "\n\n"
        with open(a.out, "w") as f:
            f.write(head + text)
        log(f"wrote {a.out}")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
