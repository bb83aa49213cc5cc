"""The GPU decode path's efficiency report, counted on emu.

For each model and schedule (graph, persistent): `ptxlm bench --device cuda`
with emu as the driver counts one token's work (bench's counted mode:
launches, grid-wide waits, unique and L2-sector bytes, the weight loads'
sector efficiency, a row per kernel with registers and spills from ptxas for
sm_90, blocks per SM and bytes in flight per SM) and projects a rate for a
named GPU. The models: the 4096-wide synthetic Q4_K_M model (two Llama-2-7B
layers), both real models, and two-layer slices of Llama-3-8B
(`llama3-8b-slice`) and Llama-3.2-1B (`llama3.2-1b-slice`), which Q4_K_M
types as the two kinds of layer the full models have half of each, with
the full models' 128256-token vocabulary (the LM head counted at its real
shape); the slices are scaled to the full models' layers with the projection of engine/projection.h (each kernel the largest of its
limits: DRAM bytes, load round trips, instruction issue, each pipe, shared
wavefronts; plus 1.3 us per launch in a graph; persistent: one 2 us launch
and 1 us per op-to-op handoff). Per kernel it shows what binds it and the
counts behind each limit.

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

# The full models the slices stand for: layers and vocabulary (Q6_K output
# under Q4_K_M; Llama-3.2-1B's is its tied embedding, typed as the output).
SCALED = [("Llama-3-8B Q4_K_M", "llama3-8b-slice", 32, 128256),
          ("Llama-3.2-1B Q4_K_M", "llama3.2-1b-slice", 16, 128256)]
MARKER = "<!-- report: bench/efficiency replaces everything below -->"
# engine/projection.h's overheads.
GRAPH_LAUNCH_US, PERSISTENT_LAUNCH_US, HANDOFF_US = 1.3, 2.0, 1.0
SCHEDULES = ("graph", "persistent")
DEPTHS = (0, 1024, 4096)


def log(msg):
    print(f"efficiency: {msg}", file=sys.stderr, flush=True)


def synth(size, out):
    # Regenerated when ptxlm-synth is newer than the file (a preset may have changed).
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(SYNTH):
        log(f"generating the synthetic llama {size} model")
        subprocess.run([SYNTH, "--arch", "llama", "--size", size, "--out", out], check=True, capture_output=True)
    return out


def counted(model, gpu, schedule, depths=(0,)):
    """bench's counted mode: {depth: counted} for one token at each depth."""
    log(f"counting one token of {os.path.basename(model)} on emu ({schedule} schedule, depth "
        f"{', '.join(map(str, depths))})")
    t = time.time()
    env = dict(os.environ, PTXLM_LIBCUDA=EMU)
    p = subprocess.run([PTXLM, "bench", "-m", model, "--device", "cuda", "--schedule", schedule, "-p", "0", "-n", "1",
                        "-d", ",".join(map(str, depths)), "-r", "1", "-o", "json", "--project", gpu],
                       env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"efficiency: ptxlm bench failed on {model}:\n{p.stderr}")
    log(f"  done in {time.time() - t:.0f} s")
    return {r["n_depth"]: r["counted"] for r in json.loads(p.stdout)}


def scale_slice(graph, persistent, layers, vocab, gpu):
    """A full model from its two-layer slice's graph count (the op chain is
    the same under both schedules): each layer kernel's launches x layers / 2
    (the slice's 2 layers are one of each of the two layer kinds; a layer
    kernel has the full model's shape, so its projected time per launch
    carries over), the LM head, embedding row, clear and argmax once, as
    counted (the slice has the full vocabulary). The persistent
    schedule runs the same ops in one launch, one handoff each, each op
    charged what it costs in the graph chain, and its all-to-all waits per
    layer are the slice's. graph-prefetch: the graph chain with every GEMV
    prefetching its first weights (--gpu-prefetch), each kernel's
    projected_us_prefetch; persistent-prefetch: the persistent schedule with
    every GEMV op prefetching before its handoff wait, each kernel's
    projected_us_prefetch_ahead."""
    c = graph
    assert c["n_layer"] == 2, c["n_layer"]
    assert c["n_vocab"] == vocab, (c["n_vocab"], vocab)
    work_us, ops, nbytes, mem_us, start_us, prefetch_us, ahead_us = 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0.0
    bound = {}
    for k in c["kernels"]:
        n, b, us = k["launches"], k["unique_bytes"] / k["launches"], k["projected_us"] / k["launches"]
        if k["part"] == "layer":
            n = k["launches"] * layers // c["n_layer"]
        work_us += n * us
        start_us += n * k["terms_us"]["start"]
        prefetch_us += n * k["projected_us_prefetch"] / k["launches"]
        ahead_us += n * k["projected_us_prefetch_ahead"] / k["launches"]
        bound[k["bound_by"]] = bound.get(k["bound_by"], 0.0) + n * us
        mem_us += n * b / (gpu["gbs"] * 1e3 * gpu["achievable"])
        ops += n
        nbytes += n * b
    a2a_layer = persistent["all_to_all_waits_per_layer"]
    a2a_rest = persistent["all_to_all_waits"] - a2a_layer * c["n_layer"]   # the embedding's and the head's
    out = {}
    for sched, overhead, work in (("graph", ops * GRAPH_LAUNCH_US, work_us),
                                  ("persistent", PERSISTENT_LAUNCH_US + ops * HANDOFF_US, work_us),
                                  ("graph-prefetch", ops * GRAPH_LAUNCH_US, prefetch_us),
                                  ("persistent-prefetch", PERSISTENT_LAUNCH_US + ops * HANDOFF_US, ahead_us)):
        us = overhead + work
        out[sched] = {"ops": ops, "launches": 1 if sched.startswith("persistent") else ops, "bytes": nbytes, "us": us,
                      "overhead_us": overhead, "memory_us": mem_us, "start_us": start_us, "bound": bound,
                      "tok_s": 1e6 / us, "share": nbytes * (1e6 / us) / (gpu["gbs"] * 1e9)}
    out["graph-prefetch"]["bound"] = {"(prefetching)": prefetch_us}
    out["persistent-prefetch"]["bound"] = {"(prefetching ahead)": ahead_us}
    for sched in ("persistent", "persistent-prefetch"):
        out[sched]["a2a"] = round(a2a_layer * layers + a2a_rest)
    return out


def bound_text(pairs):
    """'shared 199, latency 51': work us by the limit that binds each kernel."""
    return ", ".join(f"{name} {us:.0f}" for name, us in sorted(pairs, key=lambda p: -p[1]) if us >= 0.5)


def side_row(name, c):
    """One schedule's row of the side-by-side table."""
    pj = c["projected"]
    layers = c["n_layer"]
    regs = [k["registers"] for k in c["kernels"] if k["registers"] is not None]
    spills = sum(k["spill_bytes"] or 0 for k in c["kernels"])
    if pj["schedule"] == "persistent":
        barriers = f"{c['all_to_all_waits']} ({c['all_to_all_waits_per_layer']:.2f}/layer)"
        emu = f"{c['grid_syncs']} on {c['emu_blocks']} blocks ({c['grid_syncs'] / layers:.2f}/layer)"
        waits = f"{c['spin_waits']}"
        spin = f"{100 * c['spin_instructions'] / c['warp_instructions']:.3f}%"
    else:   # every launch boundary is a grid-wide barrier
        in_layers = sum(k["launches"] for k in c["kernels"] if k["part"] == "layer")
        barriers = f"{c['launches']} ({in_layers / layers:.2f}/layer)"
        emu, waits, spin = "n/a", "0", "0%"
    return (f"| {name} | {pj['schedule']} | {c['launches']} | {barriers} | {emu} | {waits} | {spin} | "
            f"{c['unique_over_weights']:.3f} | {c['requested_over_weights']:.3f} | {100 * c['sector_efficiency']:.1f}% | "
            f"{max(regs) if regs else 'n/a'} | {spills} | {pj['memory_us']:.1f} | {pj['work_us']:.1f} | "
            f"{bound_text(pj['bound_us'])} | {pj['tokens_per_s']:.0f} | {100 * pj['bandwidth_share']:.0f}% |")


def kernel_table(c):
    rows = ["| kernel | launches | blocks | threads | regs | blocks/SM fit | unique MB | weight sector eff. | "
            "shared wavefronts / ideal | warp instr. / weight B | cvt instr. | waits / warp | in flight / warp B | "
            "in flight / SM KiB | load chain | dram us | start us | latency us | issue us | shared us | cvt us | "
            "projected us | bound by |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]

    def f(v, fmt, scale=1.0):
        return "n/a" if v is None else fmt % (v * scale)

    for k in c["kernels"]:
        warps = k["blocks"] * ((k["threads"] + 31) // 32) * k["launches"]
        t, n = k["terms_us"], k["launches"]
        rows.append(f"| {k['kernel']} | {n} | {k['blocks']} | {k['threads']} | {f(k['registers'], '%d')} | "
                    f"{f(k['blocks_per_sm'], '%d')} | {k['unique_bytes'] / 1e6:.2f} | "
                    f"{f(k['weight_sector_efficiency'], '%.1f%%', 100)} | {f(k['shared_wavefront_ratio'], '%.2f')} | "
                    f"{f(k['instructions_per_weight_byte'], '%.3f')} | {k['instructions_by_class']['cvt']} | "
                    f"{k['load_waits'] / warps:.1f} | {f(k['in_flight_bytes_per_warp'], '%.0f')} | "
                    f"{f(k['in_flight_bytes_per_sm'], '%.1f', 1 / 1024)} | {k['dependent_load_chain']} | "
                    f"{n * t['dram']:.2f} | {n * t['start']:.2f} | {n * t['latency']:.2f} | {n * t['issue']:.2f} | "
                    f"{n * t['shared']:.2f} | "
                    f"{n * t['cvt']:.2f} | {k['projected_us']:.2f} | {k['bound_by']} |")
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
              ("synthetic llama3.2-1b-slice (2 Llama-3.2-1B layers, Q4_K_M)",
               synth("llama3.2-1b-slice", os.path.join(a.cache, "llama3.2-1b-slice.gguf"))),
              ("SmolLM2-135M-Instruct Q4_1", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")),
              ("gemma-3-270m Q4_K_M", os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))]
    results = [(name, path, {s_: counted(path, a.project, s_)[0] for s_ in SCHEDULES}) for name, path in models]
    # Depth: the graph chain of the Llama-3-8B slice with its cache filled to
    # each depth (attention reads it; the rest is unchanged).
    deep_name, deep_path = models[1]
    deep = counted(deep_path, a.project, "graph", DEPTHS)
    by_path = {os.path.basename(path): c for _, path, c in results}
    pj0 = results[0][2]["graph"]["projected"]
    gpu = {"sms": pj0["sms"], "gbs": pj0["bandwidth_gbs"], "achievable": pj0["achievable_bandwidth"]}
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()

    out = [f"Counted on emu at ptxlm {commit}: one token at depth 0 per model and schedule; rates projected for "
           f"{pj0['description']} ({gpu['sms']} SMs, {gpu['gbs']:.0f} GB/s, {100 * gpu['achievable']:.0f}% of it "
           f"achievable, {pj0['clock_ghz']} GHz, {pj0['dram_latency_us']} us DRAM latency), never measured.", "",
           "### Graph and persistent schedules side by side", "",
           "| model | schedule | launches | grid-wide waits per token | emu's all-to-all rounds | counter waits | "
           "warp instr. spinning | unique / MB read | L2 sectors / MB read | weight sector eff. | max regs | spill B | "
           "bytes alone us | work us | work us by binding limit | projected tok/s | of peak BW |",
           "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|"]
    for name, _, cs in results:
        out += [side_row(name, cs[s_]) for s_ in SCHEDULES]
    out += ["", "### Full models, scaled from their two-layer slices", "",
            "Both schedules on the default path (8-bit GEMV inputs).", "",
            "graph-prefetch: the graph schedule with every GEMV prefetching its first weight rows "
            "(--gpu-prefetch, off by default), from the same counts; persistent-prefetch: the persistent schedule "
            "with every GEMV op prefetching them before it waits at its handoff (the same flag), so the "
            "prefetch hides its fill as well. Launch starts: the DRAM-idle prologues and "
            "fills inside the work (engine/projection.h), without prefetches.", "",
            "| model | schedule | ops | launches | all-to-all waits | GB per token | bytes alone us | projected tok/s | "
            "us per token | of it launch + handoff overhead | launch starts us (no prefetch) | "
            "work us by binding limit | of peak BW |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|"]
    for name, slice_name, layers, vocab in SCALED:
        cs = by_path[slice_name + ".gguf"]
        sc = scale_slice(cs["graph"], cs["persistent"], layers, vocab, gpu)
        for s_ in (*SCHEDULES, "graph-prefetch", "persistent-prefetch"):
            r = sc[s_]
            a2a = f"{r['a2a']}" if s_.startswith("persistent") else f"{r['launches']} (launches)"
            out.append(f"| {name} ({layers} layers, vocabulary {vocab}) | {s_} | {r['ops']} | {r['launches']} | {a2a} | "
                       f"{r['bytes'] / 1e9:.2f} | {r['memory_us']:.0f} | {r['tok_s']:.0f} | {r['us']:.0f} | "
                       f"{r['overhead_us']:.0f} | {r['start_us']:.0f} | {bound_text(r['bound'].items())} | "
                       f"{100 * r['share']:.0f}% |")
    out += ["", f"### Llama-3-8B Q4_K_M at depth (graph schedule; {deep_name} scaled, the cache filled by a host copy)",
            "",
            "| depth | GB per token | bytes alone us | projected tok/s | us per token | work us by binding limit | "
            "attention us (split + reduce) | of peak BW |",
            "|--:|--:|--:|--:|--:|---|--:|--:|"]
    name8, _, layers8, vocab8 = SCALED[0]
    for d in DEPTHS:
        c = deep[d]
        sc = scale_slice(c, results[1][2]["persistent"], layers8, vocab8, gpu)["graph"]
        att = sum(k["projected_us"] for k in c["kernels"] if k["kernel"].startswith("attention")) * layers8 / c["n_layer"]
        out.append(f"| {d} | {sc['bytes'] / 1e9:.2f} | {sc['memory_us']:.0f} | {sc['tok_s']:.0f} | {sc['us']:.0f} | "
                   f"{bound_text(sc['bound'].items())} | {att:.0f} | {100 * sc['share']:.0f}% |")
    out += ["", "#### Per kernel at depth 4096", "", kernel_table(deep[DEPTHS[-1]])]
    out += ["", "### Graph schedule: per kernel"]
    for name, _, cs in results:
        out += ["", f"#### {name}", "", kernel_table(cs["graph"])]
    out += ["", "### Persistent schedule: the one kernel", "",
            kernel_table({"kernels": [dict(cs["persistent"]["kernels"][0], kernel=f"{name}: persistent_decoder")
                                      for name, _, cs in results]})]
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
