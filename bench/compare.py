"""bench/compare: ptxlm against llama.cpp's llama-bench on one model, one
machine, one thread count, in one run.

Each test (ppN / tgN at depth D) runs as its own process for both engines, one
repetition each, and the two alternate for --rounds rounds (the order flips
every round), so machine noise hits both alike. Per test: mean ± sample
standard deviation of each engine's tokens/s over the rounds, the ratio of
the means with the standard deviation of the per-round ratios, and the peak
resident memory (VmHWM) of each engine's process for that test: ptxlm reports
its own (its memory-copy probe runs in a child process that must not count);
llama-bench's comes from wait4's rusage (it starts no children).

    bench/compare -m MODEL [-p 512] [-n 128] [-d 0] [-t THREADS] [--rounds 5]
                  [-o md|json] [--plot FILE.png]
"""
import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_sizes(flag, text):
    """The list and range forms ptxlm bench and llama-bench accept:
    "512", "128,256", "0-1024+256", "64-512*2"."""
    out = []
    for item in text.split(","):
        try:
            if "-" not in item:
                out.append(int(item))
                continue
            first, rest = item.split("-", 1)
            op = "*" if "*" in rest else "+" if "+" in rest else None
            last, step = rest.split(op, 1) if op else (rest, "1")
            first, last, step = int(first), int(last), int(step)
        except ValueError:
            raise SystemExit(f"bench/compare: {flag} '{text}': '{item}' is not a size or a range")
        if first < 0 or last < first or (op == "*" and (first == 0 or step < 2)) or (op != "*" and step < 1):
            raise SystemExit(f"bench/compare: {flag} '{text}': '{item}' is not a usable range")
        v = first
        while v <= last:
            out.append(v)
            v = v * step if op == "*" else v + step
    if any(v < 0 for v in out):
        raise SystemExit(f"bench/compare: {flag} '{text}': sizes are non-negative")
    return out


def mean_sd(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def run_one(cmd, log):
    """Runs cmd, returns (stdout, exit code, peak RSS in bytes from rusage)."""
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=log)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return out.read().decode("utf-8", "replace"), p.returncode, ru.ru_maxrss * 1024


def one_row(rows, what, test):
    if not isinstance(rows, list) or len(rows) != 1:
        raise SystemExit(f"bench/compare: {what} gave {len(rows) if isinstance(rows, list) else 'no'} rows for {test}; expected 1")
    return rows[0]


def git_commit():
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "") if rev else "unknown"
    except OSError:
        return "unknown"


def test_name(t):
    name = f"pp{t[0]}" if t[0] else f"tg{t[1]}"
    return name + (f" @ d{t[2]}" if t[2] else "")


def main():
    ap = argparse.ArgumentParser(prog="bench/compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF model file")
    ap.add_argument("-p", "--n-prompt", default="512", help="prompt sizes (lists and ranges as ptxlm bench takes them)")
    ap.add_argument("-n", "--n-gen", default="128", help="generation sizes")
    ap.add_argument("-d", "--n-depth", default="0", help="KV depths")
    ap.add_argument("-t", "--threads", type=int, default=len(os.sched_getaffinity(0)), help="threads for both (default: all cores)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5; claims need at least 5)")
    ap.add_argument("-o", "--output", choices=["md", "json"], default="md")
    ap.add_argument("--plot", metavar="FILE.png", help="draw tok/s against KV depth for both engines")
    ap.add_argument("--ptxlm", default=str(ROOT / "build/tools/ptxlm/ptxlm"), help="the ptxlm executable")
    ap.add_argument("--llama-bench", default=str(ROOT / "build-peer/llama.cpp/bin/llama-bench"),
                    help="llama-bench (a command line; default: the one bench/setup-peer builds)")
    ap.add_argument("--device", default="cpu", help="ptxlm's --device (default cpu)")
    a = ap.parse_args()

    if not Path(a.model).is_file():
        raise SystemExit(f"bench/compare: -m {a.model}: no such file")
    if a.rounds < 1 or a.threads < 1:
        raise SystemExit("bench/compare: --rounds and -t must be at least 1")
    peer = shlex.split(a.llama_bench)
    if not peer or not (Path(peer[0]).exists() or len(peer) > 1):
        raise SystemExit(f"bench/compare: no llama-bench at {a.llama_bench}: run bench/setup-peer (or pass --llama-bench)")
    if not os.access(a.ptxlm, os.X_OK):
        raise SystemExit(f"bench/compare: no ptxlm at {a.ptxlm}: build it first (./run.sh test builds it)")
    if a.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise SystemExit("bench/compare: --plot needs matplotlib (in the project's .venv: run ./run.sh once)")

    tests = []
    for d in parse_sizes("-d", a.n_depth):
        tests += [(p, 0, d) for p in parse_sizes("-p", a.n_prompt) if p]
        tests += [(0, n, d) for n in parse_sizes("-n", a.n_gen) if n]
    if not tests:
        raise SystemExit("bench/compare: every -p and -n size is 0: nothing to measure")

    results = {t: {"ptxlm": [], "llama.cpp": [], "ptxlm_rss": [], "llama.cpp_rss": []} for t in tests}
    order, info = [], {}
    log = open(tempfile.mkstemp(prefix="bench-compare-", suffix=".log")[1], "w")
    started = time.monotonic()
    for r in range(a.rounds):
        for t in tests:
            sizes = ["-p", str(t[0]), "-n", str(t[1]), "-d", str(t[2]), "-t", str(a.threads), "-r", "1", "-o", "json"]
            engines = [("ptxlm", [a.ptxlm, "bench", "-m", a.model, "--device", a.device] + sizes),
                       ("llama.cpp", peer + ["-m", a.model] + sizes)]
            if r % 2:
                engines.reverse()
            rates = {}
            for name, cmd in engines:
                log.write(f"$ {shlex.join(cmd)}\n")
                log.flush()
                out, rc, rss = run_one(cmd, log)
                if rc != 0:
                    raise SystemExit(f"bench/compare: {name} failed on {test_name(t)} (exit {rc}); its output is in {log.name}")
                try:
                    row = one_row(json.loads(out), name, test_name(t))
                except json.JSONDecodeError:
                    raise SystemExit(f"bench/compare: {name} printed no JSON for {test_name(t)}; see {log.name}")
                if (row.get("n_prompt"), row.get("n_gen"), row.get("n_depth")) != t:
                    raise SystemExit(f"bench/compare: {name} ran a different test than {test_name(t)}: {row.get('n_prompt')}, {row.get('n_gen')}, {row.get('n_depth')}")
                if name == "ptxlm":
                    if row["n_tokens"] != t[0] + t[1]:
                        raise SystemExit(f"bench/compare: ptxlm counted {row['n_tokens']} tokens on {test_name(t)}")
                    rss = row["peak_rss_bytes"]
                    info.setdefault("device", f"{row['device_name']} ({row['device_units']} cores)" if row["device"] == "cpu" else row["device_name"])
                    info.setdefault("model_types", row["model_types"])
                    info.setdefault("model_size", row["model_size"])
                else:
                    info.setdefault("llama_cpp_commit", row.get("build_commit", "unknown"))
                    info.setdefault("llama_cpp_model_type", row.get("model_type", ""))
                results[t][name].append(float(row["avg_ts"]))
                results[t][name + "_rss"].append(int(rss))
                rates[name] = row["avg_ts"]
                order.append({"engine": name, "test": test_name(t), "round": r + 1})
            print(f"compare: round {r + 1}/{a.rounds} {test_name(t):<14} ptxlm {rates['ptxlm']:9.2f} tok/s  "
                  f"llama.cpp {rates['llama.cpp']:9.2f} tok/s  ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    log.close()
    os.unlink(log.name)

    rows = []
    for t in tests:
        ours, theirs = results[t]["ptxlm"], results[t]["llama.cpp"]
        (om, osd), (pm, psd) = mean_sd(ours), mean_sd(theirs)
        _, rsd = mean_sd([x / y for x, y in zip(ours, theirs)])
        rows.append({"test": test_name(t), "n_prompt": t[0], "n_gen": t[1], "n_depth": t[2],
                     "ptxlm": {"samples_ts": ours, "avg_ts": om, "stddev_ts": osd, "vmhwm_bytes": max(results[t]["ptxlm_rss"])},
                     "llama_cpp": {"samples_ts": theirs, "avg_ts": pm, "stddev_ts": psd, "vmhwm_bytes": max(results[t]["llama.cpp_rss"])},
                     "ratio": om / pm, "ratio_stddev": rsd})
    report = {"model": a.model, "device": info["device"], "threads": a.threads, "rounds": a.rounds,
              "ptxlm_device": a.device, "ptxlm_commit": git_commit(), "llama_cpp_commit": info["llama_cpp_commit"],
              "llama_cpp_model_type": info["llama_cpp_model_type"], "model_types": info["model_types"],
              "model_size": info["model_size"], "order": order, "rows": rows}

    if a.output == "json":
        print(json.dumps(report, indent=2))
    else:
        mib = 1 << 20
        print(f"model {Path(a.model).name} ({info['llama_cpp_model_type']}) · {info['device']} · {a.threads} threads · "
              f"{a.rounds} alternating rounds · ptxlm {report['ptxlm_commit']} ({a.device}) · llama.cpp {report['llama_cpp_commit']}")
        print()
        print("| test | ptxlm t/s | llama.cpp t/s | ratio | ptxlm VmHWM | llama.cpp VmHWM |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for row in rows:
            o, p = row["ptxlm"], row["llama_cpp"]
            print(f"| {row['test']} | {o['avg_ts']:.2f} ± {o['stddev_ts']:.2f} | {p['avg_ts']:.2f} ± {p['stddev_ts']:.2f} | "
                  f"{row['ratio']:.3f} ± {row['ratio_stddev']:.3f} | {o['vmhwm_bytes'] / mib:.0f} MiB | {p['vmhwm_bytes'] / mib:.0f} MiB |")

    if a.plot:
        plot(report, a.plot)
        print(f"compare: plot written to {a.plot}", file=sys.stderr)


def plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    kinds = sorted({(r["n_prompt"], r["n_gen"]) for r in report["rows"]}, key=lambda k: (k[0] == 0, k))
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.5 * len(kinds), 4), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        rows = sorted((r for r in report["rows"] if (r["n_prompt"], r["n_gen"]) == kind), key=lambda r: r["n_depth"])
        depths = [r["n_depth"] for r in rows]
        for key, label in (("ptxlm", "ptxlm"), ("llama_cpp", "llama.cpp")):
            ax.errorbar(depths, [r[key]["avg_ts"] for r in rows], yerr=[r[key]["stddev_ts"] for r in rows],
                        marker="o", capsize=3, label=label)
        ax.set_title(f"pp{kind[0]}" if kind[0] else f"tg{kind[1]}")
        ax.set_xlabel("KV depth (tokens)")
        ax.set_ylabel("tokens/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{Path(report['model']).name} · {report['device']} · {report['threads']} threads", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
