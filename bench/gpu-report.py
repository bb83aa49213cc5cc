"""One GPU's report: is every kernel right, how long does each take, and how
far is the measured decode rate from the projected one.

Four phases, each a `ptxlm` command whose JSON the report reads:
  selftest    `ptxlm selftest --json`: every kernel of the model's decode
              chain on the device against the CPU (pass/fail per kernel);
  profile     `ptxlm profile --json`: the device's peak and measured read
              bandwidth, and each kernel's measured time per launch and its
              launches per token;
  tg          `ptxlm bench --device cuda --schedule S -p 0 -n N -d DEPTHS`
              for each schedule: measured tokens per second at each depth
              (graph-pdl: the graph schedule with --gpu-pdl, sm_90 only;
              graph-prefetch and persistent-prefetch: with --gpu-prefetch);
  projection  the same bench in counted mode (`--project GPU -n 1`), always
              on emu (PTXLM_EMU_LIBCUDA, else build/emu/lib/libcuda.so.1)
              whatever driver measured: emu's counts projected for GPU
              (graph-pdl: the graph count's projected_pdl; graph-prefetch
              and persistent-prefetch the graph and persistent counts'
              projected_prefetch).
The report sets each measured figure beside its projection (measured /
projected) and writes OUT_DIR/<device>-<commit>.md: a header (device, SMs,
peak and measured read bandwidth, commit, date, model), the selftest
table, the per-kernel table, the tg table and the exact commands. A run on
emu says so in its first line: its times are emu's, not a GPU's.

    bench/gpu-report -m MODEL.gguf [--out-dir docs/gpu] [--project GPU] [-n 128]
                     [--depths 0,1024,4096] [--schedules graph,persistent,graph-pdl,graph-prefetch,persistent-prefetch]
                     [--json] [--no-write] [--save-measured FILE | --measured FILE]

A GPU machine without the time (or the emu build) for the projection runs
the measured phases alone with --save-measured FILE; the report is then
made where emu runs, from that file, with --measured FILE.

--project defaults to the GPU the device's name matches (emu: h100-sxm).
Progress goes to stderr. A failing command exits 1 with one line naming it
and its stderr's tail; bad arguments exit 2 with one line. A kernel outside
its tolerance still gets its report, then exits 1.
"""

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("PTXLM_BUILD_DIR", os.path.join(ROOT, "build"))
SCHEDULES = ("graph", "persistent", "graph-pdl", "graph-prefetch", "persistent-prefetch")
# How each schedule is asked of ptxlm bench, and which count projects it.
SCHEDULE_ARGS = {"graph": ["--schedule", "graph"], "persistent": ["--schedule", "persistent"],
                 "graph-pdl": ["--schedule", "graph", "--gpu-pdl"],
                 "graph-prefetch": ["--schedule", "graph", "--gpu-prefetch"],
                 "persistent-prefetch": ["--schedule", "persistent", "--gpu-prefetch"]}
COUNTED_AS = {"graph": ("graph", "projected"), "persistent": ("persistent", "projected"),
              "graph-pdl": ("graph", "projected_pdl"), "graph-prefetch": ("graph", "projected_prefetch"),
              "persistent-prefetch": ("persistent", "projected_prefetch")}
# engine/projection.cpp's GPU table, by the names `ptxlm bench --project` takes.
GPUS = ("h100-sxm", "h100-pcie", "h200", "a100", "l40s", "rtx4090")
# Device name (as the driver reports it) -> projection: first match wins.
# "NVIDIA H100 80GB HBM3" is the SXM part; PCIe says so in its name.
DEVICE_GPU = ((r"\bemu\b", "h100-sxm"), (r"H200", "h200"), (r"H100.*PCIe", "h100-pcie"), (r"H100", "h100-sxm"),
              (r"A100", "a100"), (r"L40S", "l40s"), (r"RTX 4090", "rtx4090"))


class Failure(Exception):
    """One line for stderr, and the exit code (1: a command failed, 2: bad arguments)."""

    def __init__(self, line, code=1):
        super().__init__(line)
        self.code = code


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise Failure(f"{message} (see --help)", 2)


def log(msg):
    print(f"gpu-report: {msg}", file=sys.stderr, flush=True)


def shown(path):
    """A path as the commands list shows it: relative to the repository root when inside it."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


class Runner:
    """Runs ptxlm commands and records them as they can be re-run from the repository root."""

    def __init__(self, ptxlm):
        self.ptxlm = ptxlm
        self.commands = []

    def json(self, args, env=None, ok_codes=(0,)):
        env_shown = {k: shown(v) for k, v in (env or {}).items()}
        if not env and os.environ.get("PTXLM_LIBCUDA"):
            env_shown = {"PTXLM_LIBCUDA": shown(os.environ["PTXLM_LIBCUDA"])}
        line = shlex.join([f"{k}={v}" for k, v in env_shown.items()] + [shown(self.ptxlm), *map(str, args)])
        self.commands.append(line)
        p = subprocess.run([self.ptxlm, *map(str, args)], env=dict(os.environ, **(env or {})), capture_output=True,
                           text=True)
        if p.returncode not in ok_codes:
            if args[0] == "profile" and p.returncode in (2, 109) and re.search(r"subcommand|not expected|profile",
                                                                              p.stderr):
                raise Failure(f"{shown(self.ptxlm)} lacks `profile` (exit {p.returncode}: {tail(p.stderr)})")
            raise Failure(f"`{line}` failed (exit {p.returncode}): {tail(p.stderr)}")
        try:
            return json.loads(p.stdout), p.returncode
        except json.JSONDecodeError as e:
            raise Failure(f"`{line}` printed no JSON ({e}): {tail(p.stdout or p.stderr)}")


def tail(text, lines=3, chars=400):
    t = " | ".join(ln.strip() for ln in text.strip().splitlines()[-lines:] if ln.strip())
    return (t[-chars:] if len(t) > chars else t) or "(nothing on stderr)"


def field(obj, *keys, what):
    """obj[k1][k2]..., or a Failure naming what lacks it (a JSON shape that changed under us)."""
    for k in keys:
        if not isinstance(obj, (dict, list)) or (isinstance(obj, dict) and k not in obj):
            raise Failure(f"{what}: no '{'.'.join(map(str, keys))}' in its JSON")
        obj = obj[k]
    return obj


def sizes(text, flag):
    try:
        xs = [int(x) for x in text.split(",")]
    except ValueError:
        raise Failure(f"{flag} {text}: not a comma-separated list of integers", 2)
    if not xs or any(x < 0 for x in xs) or len(set(xs)) != len(xs):
        raise Failure(f"{flag} {text}: depths must be distinct and >= 0", 2)
    return xs


def gpu_for(device):
    for pat, gpu in DEVICE_GPU:
        if re.search(pat, device):
            return gpu
    raise Failure(f"no projection matches the device '{device}': pass --project (one of {', '.join(GPUS)})", 2)


def kernel_shape(name):
    """A kernel's name less its split count (`_s<N>`, which follows the device's SMs)."""
    return re.sub(r"_s\d+(?=_|$)", "", name)


def ratio(a, b):
    return a / b if a is not None and b else None


def measure(a, run):
    """The phases that need the device: selftest, profile and tg, as their raw JSON."""
    t0 = time.time()
    st, rc = run.json(["selftest", "-m", a.model, "--json"], ok_codes=(0, 1))
    log(f"selftest ({time.time() - t0:.1f} s)")
    # The chain built for the counted runs' context (max depth + 1 token), so its kernels
    # (named by their shapes) are the ones counted; profile times them at position 0.
    t0 = time.time()
    prof, _ = run.json(["profile", "-m", a.model, "-c", max(a.depths) + 1, "--json"])
    log(f"profile ({time.time() - t0:.1f} s)")
    bench = {}
    for s in a.schedules:
        t0 = time.time()
        bench[s], _ = run.json(["bench", "-m", a.model, "--device", "cuda", *SCHEDULE_ARGS[s], "-p", "0", "-n", a.n,
                                "-d", ",".join(map(str, a.depths)), "-r", "1", "-o", "json"])
        log(f"tg {s} ({time.time() - t0:.1f} s)")
    return {"model": os.path.basename(a.model), "n": a.n, "depths": a.depths, "schedules": a.schedules,
            "selftest": st, "selftest_rc": rc, "profile": prof, "bench": bench, "commands": list(run.commands)}


def load_measured(a, path):
    """A --save-measured file, checked against this run's model and arguments."""
    try:
        with open(path) as f:
            m = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise Failure(f"--measured {path}: {e}", 2)
    if m.get("model") != os.path.basename(a.model):
        raise Failure(f"--measured {path} was measured on {m.get('model')}, not on {os.path.basename(a.model)}", 2)
    for k, mine in (("n", a.n), ("depths", a.depths), ("schedules", a.schedules)):
        if m.get(k) != mine:
            raise Failure(f"--measured {path} has {k} {m.get(k)}, this run asks for {mine}", 2)
    return m


def collect(a, run, m):
    """Every phase's JSON (m: the measured phases), and the rows the tables show."""
    st, rc = m["selftest"], m["selftest_rc"]
    checks = field(st, "kernels", what="ptxlm selftest")
    failed = [k["kernel"] for k in checks if not k.get("pass")]
    log(f"selftest: {len(checks)} kernels, {len(failed)} outside their tolerance"
        f"{' (' + ', '.join(failed) + ')' if failed else ''}")
    if rc == 1 and not failed:
        raise Failure("ptxlm selftest exited 1 with every kernel passing")

    prof = m["profile"]
    device = field(prof, "device", what="ptxlm profile")
    emulated = bool(field(prof, "device_emulated", what="ptxlm profile"))
    read = field(prof, "read", what="ptxlm profile")
    read_gbs, peak = field(read, "gbs", what="ptxlm profile"), prof.get("peak_gbs")
    log(f"profile: {device}{' (emulated)' if emulated else ''}, {prof.get('sm_count')} SMs, read {read_gbs:.1f} GB/s "
        f"of {peak or 0:.1f} peak, {len(prof.get('kernels', []))} kernels, {prof.get('token_us', 0):.1f} us per "
        f"token")
    gpu = a.project or gpu_for(device)

    measured = {}
    for s in a.schedules:
        measured[s] = {field(r, "n_depth", what="ptxlm bench"): r for r in m["bench"][s]}
        log(f"tg {s}: " + ", ".join(f"d{d} {r['avg_ts']:.1f} tok/s" for d, r in measured[s].items()))

    # Counted mode runs only on emu. The graph schedule's count at depth 0 is the per-kernel
    # table's projection, so it runs even when --schedules or --depths leave it out.
    emu = os.environ.get("PTXLM_EMU_LIBCUDA") or os.path.join(BUILD, "emu", "lib", "libcuda.so.1")
    if not os.path.isfile(emu):
        raise Failure(f"no emu driver at {emu} (the projection counts on emu): build it or set PTXLM_EMU_LIBCUDA")
    projected = {}
    for s in sorted({COUNTED_AS[x][0] for x in a.schedules} | {"graph"}, key=SCHEDULES.index):
        t0 = time.time()
        ds = sorted(set(a.depths) | {0}) if s == "graph" else a.depths
        rows, _ = run.json(["bench", "-m", a.model, "--device", "cuda", "--schedule", s, "-p", "0", "-n", "1", "-d",
                            ",".join(map(str, ds)), "-r", "1", "-o", "json", "--project", gpu],
                           env={"PTXLM_LIBCUDA": emu})
        projected[s] = {field(r, "n_depth", what="ptxlm bench --project"): field(r, "counted", what="ptxlm bench --project")
                        for r in rows}
        log(f"projection {s} for {gpu}: " + ", ".join(
            f"d{d} {c['projected']['tokens_per_s']:.0f} tok/s" for d, c in projected[s].items())
            + f" ({time.time() - t0:.1f} s)")

    # Per kernel: the profile's rows, joined with the graph count at depth 0 by the kernel's
    # shape, its name less the split count: grids follow the SM count, so a device with
    # other SMs than the projected GPU (emu, or --project another GPU) names its paged
    # attention by other splits than the count does.
    counted = {}
    for k in field(projected["graph"][0], "kernels", what="ptxlm bench --project"):
        counted.setdefault(kernel_shape(k["kernel"]), []).append(k)
    kernels = []
    for k in field(prof, "kernels", what="ptxlm profile"):
        same = counted.get(kernel_shape(k["kernel"]), [])
        c = same.pop(0) if same else None
        proj = c["projected_us"] / c["launches"] if c and c.get("launches") else None
        kernels.append({"kernel": k["kernel"], "counted_kernel": c["kernel"] if c else None, "launches": k["launches"],
                        "us_mean": k["us_mean"], "us_min": k["us_min"],
                        "counted_launches": c["launches"] if c else None, "projected_us": proj,
                        "measured_over_projected": ratio(k["us_mean"], proj)})
    for c in (c for same in counted.values() for c in same):  # counted but not profiled
        proj = c["projected_us"] / c["launches"] if c.get("launches") else None
        kernels.append({"kernel": c["kernel"], "counted_kernel": c["kernel"], "launches": None, "us_mean": None,
                        "us_min": None, "counted_launches": c.get("launches"), "projected_us": proj,
                        "measured_over_projected": None})
    renamed = [k for k in kernels if k["counted_kernel"] and k["counted_kernel"] != k["kernel"]]
    if renamed:
        log(f"{len(renamed)} kernels counted under another split count ({prof.get('sm_count')} SMs here, "
            f"{gpu}'s in the count): " + ", ".join(f"{k['kernel']} as {k['counted_kernel']}" for k in renamed))

    tg = []
    for s in a.schedules:
        for d in a.depths:
            counted_as, key = COUNTED_AS[s]
            m, c = measured[s].get(d), projected[counted_as].get(d)
            if m is None or c is None:
                raise Failure(f"ptxlm bench gave no {'measured' if m is None else 'counted'} row for {s} at depth {d}")
            p = c[key]
            tg.append({"schedule": s, "depth": d, "tokens_per_s": m["avg_ts"], "projected_tokens_per_s": p["tokens_per_s"],
                       "measured_over_projected": ratio(m["avg_ts"], p["tokens_per_s"]),
                       "bandwidth_gbs": m["bandwidth_gbs"], "bytes_per_token": m["bytes_per_token"],
                       "read_share": ratio(m["bandwidth_gbs"], read_gbs),
                       "projected_us_per_token": p["us_per_token"], "projected_bound_us": p.get("bound_us")})
    first = measured[a.schedules[0]][a.depths[0]]
    return {"device": device, "emulated": emulated, "sm_count": prof.get("sm_count"), "peak_gbs": peak,
            "read": read, "read_over_peak": ratio(read_gbs, peak), "token_us": prof.get("token_us"),
            "project": gpu, "project_description": projected["graph"][0]["projected"].get("description"),
            "model": a.model, "model_arch": first.get("model_arch"), "model_file_type": first.get("model_file_type"),
            "model_size": first.get("model_size"), "n_gen": a.n, "depths": a.depths, "schedules": a.schedules,
            "selftest": checks, "selftest_failed": failed, "kernels": kernels, "tg": tg}


def num(x, fmt=None):
    """x with fmt; without one, 3 significant digits that never turn to an exponent above 1."""
    if x is None:
        return "-"
    if fmt:
        return format(x, fmt)
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def markdown(r, commands):
    out = []
    if r["emulated"]:
        out += [f"> **Emulated**: every time below is emu's (the CPU interpreter of the CUDA driver, "
                f"{r['device']}) and means nothing about a GPU; only the projections are about {r['project']}.", ""]
    read = r["read"]
    out += [f"# GPU report: {r['device']} at {r['commit']}", "",
            "| | |", "|---|---|",
            f"| device | {r['device']}{' (emulated)' if r['emulated'] else ''} |",
            f"| SMs | {r['sm_count']} |",
            f"| peak bandwidth | {num(r['peak_gbs'], '.1f')} GB/s |",
            f"| measured read bandwidth | {num(read.get('gbs'), '.1f')} GB/s ({read.get('bytes', 0) / 1e6:.0f} MB, "
            f"best of {read.get('reps')}: {num(read.get('best_ms'), '.3f')} ms) |",
            f"| measured read / peak | {num(r['read_over_peak'])} |",
            f"| commit | {r['commit']} |", f"| date | {r['date']} |",
            f"| model | {shown(r['model'])} ({r['model_arch']}, {r['model_file_type']}, "
            f"{(r['model_size'] or 0) / 1e6:.1f} MB of weights) |",
            f"| projected for | {r['project']} ({r['project_description']}), from emu's counts |", "",
            f"## Selftest: {len(r['selftest']) - len(r['selftest_failed'])} of {len(r['selftest'])} kernels pass", "",
            "| kernel | op | max error | tolerance | result |", "|---|---|---:|---:|---|"]
    out += [f"| {k['kernel']} | {k['op']} | {k['max_error']:.3g} | {k['tolerance']:.3g} | "
            f"{'pass' if k['pass'] else '**FAIL**'} |" for k in r["selftest"]]
    out += ["", "## Kernels", "",
            f"One token at position 0, launched op by op: measured by `ptxlm profile` with an event before each "
            f"launch ({num(r['token_us'], '.1f')} us from the first event to the last; an op's time includes any "
            f"wait for the host's next launch), projected per launch from emu's count at depth 0 for "
            f"{r['project']}.", "",
            "| kernel | launches / token | measured us / launch (mean) | min | projected us / launch "
            "| measured / projected |", "|---|---:|---:|---:|---:|---:|"]
    out += [f"| {k['kernel']} | {k['launches'] if k['launches'] is not None else '-'} | {num(k['us_mean'])} | "
            f"{num(k['us_min'])} | {num(k['projected_us'])} | {num(k['measured_over_projected'])} |"
            for k in r["kernels"]]
    renamed = [k for k in r["kernels"] if k["counted_kernel"] and k["counted_kernel"] != k["kernel"]]
    if renamed:
        out += ["", f"Counted under another split count ({r['sm_count']} SMs here, {r['project']}'s in the count; "
                "grids follow the SM count): " + ", ".join(f"{k['kernel']} as {k['counted_kernel']}" for k in renamed)
                + "."]
    out += ["", f"## Token generation (tg{r['n_gen']})", "",
            "Share of measured read bandwidth: the bytes a token reads (weights + KV cache) times the measured rate, over the measured "
            "read bandwidth above.", "",
            "| schedule | depth | measured tok/s | projected tok/s | measured / projected | read GB/s "
            "| share of measured read bandwidth |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    out += [f"| {t['schedule']} | {t['depth']} | {num(t['tokens_per_s'])} | {num(t['projected_tokens_per_s'])} | "
            f"{num(t['measured_over_projected'])} | {num(t['bandwidth_gbs'])} | {num(t['read_share'])} |"
            for t in r["tg"]]
    out += ["", "## Commands", "", "From the repository root, in this order:", "", "```"] + commands + ["```", ""]
    return "\n".join(out)


def main():
    ap = Parser(prog="bench/gpu-report", description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF model")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "docs", "gpu"), help="where the report goes (default docs/gpu)")
    ap.add_argument("--project", choices=GPUS, help="the GPU to project for (default: the one the device's name matches)")
    ap.add_argument("-n", type=int, default=128, help="tokens generated per tg test (default 128)")
    ap.add_argument("--depths", default="0,1024,4096", help="KV depths of the tg tests (default 0,1024,4096)")
    ap.add_argument("--schedules", default=",".join(SCHEDULES),
                    help="of graph, persistent, graph-pdl (the graph schedule with --gpu-pdl: sm_90 only), "
                         "graph-prefetch and persistent-prefetch (with --gpu-prefetch); default all five")
    ap.add_argument("--json", action="store_true", help="everything as one JSON object on stdout")
    ap.add_argument("--no-write", action="store_true", help="write no Markdown file")
    ap.add_argument("--save-measured", metavar="FILE",
                    help="run only the phases that need the device (selftest, profile, tg), write their JSON to FILE "
                         "and stop: for a GPU machine that lacks emu or time for the projection")
    ap.add_argument("--measured", metavar="FILE",
                    help="take the measured phases from a --save-measured FILE (same model name, -n, --depths and "
                         "--schedules) and run only the projection, here on emu")
    try:
        a = ap.parse_args()
        a.depths = sizes(a.depths, "--depths")
        a.schedules = a.schedules.split(",")
        if not a.schedules or any(s not in SCHEDULES for s in a.schedules) or len(set(a.schedules)) != len(a.schedules):
            raise Failure(f"--schedules {','.join(a.schedules)}: a list of distinct "
                          + ", ".join(SCHEDULES), 2)
        if a.measured and a.save_measured:
            raise Failure("--measured and --save-measured exclude each other", 2)
        if a.n < 1:
            raise Failure(f"-n {a.n}: generate at least 1 token", 2)
        if not os.path.isfile(a.model):
            raise Failure(f"-m {a.model}: no such file", 2)
        ptxlm = os.environ.get("PTXLM_BIN") or os.path.join(BUILD, "tools", "ptxlm", "ptxlm")
        if not os.access(ptxlm, os.X_OK):
            raise Failure(f"no ptxlm binary at {ptxlm}: build it (./run.sh build) or set PTXLM_BIN", 2)
        run = Runner(ptxlm)
        if a.measured:
            m = load_measured(a, a.measured)
            run.commands += m["commands"]
        else:
            m = measure(a, run)
        if a.save_measured:
            with open(a.save_measured, "w") as f:
                json.dump(m, f, indent=1)
            log(f"wrote the measured phases to {a.save_measured}")
            return 0
        r = collect(a, run, m)
    except Failure as e:
        print(f"gpu-report: {e}", file=sys.stderr)
        return e.code
    except (KeyError, TypeError, ValueError) as e:  # a JSON shape the report does not know
        print(f"gpu-report: unexpected JSON from ptxlm: {type(e).__name__} {e}", file=sys.stderr)
        return 1
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    r["commit"] = git.stdout.strip() or "unknown"
    r["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    r["commands"] = run.commands
    r["report"] = None
    if not a.no_write:
        os.makedirs(a.out_dir, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", r["device"]).strip("-.") or "device"
        r["report"] = os.path.join(a.out_dir, f"{name}-{r['commit']}.md")
        with open(r["report"], "w") as f:
            f.write(markdown(r, run.commands))
        log(f"wrote {r['report']}")
    if a.json:
        print(json.dumps(r, indent=1))
    if r["selftest_failed"]:
        log(f"FAIL: {len(r['selftest_failed'])} kernels outside their tolerance: {', '.join(r['selftest_failed'])}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
