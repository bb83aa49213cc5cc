"""bench/ab: two ptxlm binaries on the same bench test, alternating, for A/B
runs of a change (the VM's noise hits both alike; its read ceiling moves
between runs, so each round's t/s is read beside that run's read stream).

    bench/ab A_BINARY B_BINARY [--rounds 6] [--env-a NAME=VALUE,...] [--env-b NAME=VALUE,...] -- BENCH_ARGS...

A and B may be the same binary under two environments (PTXLM_CPU_PREFETCH=0
against the default, say).

Each round runs both (the order flips every round) as `BINARY bench
BENCH_ARGS -o json`; per binary and test it prints the median, minimum and
maximum of the tokens/s and of the read share (t/s · bytes per token over
the same run's read_gbs), and the median of the per-round ratios B/A.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(binary, env, args):
    e = dict(os.environ)
    e.update(env)
    try:
        out = subprocess.run([binary, "bench", *args, "-o", "json"], env=e, capture_output=True, text=True)
    except OSError as err:
        raise SystemExit(f"bench/ab: cannot run {binary}: {err.strerror}")
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or ["(no message)"]
        raise SystemExit(f"bench/ab: {binary} bench failed (exit {out.returncode}): {tail[0]}")
    return {(r["test"], r["n_depth"]): r for r in json.loads(out.stdout)}


def parse_env(text):
    env = {}
    for item in filter(None, (text or "").split(",")):
        if "=" not in item:
            raise SystemExit(f"bench/ab: --env '{text}': '{item}' is not NAME=VALUE")
        k, v = item.split("=", 1)
        env[k] = v
    return env


def main():
    if "--" not in sys.argv:
        raise SystemExit("usage: bench/ab A B [--rounds N] [--env-a E] [--env-b E] -- BENCH_ARGS...")
    cut = sys.argv.index("--")
    p = argparse.ArgumentParser(prog="bench/ab")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--env-a", default="")
    p.add_argument("--env-b", default="")
    o = p.parse_args(sys.argv[1:cut])
    if o.rounds < 1:
        raise SystemExit("bench/ab: --rounds must be at least 1")
    bench_args = sys.argv[cut + 1:]
    sides = [("A", o.a, parse_env(o.env_a)), ("B", o.b, parse_env(o.env_b))]
    got = {"A": [], "B": []}
    for r in range(o.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for name, binary, env in order:
            got[name].append(run(binary, env, bench_args))
        if got["A"][-1].keys() != got["B"][-1].keys():
            raise SystemExit("bench/ab: the two binaries ran different tests: "
                             f"{sorted(got['A'][-1])} against {sorted(got['B'][-1])}")
        line = []
        for key in got["A"][-1]:
            ta, tb = got["A"][-1][key]["avg_ts"], got["B"][-1][key]["avg_ts"]
            ra, rb = got["A"][-1][key].get("read_gbs") or 0, got["B"][-1][key].get("read_gbs") or 0
            line.append(f"{key[0]}@{key[1]}: A {ta:.1f} B {tb:.1f} ({tb / ta:.3f}; read {ra:.1f} / {rb:.1f} GB/s)")
        print(f"round {r + 1}/{o.rounds}: " + "; ".join(line), file=sys.stderr, flush=True)
    for key in got["A"][0]:
        print(f"{key[0]} at depth {key[1]}:")
        for name, _, _ in sides:
            rows = [g[key] for g in got[name]]
            ts = [x["avg_ts"] for x in rows]
            share = [x["avg_ts"] * x["bytes_per_token"] / 1e9 / x["read_gbs"] for x in rows if x.get("read_gbs")]
            s = f"  {name}: t/s median {statistics.median(ts):.1f} [{min(ts):.1f}, {max(ts):.1f}]"
            if share:
                s += f", read share median {statistics.median(share):.3f} [{min(share):.3f}, {max(share):.3f}]"
            print(s)
        ratios = [b[key]["avg_ts"] / a[key]["avg_ts"] for a, b in zip(got["A"], got["B"])]
        print(f"  B/A: median {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")


main()
