"""llama.cpp's GEMV kernel (mul_mat_vec_q) through ptxlm's projection: the
error bar beside every projected figure.

The projection (engine/projection.cpp) charges each kernel the largest of its
limits: DRAM bytes at the achievable bandwidth, instruction issue, each pipe,
and load round trips (each warp's dependent waits x DRAM latency x the rounds
of blocks an SM runs one after another), plus a launch cost. This script
applies the same terms to llama.cpp's own kernel, compiled by the toolkit's
nvcc for sm_90 from the peer's source package, and compares the result with
llama.cpp's published decode rate (../shared/FACTS.md: Llama-3-8B Q4_K_M
144.5 tok/s on an H100 PCIe). The ratio says how far the model is from a
measured GPU for a kernel family it was not tuned on: divide our projections
by it for a pessimistic reading.

Where emu counts our kernels, this reads llama.cpp's statically:
- SASS of the Q4_K and Q6_K kernels for one input column (bench/sass --cubin):
  instructions per iteration of the hot loop, by class; ptxas's registers.
- The kernel's structure from mmvq.cu for NVIDIA since Ampere (its GENERIC
  table): 4 warps per block, one row per block; a warp covers 32 / (QI / VDR)
  super-blocks per iteration of the source loop (Q4_K 2, Q6_K 1), and ptxas
  unrolls that loop by (IDP per SASS iteration / IDP per vec_dot), every load
  of an unrolled iteration issued before the first use: one DRAM round trip
  per SASS iteration per warp.
- Instructions per warp: the loop's per iteration times its iterations, plus
  the kernel's other instructions once (an over-count: not all run).
- The other kernels of llama.cpp's Llama graph (CUDA, flash attention off, as
  llama-bench ran in 2024): per layer rms_norm, mul, three q8_1 quantizations
  (one per mul_mat), two ropes, two KV copies, KQ, soft_max, KQV, a cont, the
  output projection's quantization, add, rms_norm, mul, two quantizations,
  silu, mul, the down projection's quantization, add: 23, and 4 at the ends
  (get_rows, rms_norm, mul, quantization). Each is charged a graph launch
  (1.3 us) and no work: at tg128 their bytes are small.

    bench/peer-mmvq [--project h100-pcie] [--json]

Needs the toolkit's nvcc (/usr/local/cuda/bin/nvcc) and the peer's source
(bench/setup-peer --source-only, run by this script when it is missing).
Never part of ./run.sh test.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(ROOT, "build-peer")
VERSION = "0.3.36"   # bench/setup-peer's
SRC = os.path.join(PEER, "src", f"llama_cpp_python-{VERSION}", "vendor", "llama.cpp", "ggml")
OUT = os.path.join(PEER, "mmvq")
NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")

PUBLISHED = {"h100-pcie": 144.5}   # tok/s, Llama-3-8B Q4_K_M tg (FACTS.md)
GRAPH_LAUNCH_US = 1.3              # engine/projection.h kLaunchOverheadUs[Graph]
OTHER_PER_LAYER, OTHER_PER_TOKEN = 23, 4

# ggml type ids, super-block bytes, super-blocks a warp covers per source
# iteration (32 lanes / (QI / VDR): QI 32 for both, VDR 2 and 1), dp4a per
# vec_dot call (vecdotq.cuh: QR4_K x 4, QR6_K x 1).
TYPES = {"Q4_K": {"id": 12, "bytes": 144, "per_warp": 2, "idp_per_dot": 8},
         "Q6_K": {"id": 14, "bytes": 210, "per_warp": 1, "idp_per_dot": 2}}
NWARPS = 4

# Llama-3-8B: (name, rows, cols, count per token by type under Q4_K_M).
# Q4_K_M types attn_v and ffn_down Q6_K in half of the 32 layers (llama.cpp's
# use_more_bits), the output Q6_K, the rest Q4_K.
LAYERS, E, FF, KV, VOCAB = 32, 4096, 14336, 1024, 128256
MATRICES = [("attn_q", E, E, {"Q4_K": 32}), ("attn_k", KV, E, {"Q4_K": 32}),
            ("attn_v", KV, E, {"Q4_K": 16, "Q6_K": 16}), ("attn_output", E, E, {"Q4_K": 32}),
            ("ffn_gate", FF, E, {"Q4_K": 32}), ("ffn_up", FF, E, {"Q4_K": 32}),
            ("ffn_down", E, FF, {"Q4_K": 16, "Q6_K": 16}), ("output", VOCAB, E, {"Q6_K": 1})]


def die(msg):
    print(f"peer-mmvq: {msg}", file=sys.stderr)
    sys.exit(2)


def log(msg):
    print(f"peer-mmvq: {msg}", file=sys.stderr, flush=True)


def gpu_spec(name):
    """A row of engine/projection.cpp's kGpus, read from the source (one table, not two)."""
    text = open(os.path.join(ROOT, "engine", "projection.cpp")).read()
    m = re.search(r'\{"' + re.escape(name) + r'", "([^"]+)", ([\d.]+), (\d+), (\d+), ([\d*\s]+), ([\d.]+), ([\d.]+), '
                  r'([\d.]+), (kRates\w+)\}', text)
    if not m:
        die(f"--project {name}: not in engine/projection.cpp's GPU table")
    rates = re.search(r"kRates" + re.escape(m.group(9)[6:]) + r" = \{([^}]+)\}", text)
    return {"name": name, "description": m.group(1), "gbs": float(m.group(2)), "sms": int(m.group(3)),
            "threads": int(m.group(4)), "smem": eval(m.group(5)), "ghz": float(m.group(6)),
            "achievable": float(m.group(7)), "latency_us": float(m.group(8)),
            "rates": [float(x) for x in rates.group(1).split(",")]}


def blocks_per_sm(gpu, threads, regs, smem):
    """engine/projection.cpp's blocks_per_sm."""
    warps = (threads + 31) // 32
    regs_per_warp = (regs * 32 + 255) // 256 * 256
    n = min(32, gpu["threads"] // (warps * 32))
    n = min(n, 65536 // (regs_per_warp * warps))
    return min(n, gpu["smem"] // (smem + 1024))


def compile_cubin():
    cubin, log_path = os.path.join(OUT, "mmvq-sm_90.cubin"), os.path.join(OUT, "mmvq-sm_90.ptxas.txt")
    src = os.path.join(SRC, "src", "ggml-cuda", "mmvq.cu")
    if not os.path.isdir(SRC):
        log("the peer's source is missing: bench/setup-peer --source-only")
        subprocess.run([os.path.join(ROOT, "bench", "setup-peer"), "--source-only"], check=True)
    if os.path.exists(cubin) and os.path.getmtime(cubin) > os.path.getmtime(src):
        return cubin, open(log_path).read()
    if not os.access(NVCC, os.X_OK):
        die(f"no nvcc at {NVCC} (set NVCC)")
    os.makedirs(OUT, exist_ok=True)
    log("compiling llama.cpp's mmvq.cu for sm_90 with nvcc (about a minute)")
    p = subprocess.run([NVCC, "-std=c++17", "-O3", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-DNDEBUG",
                        "-I", os.path.join(SRC, "include"), "-I", os.path.join(SRC, "src"),
                        "-I", os.path.join(SRC, "src", "ggml-cuda"), "-o", cubin, src], capture_output=True, text=True)
    if p.returncode != 0:
        die(f"nvcc failed:\n{p.stderr[-2000:]}")
    with open(log_path, "w") as f:
        f.write(p.stderr)
    return cubin, p.stderr


def kernel_name(t):
    # mul_mat_vec_q<type, ncols_dst = 1, has_fusion = false, small_k = false, halve_iters = false>
    return f"_Z13mul_mat_vec_qIL9ggml_type{TYPES[t]['id']}ELi1ELb0ELb0ELb0E"


def kernel_counts(cubin, ptxas_log):
    sass = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "sass.py"), "--cubin", cubin, "--kernel",
                           "|".join(kernel_name(t) for t in TYPES), "--json"], capture_output=True, text=True)
    if sass.returncode != 0:
        die(f"bench/sass failed:\n{sass.stderr}")
    kernels = json.loads(sass.stdout)["kernels"]
    out = {}
    for t, ti in TYPES.items():
        k = [k for k in kernels if k["name"].startswith(kernel_name(t))]
        if len(k) != 1:
            die(f"{len(k)} kernels named {kernel_name(t)}* in the cubin: has mmvq.cu changed?")
        k = k[0]
        hot = [lp for lp in k["loops"] if lp["hot"]]
        if len(hot) != 1:
            die(f"{t}: {len(hot)} hot loops in {k['name']}")
        lp = hot[0]
        cl = lp["classes"]
        if cl["idp"] % ti["idp_per_dot"]:
            die(f"{t}: {cl['idp']} dp4a in the hot loop, not a multiple of {ti['idp_per_dot']} per vec_dot")
        m = re.search(r"Compiling entry function '" + re.escape(k["name"]) + r"'[^\n]*\n(?:(?!ptxas info    : Compiling)"
                      r"[^\n]*\n)*?[^\n]*Used (\d+) registers[^\n]*?(\d+) bytes smem", ptxas_log)
        if not m:
            die(f"{t}: no register count for {k['name']} in ptxas's log")
        out[t] = {"kernel": k["name"], "loop_insts": lp["insts"], "other_insts": k["total_insts"] - lp["insts"],
                  "unroll": cl["idp"] // ti["idp_per_dot"], "classes": cl, "registers": int(m.group(1)),
                  "smem": int(m.group(2))}
    return out


def gemv_terms(gpu, t, k, rows, cols):
    """One mul_mat_vec_q launch: engine/projection.cpp's launch_terms on its static counts."""
    ti = TYPES[t]
    supers = cols // 256
    iters = math.ceil(supers / (NWARPS * ti["per_warp"]))   # source iterations per warp
    trips = math.ceil(iters / k["unroll"])                   # SASS loop iterations, a round trip each
    threads, blocks = 32 * NWARPS, rows
    fit = blocks_per_sm(gpu, threads, k["registers"], k["smem"])
    per_sm = math.ceil(blocks / gpu["sms"])
    rounds = math.ceil(per_sm / fit)
    share = per_sm / blocks
    warps = blocks * NWARPS
    per_trip = k["loop_insts"]
    insts = warps * (k["other_insts"] + per_trip * trips)
    cl = k["classes"]
    # Pipes as engine/projection.h numbers them: fp32, int, cvt (sfu, shfl: none in the loop).
    pipe = [cl["fp32"] + cl["half"], cl["integer"] + cl["idp"] + cl["bitops"], cl["conversions"]]
    cycles_per_us = gpu["ghz"] * 1e3
    nbytes = rows * supers * ti["bytes"] + cols // 32 * 36 + rows * 4   # weights, the q8_1 input, the output
    # The launch's start (engine/projection.h): a fill; no prologue, since
    # its waits all come before its one barrier (the final reduction).
    terms = {
        "dram": nbytes / (gpu["gbs"] * 1e3 * gpu["achievable"]) + gpu["latency_us"],
        "issue": insts * share / (4 * cycles_per_us),
        "latency": trips * gpu["latency_us"] * rounds,
    }
    for name, n, rate in zip(("fp32", "int", "cvt"), pipe, gpu["rates"][:3]):
        terms[name] = warps * trips * n * share / (rate / 32 * cycles_per_us)
    bound = max(terms, key=terms.get)
    return {"bytes": nbytes, "blocks_per_sm": fit, "rounds": rounds, "trips": trips, "terms": terms,
            "bound_by": bound, "us": terms[bound]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", default="h100-pcie", help="GPU of engine/projection.cpp's table (default h100-pcie)")
    ap.add_argument("--json", action="store_true", help="JSON on stdout instead of Markdown")
    a = ap.parse_args()
    gpu = gpu_spec(a.project)
    cubin, ptxas_log = compile_cubin()
    ks = kernel_counts(cubin, ptxas_log)
    rows_out, gemv_us, nbytes, launches = [], 0.0, 0.0, 0
    by = {}
    for name, rows, cols, types in MATRICES:
        for t, n in types.items():
            r = gemv_terms(gpu, t, ks[t], rows, cols)
            gemv_us += n * r["us"]
            nbytes += n * r["bytes"]
            launches += n
            by[r["bound_by"]] = by.get(r["bound_by"], 0.0) + n * r["us"]
            rows_out.append({"matrix": name, "type": t, "rows": rows, "cols": cols, "per_token": n, **r})
    other = OTHER_PER_LAYER * LAYERS + OTHER_PER_TOKEN
    launch_us = (launches + other) * GRAPH_LAUNCH_US
    us = gemv_us + launch_us
    tok_s = 1e6 / us
    published = PUBLISHED.get(a.project)
    result = {"gpu": gpu, "kernels": ks, "gemvs": rows_out, "gemv_us": gemv_us, "gemv_bound_us": by,
              "launches": launches + other, "launch_us": launch_us, "us_per_token": us, "projected_tok_s": tok_s,
              "gemv_bytes": nbytes, "published_tok_s": published,
              "projected_over_published": tok_s / published if published else None}
    if a.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"llama.cpp {VERSION}'s mul_mat_vec_q (sm_90 SASS) through ptxlm's projection, {gpu['description']}\n")
    print("| kernel | registers | blocks/SM | SASS insts per loop iteration | unroll | insts per weight byte |")
    print("|---|--:|--:|--:|--:|--:|")
    for t, k in ks.items():
        wb = k["unroll"] * TYPES[t]["per_warp"] * TYPES[t]["bytes"]
        print(f"| {t} | {k['registers']} | {blocks_per_sm(gpu, 128, k['registers'], k['smem'])} | {k['loop_insts']} | "
              f"{k['unroll']} | {k['loop_insts'] / wb:.3f} |")
    print("\n| matrix | type | rows x cols | per token | rounds | round trips per warp | bound by | us | dram us |")
    print("|---|---|---|--:|--:|--:|---|--:|--:|")
    for r in rows_out:
        print(f"| {r['matrix']} | {r['type']} | {r['rows']} x {r['cols']} | {r['per_token']} | {r['rounds']} | "
              f"{r['trips']} | {r['bound_by']} | {r['us']:.1f} | {r['terms']['dram']:.1f} |")
    bound = ", ".join(f"{k} {v:.0f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1]))
    print(f"\nGEMVs {gemv_us:.0f} us ({bound}; {nbytes / 1e9:.2f} GB), {launches + other} launches x "
          f"{GRAPH_LAUNCH_US} us = {launch_us:.0f} us: {us:.0f} us per token, **{tok_s:.0f} tok/s projected**")
    if published:
        print(f"llama.cpp published: {published} tok/s; projected / published = **{tok_s / published:.2f}**")
    return 0


if __name__ == "__main__":
    sys.exit(main())
