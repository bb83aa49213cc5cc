"""`ptxlm` on the GPU path with emu as the driver (PTXLM_LIBCUDA), as a user
would drive it: `run --device cuda` prints the same greedy text as `--device
cpu` on SmolLM2 (8 tokens) and on a synthetic gemma3 model (past its sliding
window); `--device auto` picks the GPU and says so; `selftest` passes every
kernel `ptx` writes; `bench` on the GPU path
reports the device, the schedule and that emu's times mean nothing, and its
counted mode emu's per-token counts with a projection; the
`chain`, `graph` and `persistent` schedules give the same tokens; `--schedule` on the CPU
is refused;
without a driver, `--device cuda` fails with one clear message and `auto`
falls back to the CPU saying why.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_synth as cs  # noqa: E402
from checks import check, finish  # noqa: E402

MODELS = Path(os.environ.get("PTXLM_MODELS_DIR", "models"))
PTXLM = os.environ.get("PTXLM_BIN", "build/tools/ptxlm/ptxlm")
EMU = os.environ["PTXLM_EMU_LIBCUDA"]
SMOL = str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf")


def ptxlm(*args, emu=True, timeout=900, env=None):
    env = dict(os.environ, **(env or {}))
    env.pop("PTXLM_LIBCUDA", None)
    if emu:
        env["PTXLM_LIBCUDA"] = EMU
    return subprocess.run([PTXLM, *args], capture_output=True, text=True, timeout=timeout, env=env)


def greedy(model, prompt, n, device, ctx, *path):
    # Each device on its reference arithmetic by default here (--gpu-path
    # reference, --cpu-path reference): what the GPU path is checked against.
    path = path or (("--cpu-path", "reference") if device == "cpu" else ("--gpu-path", "reference"))
    p = ptxlm("run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "-c", str(ctx), "--json",
              "--device", device, "-t", "2", *path)
    if not check(p.returncode == 0, f"run --device {device} {path} on {model}: {p.stderr[-400:]}"):
        return None, p.stderr
    return json.loads(p.stdout), p.stderr


def main():
    with tempfile.TemporaryDirectory() as d:
        gemma = str(Path(d) / "gemma3.gguf")
        subprocess.run([str(cs.BIN), "--arch", "gemma3", "--size", "tiny", "--out", gemma], check=True, capture_output=True)
        for model, prompt, n in ((SMOL, "The capital of France is", 8), (gemma, "Once upon a time", 24)):
            gpu, err = greedy(model, prompt, n, "cuda", 64)
            cpu, _ = greedy(model, prompt, n, "cpu", 64)
            if gpu and cpu:
                print(f"{Path(model).name}: cuda {gpu['text']!r}, cpu {cpu['text']!r}")
                check(gpu["tokens"] == cpu["tokens"], f"{model}: GPU tokens {gpu['tokens']} != CPU tokens {cpu['tokens']}")
                check("CUDA" in err and "graph schedule" in err and "f32 GEMV inputs" in err,
                      f"the GPU run does not say what runs: {err[-300:]}")
            # The default path (8-bit GEMV inputs) against the CPU quantized
            # path's scalar kernels: the same tokens, on SmolLM2 up to its
            # sixth, a near tie where the CPU's own scalar and AVX2 paths pick
            # different tokens (test_cuda_ops checks every op sharply).
            q, qerr = greedy(model, prompt, n, "cuda", 64, "--gpu-path", "quantized")
            qc, _ = greedy(model, prompt, n, "cpu", 64, "--cpu-isa", "scalar")
            if q and qc:
                k = 5 if model == SMOL else n
                check(q["tokens"][:k] == qc["tokens"][:k] and "8-bit GEMV inputs" in qerr,
                      f"{model}: default GPU tokens {q['tokens']} vs the CPU quantized path's {qc['tokens']}")
        chain = ptxlm("run", "-m", gemma, "-p", "Once upon a time", "-n", "24", "--temp", "0", "-c", "64", "--json",
                      "--device", "cuda", "--schedule", "chain", "--gpu-path", "reference")
        if check(chain.returncode == 0 and "chain schedule" in chain.stderr, f"--schedule chain: {chain.stderr[-300:]}"):
            check(json.loads(chain.stdout)["tokens"] == gpu["tokens"], "the chain and graph schedules differ")
        # The persistent decoder streams the same greedy tokens as the graph
        # schedule on the default path (one launch runs them all).
        pers = ptxlm("run", "-m", gemma, "-p", "Once upon a time", "-n", "24", "--temp", "0", "-c", "64", "--json",
                     "--device", "cuda", "--schedule", "persistent")
        if check(pers.returncode == 0 and "persistent schedule" in pers.stderr and "8-bit GEMV inputs" in pers.stderr,
                 f"--schedule persistent: {pers.stderr[-300:]}") and q:
            check(json.loads(pers.stdout)["tokens"] == q["tokens"], "the persistent and graph schedules differ")
        # A device whose SMs cannot hold one block of the persistent kernel (a
        # quarter of the registers): a clear error, never a hang.
        small = ptxlm("run", "-m", gemma, "-p", "Hi", "-n", "2", "--temp", "0", "-c", "64", "--device", "cuda",
                      "--schedule", "persistent", env={"PTXLM_EMU_REGS_PER_SM": "16384"}, timeout=120)
        check(small.returncode == 2 and "does not fit on an SM" in small.stderr and "registers per thread" in small.stderr
              and "--schedule graph" in small.stderr and small.stderr.count("\n") <= 3,
              f"persistent decoder on a small SM: {small.returncode} {small.stderr[-400:]!r}")
        p = ptxlm("run", "-m", gemma, "-p", "Hi", "--device", "cpu", "--schedule", "graph")
        check(p.returncode == 2 and "--schedule" in p.stderr, f"--schedule on the CPU: {p.stderr[-300:]}")
        auto = ptxlm("run", "-m", gemma, "-p", "Hi", "-n", "2", "--temp", "0", "-c", "32")
        check(auto.returncode == 0 and "CUDA" in auto.stderr, f"--device auto with a driver: {auto.stderr[-300:]}")

        b = ptxlm("bench", "-m", gemma, "--device", "cuda", "-p", "8", "-n", "2", "-r", "1", "-o", "json")
        if check(b.returncode == 0, f"bench on the GPU path: {b.stderr[-400:]}"):
            # Under paged KV (the default) emu counts the prompt as one batch
            # step of its 8 tokens rather than timing it; tg is timed.
            rows = json.loads(b.stdout)
            counted = [r for r in rows if "counted_step" in r]
            check([r["test"] for r in counted] == ["pp8"] and counted[0]["counted_step"]["prompt"]
                  and counted[0]["counted_step"]["batch"] == 8, f"bench's counted prompt step {counted}")
            rows = [r for r in rows if "counted_step" not in r]
            check([r["test"] for r in rows] == ["tg2"], f"bench tests {rows}")
            for r in rows:
                check(r["device"] == "cuda" and "emu" in r["device_name"] and r["schedule"] == "graph" and r["emulated"],
                      f"bench row device fields: {r}")
                # emu reports H100 SXM5's memory: 2 x 2619 MHz x 5120 bits.
                check(r["n_tokens"] == r["n_prompt"] + r["n_gen"] and abs(r["peak_gbs"] - 3352.3) < 0.1
                      and r["peak_source"] == "memory clock x bus width", f"bench row: {r}")
            check("say nothing about a GPU" in b.stderr, "bench does not say emu's times mean nothing")
        # Counted mode: emu's per-token counts and a projection, labelled as such.
        b = ptxlm("bench", "-m", gemma, "--device", "cuda", "-p", "0", "-n", "1", "-r", "1", "-o", "json", "--project", "a100")
        if check(b.returncode == 0, f"bench --project: {b.stderr[-400:]}"):
            c = json.loads(b.stdout)[0]["counted"]
            kernels = int(b.stderr.split(" kernels per token")[0].rsplit(" ", 1)[-1])
            pj = c["projected"]
            check(c["launches"] == kernels, f"counted launches {c['launches']} vs {kernels} kernels per token")
            check(0.95 <= c["unique_over_weights"] <= 1.5, f"unique bytes / token bytes {c['unique_over_weights']}")
            check(c["requested_over_weights"] >= c["unique_over_weights"] and 0 < c["sector_efficiency"] <= 1, f"counted {c}")
            check(pj["gpu"] == "a100" and "projected" in pj["label"] and pj["schedule"] == "graph", f"projection {pj}")
            check(abs(pj["tokens_per_s"] * pj["us_per_token"] - 1e6) < 1e-3 * 1e6 and pj["bandwidth_share"] <= 0.9,
                  f"projection arithmetic {pj}")
            # Each kernel's time is its binding limit; the bytes alone are one of
            # them, so the work is at least the memory time; the work by binding
            # limit sums to it and matches the rows.
            check(abs(pj["us_per_token"] - pj["launch_us"] - pj["work_us"]) < 1e-6 * pj["us_per_token"]
                  and pj["work_us"] >= pj["memory_us"] > 0, f"{pj}")
            check(abs(sum(us for _, us in pj["bound_us"]) - pj["work_us"]) < 1e-6 * pj["work_us"]
                  and abs(sum(k["projected_us"] for k in c["kernels"]) - pj["work_us"]) < 1e-6 * pj["work_us"],
                  f"work by limit {pj['bound_us']}")
            check(abs(pj["launch_us"] - 1.3 * kernels) < 1e-6 * kernels, f"graph launch overhead {pj['launch_us']}")
            # The same counts with the GEMVs prefetching (--gpu-prefetch): their
            # prologues hidden, the rest the same.
            pf = c["projected_prefetch"]
            check(pf["start_us"] < pj["start_us"] and pf["tokens_per_s"] > pj["tokens_per_s"]
                  and pf["memory_us"] == pj["memory_us"] and "--gpu-prefetch" in pf["label"],
                  f"projected_prefetch {pf} vs {pj}")
            # Per kernel: the rows account for every launch and byte; the weight
            # loads of every GEMV touch only sectors they use (the device
            # layout's 32-byte planes); ptxas (present here) gives registers and
            # no spills; an A100 (2048 threads, 164 KiB) fits what is launched.
            ks = c["kernels"]
            check(sum(k["launches"] for k in ks) == c["launches"] and len({k["kernel"] for k in ks}) == len(ks),
                  f"kernel rows vs launches: {[(k['kernel'], k['launches']) for k in ks]}")
            check(sum(k["unique_bytes"] for k in ks) == c["unique_bytes"]
                  and sum(k["weight_bytes"] for k in ks) == c["weight_bytes"], "kernel rows vs totals")
            check(c["registers_from"] == "ptxas sm_90", f"registers from {c['registers_from']}")
            for k in ks:
                check(k["registers"] and k["spill_bytes"] == 0 and k["blocks_per_sm"] >= 1
                      and 1 <= k["resident_blocks_per_sm"] <= k["blocks_per_sm"], f"kernel row {k}")
                # The 8-bit-input GEMVs load each lane's 32 bytes of quants as
                # two 16-byte halves, so each load instruction uses half of
                # every sector it touches (0.47-0.53 here): the L2 sees each
                # weight sector twice (docs/efficiency.md). On the same model
                # the f32-input kernels use 80-88% (a 256-wide row is one
                # block, so its header costs a sector).
                if k["kernel"].startswith("gemv"):
                    check(k["part"] in ("layer", "head") and k["weight_sector_efficiency"] >= 0.45
                          and k["in_flight_bytes_per_sm"] > 0, f"GEMV row {k}")
                    # emu's instruction classes account for every instruction;
                    # the GEMVs quantize their input (cvt), multiply with dp4a,
                    # and wait on their loads, one round trip deep (warps
                    # without a row on this small model may not load at all).
                    by = k["instructions_by_class"]
                    check(sum(by.values()) == k["warp_instructions"] and by["dp4a"] > 0 and by["ld_global"] > 0
                          and k["load_waits"] >= k["blocks"] * k["launches"]
                          and k["dependent_load_chain"] >= 1 and k["in_flight_bytes_per_warp"] > 0
                          and k["instructions_per_weight_byte"] > 0, f"GEMV work counts {k}")
                # The DRAM term carries the launch's start (its prologue and fill).
                t = k["terms_us"]
                bound = max([t["dram"] + t["start"]] + [v for n, v in t.items() if n not in ("dram", "start", "prologue")])
                check(k["bound_by"] in ("dram", "latency", "issue", "shared", "fp32", "int", "cvt", "sfu", "shfl", "tensor")
                      and 0 <= t["prologue"] and 0 <= t["start"] <= t["prologue"] + 0.7 + 1e-9
                      and (t["start"] > 0) == (k["load_waits"] > 0)
                      and abs(k["projected_us"] - k["launches"] * bound) < 1e-6 * k["projected_us"] + 1e-12,
                      f"kernel limits {k['kernel']}: {k['terms_us']} {k['bound_by']}")
            check(0.45 <= c["sector_efficiency"] <= 1, f"weight loads' sector efficiency {c['sector_efficiency']}")
            # Shared-memory wavefronts (emu's bank model): per kernel, never
            # below the ideal, the ratio their quotient (null with no shared
            # access); the per-token totals are the rows' sums.
            for w in [*ks, c]:
                a, i, r = w["shared_wavefronts"], w["shared_ideal_wavefronts"], w["shared_wavefront_ratio"]
                check(0 <= i <= a and (r is None if i == 0 else abs(r - a / i) <= 1e-9 * r) and (i > 0 or a == 0),
                      f"shared wavefronts {a} / ideal {i} / ratio {r} in {w.get('kernel', 'the totals')}")
            check(sum(k["shared_wavefronts"] for k in ks) == c["shared_wavefronts"]
                  and sum(k["shared_ideal_wavefronts"] for k in ks) == c["shared_ideal_wavefronts"],
                  "kernel rows' shared wavefronts vs totals")
            # The 8-bit-input GEMVs stage their input free of bank conflicts:
            # at most 1.1 x the ideal wavefronts (the f32-input kernels cost
            # 1.6-4x on this model, 2.8-6.4x on the real ones).
            gemv_ratios = [k["shared_wavefront_ratio"] for k in ks if k["kernel"].startswith("gemv")]
            check(gemv_ratios and all(r is not None and r <= 1.1 for r in gemv_ratios),
                  f"GEMV shared wavefront ratios {gemv_ratios}")
            check(c["n_vocab"] > 0 and c["n_layer"] > 0 and sum(k["part"] == "head" for k in ks) == 1, "counted model fields")
        # Counted mode at depth 40 on both KV layouts: paged (the default) has
        # the paged pair in place of each layer's attention (gemma3's window
        # layers a shape of their own), --gpu-contiguous-kv one attention
        # kernel per layer; layer kernels either way, every launch accounted for.
        for layout in ([], ["--gpu-contiguous-kv"]):
            b = ptxlm("bench", "-m", gemma, "--device", "cuda", *layout, "-p", "0", "-n", "1", "-d", "40", "-r", "1",
                      "-o", "json", "--project", "a100")
            if not check(b.returncode == 0, f"bench {layout} --project: {b.stderr[-400:]}"):
                continue
            c = json.loads(b.stdout)[0]["counted"]
            ks = c["kernels"]
            kernels = int(b.stderr.split(" kernels per token")[0].rsplit(" ", 1)[-1])
            paged = [k for k in ks if k["kernel"].startswith("paged_")]
            attention = [k for k in ks if k["kernel"].startswith("attention_")]
            rows = [(k["kernel"], k["part"], k["launches"]) for k in ks]
            check(c["launches"] == kernels == sum(k["launches"] for k in ks), f"{layout} counted rows: {rows}")
            if layout:
                check(not paged and sum(k["launches"] for k in attention) == c["n_layer"]
                      and all(k["part"] == "layer" for k in attention), f"contiguous counted rows: {rows}")
            else:
                check(not attention and {k["kernel"].split("_")[1] for k in paged} == {"rope", "attention"}
                      and all(k["part"] == "layer" and k["registers"] and k["spill_bytes"] == 0 for k in paged)
                      and sum(k["launches"] for k in paged) == 2 * c["n_layer"], f"paged counted rows: {rows}")
        # The persistent decoder with its GEMV ops prefetching before their
        # handoff waits: emu counts exactly the bytes the GEMVs' plans ask for
        # (kernels::gemv_prefetch_bytes), and the projection hides part of the
        # ops' starts with them; the other way, from the same counts, is the
        # schedule without prefetches (same bytes, longer starts).
        b = ptxlm("bench", "-m", gemma, "--device", "cuda", "--schedule", "persistent", "--gpu-prefetch", "-p", "0",
                  "-n", "1", "-r", "1", "-o", "json", "--project", "a100")
        if check(b.returncode == 0 and "before waiting for their inputs" in b.stderr,
                 f"bench --schedule persistent --gpu-prefetch --project: {b.stderr[-400:]}"):
            c = json.loads(b.stdout)[0]["counted"]
            pj, other = c["projected"], c["projected_prefetch"]
            check(c["prefetch_bytes"] == c["prefetch_bytes_planned"] > 0,
                  f"persistent prefetch bytes {c['prefetch_bytes']} vs planned {c['prefetch_bytes_planned']}")
            check("--gpu-prefetch" in pj["label"] and "without the weight prefetch" in other["label"]
                  and pj["start_us"] < other["start_us"] and pj["tokens_per_s"] > other["tokens_per_s"]
                  and pj["memory_us"] == other["memory_us"] and c["projected_pdl"] is None,
                  f"persistent prefetch projections {pj} vs {other}")
        for args, needle in ((["--device", "cuda", "--project", "h100"], "--project h100"),
                             (["--device", "cpu", "--project", "a100"], "counted mode needs emu"),
                             (["--device", "cpu", "--gpu-pdl"], "--gpu-pdl applies to the GPU path"),
                             (["--device", "cuda", "--schedule", "persistent", "--gpu-pdl"], "--gpu-pdl: the persistent"),
                             (["--device", "cpu", "--gpu-prefetch"], "--gpu-prefetch applies to the GPU path")):
            b = ptxlm("bench", "-m", gemma, "-p", "0", "-n", "1", "-r", "1", *args)
            check(b.returncode == 2 and needle in b.stderr, f"bench {args}: {b.returncode} {b.stderr[-300:]!r}")

        # selftest: every kernel of the chain against the CPU (the quantized
        # path's arithmetic for the 8-bit-input GEMVs), all within tolerance;
        # one row per kernel `ptxlm ptx` writes (for an H100 SXM's 132 SMs,
        # its default: emu is given as many, since the paged attention's
        # splits, and so its name, follow the SM count).
        for model in (SMOL, gemma):
            st = ptxlm("selftest", "-m", model, "--json", env={"PTXLM_EMU_SMS": "132"})
            px = ptxlm("ptx", "-m", model, "--out", str(Path(d) / "ptx" / Path(model).stem), "-c", "256", emu=False)
            if check(st.returncode == 0 and px.returncode == 0, f"selftest/ptx on {model}: {st.stderr[-300:]} {px.stderr[-300:]}"):
                rows = json.loads(st.stdout)["kernels"]
                files = os.listdir(Path(d) / "ptx" / Path(model).stem)
                check(all(r["pass"] and r["max_error"] <= r["tolerance"] for r in rows), f"selftest failures: {rows}")
                check(sorted(r["kernel"] + ".ptx" for r in rows) == sorted(files), f"selftest kernels {rows} vs ptx files {files}")
        st = ptxlm("selftest", "-m", gemma, "--gpu-path", "reference", "--json")
        if check(st.returncode == 0, f"selftest --gpu-path reference: {st.stderr[-300:]}"):
            j = json.loads(st.stdout)
            gemvs = [r["kernel"] for r in j["kernels"] if r["kernel"].startswith("gemv")]
            check(j["gpu_path"] == "reference" and gemvs and not any("_q8_" in g for g in gemvs)
                  and all(r["pass"] for r in j["kernels"]), f"selftest --gpu-path reference: {j}")
        p = ptxlm("run", "-m", gemma, "-p", "Hi", "--device", "cpu", "--gpu-path", "reference")
        check(p.returncode == 2 and "--gpu-path" in p.stderr, f"--gpu-path on the CPU: {p.stderr[-300:]}")
        # profile: the streaming read and one token's kernels timed with
        # events (emu's times, labelled so); a row per distinct kernel whose
        # launches add up to the chain's.
        pr = ptxlm("profile", "-m", gemma, "-r", "2", "--json")
        if check(pr.returncode == 0 and "say nothing about a GPU" in pr.stderr, f"profile: {pr.stderr[-300:]}"):
            j = json.loads(pr.stdout)
            ks = j["kernels"]
            check(j["device_emulated"] and j["read"]["bytes"] == 4 << 20 and j["read"]["gbs"] > 0
                  and j["gpu_path"] == "quantized" and len({k["kernel"] for k in ks}) == len(ks)
                  and all(0 < k["us_min"] <= k["us_mean"] for k in ks)
                  and abs(sum(k["us_mean"] * k["launches"] for k in ks) - j["token_us"]) <= 1e-6 * j["token_us"],
                  f"profile JSON: {j}")
        pr = ptxlm("profile", "-m", gemma, "--bytes", "100")
        check(pr.returncode == 2 and "--bytes 100" in pr.stderr, f"profile --bytes 100: {pr.returncode} {pr.stderr[-300:]!r}")
        p = ptxlm("selftest", "-m", gemma, emu=False)
        check(p.returncode == 2 and "no CUDA device found" in p.stderr, f"selftest without a driver: {p.stderr!r}")

        # No driver at all.
        p = ptxlm("run", "-m", gemma, "-p", "Hi", "-n", "2", "--device", "cuda", emu=False)
        check(p.returncode == 2 and "no CUDA device found" in p.stderr, f"--device cuda without a driver: {p.stderr!r}")
        p = ptxlm("run", "-m", gemma, "-p", "Hi", "-n", "2", "--temp", "0", emu=False)
        check(p.returncode == 0 and "no CUDA device: using the CPU" in p.stderr, f"auto without a driver: {p.stderr!r}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
