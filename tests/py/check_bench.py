"""`ptxlm bench` and `bench/compare`: the structure and consistency of what
they print, never their speed.

ptxlm bench on tiny synthetic models: one row per test in the order asked,
tokens counted equal to tokens asked, means and deviations recomputed from the
printed samples, bytes read per token recomputed here from gguf-py's tensor
table (weights once per pass, the LM head once per pass, one embedding row
and the visible KV cache per token, gemma3's sliding window included;
--parallel's sequences sharing each pass), md and
csv carrying the same tests, list/range syntax, and one clear message with
exit 2 for every bad flag. bench/compare against a stand-in llama-bench:
every round runs both engines on every test, alternating who goes first;
ratios are the ratio of the printed means; peak memory comes from each
engine's own process; --plot writes a PNG; a failing peer fails the run.
"""
import csv
import io
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_synth as cs  # noqa: E402
import gguf  # noqa: E402
from checks import check, finish  # noqa: E402

SRC = Path(os.environ.get("PTXLM_SOURCE_DIR", "."))
PTXLM = os.environ.get("PTXLM_BIN", "build/tools/ptxlm/ptxlm")
FAKE_PEER = Path(__file__).resolve().parent / "fake_llama_bench.py"


def bench(*args):
    return subprocess.run([PTXLM, "bench", "-t", "2", *args], capture_output=True, text=True, timeout=300)


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def mean_sd(xs):
    m = sum(xs) / len(xs)
    return m, (math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0)


def expected_bytes_per_token(r, row):
    """The traffic model, recomputed from the file: a pass reads every tensor
    but the embedding table and the LM head; the LM head (the table again
    when the output is tied, and the final norm) is read once per generated
    token and once for the prompt's last token; each token reads one
    embedding row and K and V of its visible positions in every layer (f16
    cache)."""
    hp = cs.hparams(r)
    sizes = {t.name: int(t.n_bytes) for t in r.tensors}
    embd = next(t for t in r.tensors if t.name == "token_embd.weight")
    embd_row = int(embd.n_bytes) // int(embd.shape[1])
    head = sizes.get("output.weight", sizes["token_embd.weight"]) + sizes["output_norm.weight"]
    per_pass = sum(sizes.values()) - sizes["token_embd.weight"] - sizes.get("output.weight", 0) - sizes["output_norm.weight"]
    n = row["n_prompt"] + row["n_gen"]
    par = row["n_parallel"]   # sequences generating together: a pass reads the weights once for all
    passes = -(-n // row["n_batch"]) if row["n_prompt"] else n
    total = passes * per_pass + (1 if row["n_prompt"] else n * par) * head
    kv = 0
    for i in range(n):
        pos = row["n_depth"] + i
        for il in range(hp["n_layer"]):
            visible = pos + 1
            if hp["arch"] == "gemma3" and il % 6 != 5:
                visible = min(visible, hp["sliding_window"])
            kv += 2 * visible * hp["n_head_kv"] * hp["head_dim"] * 2
        kv += embd_row
    return (total + kv * par) / (n * par)


def expected_macs_per_token(r, row):
    """Multiply-adds of the matrix products, recomputed from the file: every
    matrix but the embedding table for each token, the LM head (the table
    again when the output is tied) for each token that makes logits."""
    mats = {t.name: int(t.shape[0]) * int(t.shape[1]) for t in r.tensors if len(t.shape) == 2 and int(t.shape[1]) > 1}
    head = mats.get("output.weight", mats["token_embd.weight"])
    layers = sum(mats.values()) - mats["token_embd.weight"] - mats.get("output.weight", 0)
    n = row["n_prompt"] + row["n_gen"]
    return (n * layers + (1 if row["n_prompt"] else n) * head) / n


def check_json_rows(path, rows, want_tests, reps):
    r = gguf.GGUFReader(str(path))
    names = [row["test"] for row in rows]
    check(names == want_tests, f"{path.name}: tests {names}, expected {want_tests}")
    total = sum(int(t.n_bytes) for t in r.tensors)
    params = sum(int(t.n_elements) for t in r.tensors)
    for row in rows:
        what = f"{path.name} {row['test']}"
        check(row["n_tokens"] == (row["n_prompt"] + row["n_gen"]) * row["n_parallel"], f"{what}: counted {row['n_tokens']} tokens")
        check(row["repetitions"] == reps and len(row["samples_ts"]) == reps and len(row["samples_ns"]) == reps,
              f"{what}: {reps} repetitions expected: {row['repetitions']}, {row['samples_ts']}")
        check(all(close(ts, row["n_tokens"] * 1e9 / ns) for ts, ns in zip(row["samples_ts"], row["samples_ns"])),
              f"{what}: samples_ts are not tokens / time")
        m, sd = mean_sd(row["samples_ts"])
        check(close(row["avg_ts"], m) and close(row["stddev_ts"] + 1, sd + 1), f"{what}: mean/sd {row['avg_ts']}/{row['stddev_ts']} vs {m}/{sd}")
        check(row["avg_ts"] > 0, f"{what}: a rate of {row['avg_ts']}")
        check(close(row["ms_per_token"], 1000 / row["avg_ts"]), f"{what}: ms/token")
        want = expected_bytes_per_token(r, row)
        check(close(row["bytes_per_token"], want), f"{what}: {row['bytes_per_token']} bytes/token, expected {want}")
        check(close(row["bandwidth_gbs"], row["bytes_per_token"] * row["avg_ts"] / 1e9), f"{what}: bandwidth")
        check(row["peak_gbs"] and row["peak_gbs"] > 0 and close(row["peak_share"], row["bandwidth_gbs"] / row["peak_gbs"]),
              f"{what}: peak {row['peak_gbs']} share {row['peak_share']}")
        check(row["model_size"] == total and sum(row["model_types"].values()) == total, f"{what}: size {row['model_size']} vs {total}")
        check(row["model_n_params"] == params, f"{what}: {row['model_n_params']} parameters, gguf-py counts {params}")
        check(row["n_ctx"] >= row["n_depth"] + row["n_prompt"] + row["n_gen"], f"{what}: context {row['n_ctx']} too small")
        check(row["device"] == "cpu" and row["n_threads"] == 2 and row["device_units"] >= 1, f"{what}: device fields")
        check(row["peak_rss_bytes"] > 0, f"{what}: no peak RSS")
        # The CPU's two ceilings, measured at start, and the test's share of each.
        check(close(row["macs_per_token"], expected_macs_per_token(r, row)),
              f"{what}: {row['macs_per_token']} multiply-adds per token, expected {expected_macs_per_token(r, row)}")
        check(row["read_gbs"] and row["read_gbs"] > 0 and close(row["read_share"], row["bandwidth_gbs"] / row["read_gbs"]),
              f"{what}: read {row['read_gbs']} share {row['read_share']}")
        check(row["int8_gops"] and row["int8_gops"] > 0 and row["int8_isa"] in row["cpu_path"]
              and close(row["int8_share"], row["macs_per_token"] * row["avg_ts"] / 1e9 / row["int8_gops"]),
              f"{what}: int8 {row['int8_gops']} ({row['int8_isa']}, path {row['cpu_path']}) share {row['int8_share']}")


def check_ptxlm_bench(tmp):
    models = {}
    for arch in ("llama", "gemma3"):
        path = tmp / f"{arch}.gguf"
        p = subprocess.run([str(cs.BIN), "--arch", arch, "--size", "tiny", "--out", str(path)], capture_output=True, text=True)
        check(p.returncode == 0, f"ptxlm-synth {arch}: {p.stderr}")
        models[arch] = path

    # JSON: pp over one and two batches, tg, at two depths; gemma3's window (16) crossed.
    p = bench("-m", str(models["llama"]), "-p", "16,100", "-n", "3", "-d", "0,70", "-r", "2", "-o", "json")
    if check(p.returncode == 0, f"bench json: {p.stderr[-400:]}"):
        check_json_rows(models["llama"], json.loads(p.stdout),
                        ["pp16", "pp100", "tg3", "pp16 @ d70", "pp100 @ d70", "tg3 @ d70"], 2)
        for t in ("pp16", "tg3 @ d70"):
            check(f"bench: {t} " in p.stderr, f"no progress line for {t} on stderr")
    p = bench("-m", str(models["gemma3"]), "-p", "0", "-n", "4", "-d", "0,40", "-r", "1", "-o", "json")
    if check(p.returncode == 0, f"bench gemma3: {p.stderr[-400:]}"):
        check_json_rows(models["gemma3"], json.loads(p.stdout), ["tg4", "tg4 @ d40"], 1)
    # --parallel: each tg test again with P sequences generating together
    # (aggregate tokens: P x n_gen; the weights read once per step for all).
    p = bench("-m", str(models["gemma3"]), "-p", "0", "-n", "4", "-d", "0,20", "--parallel", "1,3", "-r", "2", "-o", "json")
    if check(p.returncode == 0, f"bench --parallel: {p.stderr[-400:]}"):
        rows = json.loads(p.stdout)
        check_json_rows(models["gemma3"], rows, ["tg4", "tg4 x3", "tg4 @ d20", "tg4 x3 @ d20"], 2)
        check([r["n_parallel"] for r in rows] == [1, 3, 1, 3], f"n_parallel: {[r['n_parallel'] for r in rows]}")

    # The CPU arithmetic: quantized dot products by default, the float32
    # reference on request, said in every row; PTXLM_CPU_ISA picks the SIMD.
    p = bench("-m", str(models["llama"]), "-p", "8", "-n", "2", "-r", "1", "-o", "json")
    if check(p.returncode == 0, f"bench default path: {p.stderr[-400:]}"):
        paths = {r["cpu_path"] for r in json.loads(p.stdout)}
        check(len(paths) == 1 and paths.pop().startswith("quantized ("), f"default cpu_path: {p.stdout[:300]}")
        check("quantized dot products" in p.stderr, f"the run does not say its CPU path: {p.stderr[-300:]}")
    p = bench("-m", str(models["llama"]), "-p", "8", "-n", "2", "-r", "1", "-o", "json", "--cpu-path", "reference")
    if check(p.returncode == 0, f"bench --cpu-path reference: {p.stderr[-400:]}"):
        rows = json.loads(p.stdout)
        check({r["cpu_path"] for r in rows} == {"reference"}, f"reference cpu_path: {p.stdout[:300]}")
        check(all(r["int8_gops"] is None and r["int8_share"] is None and r["read_gbs"] > 0 for r in rows),
              f"the reference path has no int8 rate, a read rate: {[(r['int8_gops'], r['read_gbs']) for r in rows]}")
    p = subprocess.run([PTXLM, "bench", "-m", str(models["llama"]), "-p", "0", "-n", "2", "-r", "1", "-o", "json"],
                       capture_output=True, text=True, env=dict(os.environ, PTXLM_CPU_ISA="scalar"))
    if check(p.returncode == 0, f"bench PTXLM_CPU_ISA=scalar: {p.stderr[-400:]}"):
        check({r["cpu_path"] for r in json.loads(p.stdout)} == {"quantized (scalar)"}, f"scalar: {p.stdout[:300]}")
    p = bench("-m", str(models["llama"]), "-p", "0", "-n", "2", "-r", "1", "-o", "json", "--cpu-isa", "scalar")
    if check(p.returncode == 0, f"bench --cpu-isa scalar: {p.stderr[-400:]}"):
        check({r["cpu_path"] for r in json.loads(p.stdout)} == {"quantized (scalar)"}, f"--cpu-isa: {p.stdout[:300]}")
    # PTXLM_CPU_ISA caps what --cpu-isa may ask for (every machine here has avx2).
    p = subprocess.run([PTXLM, "bench", "-m", str(models["llama"]), "-p", "0", "-n", "2", "-r", "1", "--cpu-isa", "avx2"],
                       capture_output=True, text=True, env=dict(os.environ, PTXLM_CPU_ISA="scalar"))
    check(p.returncode == 2 and "PTXLM_CPU_ISA=scalar" in p.stderr and len(p.stderr.strip().splitlines()) <= 3,
          f"--cpu-isa avx2 under PTXLM_CPU_ISA=scalar: exit {p.returncode}, {p.stderr[-300:]!r}")
    p = subprocess.run([PTXLM, "bench", "-m", str(models["llama"]), "-p", "0", "-n", "2", "-r", "1"],
                       capture_output=True, text=True, env=dict(os.environ, PTXLM_CPU_ISA="avx9000"))
    check(p.returncode != 0 and "PTXLM_CPU_ISA" in p.stderr and len(p.stderr.strip().splitlines()) <= 3,
          f"PTXLM_CPU_ISA=avx9000: exit {p.returncode}, {p.stderr[-300:]!r}")

    # Ranges: a factor and a step; 0 skips.
    p = bench("-m", str(models["llama"]), "-p", "8-32*2", "-n", "0-8+8", "-r", "1", "-o", "json")
    if check(p.returncode == 0, f"bench ranges: {p.stderr[-400:]}"):
        check([r["test"] for r in json.loads(p.stdout)] == ["pp8", "pp16", "pp32", "tg8"], f"ranges: {p.stdout[:300]}")

    # md: a table with the same tests; csv: one record per test, every field.
    p = bench("-m", str(models["llama"]), "-p", "8", "-n", "2", "-d", "0,4", "-r", "1")
    if check(p.returncode == 0, f"bench md: {p.stderr[-400:]}"):
        lines = [l for l in p.stdout.splitlines() if l.startswith("|")]
        check(len(lines) == 6, f"md: header, rule and 4 rows expected: {p.stdout}")
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        for line in lines[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            check(len(cells) == len(header), f"md row has {len(cells)} cells, header {len(header)}: {line}")
            ts = cells[header.index("t/s")].split(" ± ")
            check(len(ts) == 2 and float(ts[0]) > 0, f"md t/s cell: {cells}")
        check([l.split("|")[7].strip() for l in lines[2:]] == ["pp8", "tg2", "pp8 @ d4", "tg2 @ d4"], f"md tests: {lines}")
        check("peak:" in p.stdout, "md: no peak line")
    p = bench("-m", str(models["llama"]), "-p", "8", "-n", "2", "-r", "2", "-o", "csv")
    if check(p.returncode == 0, f"bench csv: {p.stderr[-400:]}"):
        recs = list(csv.DictReader(io.StringIO(p.stdout)))
        check([r["test"] for r in recs] == ["pp8", "tg2"], f"csv tests: {recs}")
        for r in recs:
            check(None not in r and all(k in r for k in ("avg_ts", "stddev_ts", "bytes_per_token", "peak_share")), f"csv fields: {r}")
            check(int(r["n_tokens"]) == int(r["n_prompt"]) + int(r["n_gen"]), f"csv tokens: {r}")
            check(len(r["samples_ts"].split(";")) == 2, f"csv samples: {r['samples_ts']}")

    # Bad input: exit 2, one message naming the flag, nothing on stdout.
    for args, needle in ((["-p", "abc"], "-p"), (["-p", "8-4"], "-p"), (["-n", "1-9*1"], "-n"), (["-d", "-3"], "-d"),
                         (["-p", "0", "-n", "0"], "nothing to measure"), (["-c", "16", "-p", "32"], "-c 16"),
                         (["-o", "xml"], "-o"), (["-r", "0"], "-r"), (["-p", "99999999"], "-p"),
                         (["--cpu-path", "fast"], "--cpu-path"), (["--cpu-path", "reference", "--device", "cuda"], "--cpu-path"),
                         (["--cpu-isa", "avx9000"], "--cpu-isa"), (["--cpu-isa", "scalar", "--cpu-path", "reference"], "--cpu-isa"),
                         (["--cpu-isa", "scalar", "--device", "cuda"], "--cpu-isa"),
                         (["--parallel", "0"], "--parallel"), (["--parallel", "65"], "--parallel"),
                         (["--parallel", "x"], "--parallel")):
        p = bench("-m", str(models["llama"]), *args)
        check(p.returncode == 2 and needle in p.stderr and "|" not in p.stdout,
              f"bench {args}: exit {p.returncode}, stderr {p.stderr.strip()[-200:]!r}")
        check(len(p.stderr.strip().splitlines()) <= 3, f"bench {args}: one clear message, got {p.stderr!r}")
    p = bench("-m", str(tmp / "missing.gguf"))
    check(p.returncode == 2 and "missing.gguf" in p.stderr, f"missing model: {p.returncode} {p.stderr!r}")
    return models


def compare(*args, env=None):
    return subprocess.run([sys.executable, str(SRC / "bench/compare.py"), "--ptxlm", PTXLM,
                           "--llama-bench", f"{sys.executable} {FAKE_PEER}", "-t", "2", *args],
                          capture_output=True, text=True, timeout=600, env=env)


def check_compare(tmp, model):
    log = tmp / "peer.log"
    env = dict(os.environ, FAKE_LLAMA_BENCH_LOG=str(log))
    p = compare("-m", str(model), "-p", "16", "-n", "3", "-d", "0,20", "--rounds", "3", "-o", "json", env=env)
    if not check(p.returncode == 0, f"compare json: {p.stderr[-500:]}"):
        return
    rep = json.loads(p.stdout)
    tests = ["pp16", "tg3", "pp16 @ d20", "tg3 @ d20"]
    check([r["test"] for r in rep["rows"]] == tests, f"compare tests: {[r['test'] for r in rep['rows']]}")
    for row in rep["rows"]:
        o, q = row["ptxlm"], row["llama_cpp"]
        check(len(o["samples_ts"]) == 3 and len(q["samples_ts"]) == 3, f"{row['test']}: 3 rounds each")
        check(close(o["avg_ts"], mean_sd(o["samples_ts"])[0]) and close(q["avg_ts"], mean_sd(q["samples_ts"])[0]), f"{row['test']}: means")
        check(close(row["ratio"], o["avg_ts"] / q["avg_ts"]), f"{row['test']}: ratio {row['ratio']} is not the ratio of the means")
        rs = mean_sd([a / b for a, b in zip(o["samples_ts"], q["samples_ts"])])[1]
        check(close(row["ratio_stddev"] + 1, rs + 1), f"{row['test']}: ratio spread")
        check(q["vmhwm_bytes"] >= 64 << 20, f"{row['test']}: the peer's peak memory {q['vmhwm_bytes']} is not its own (it holds 64 MiB)")
        check(0 < o["vmhwm_bytes"] < q["vmhwm_bytes"] + (256 << 20), f"{row['test']}: ptxlm's peak memory {o['vmhwm_bytes']}")
    check(rep["llama_cpp_commit"] == "fake000" and rep["rounds"] == 3 and rep["threads"] == 2, f"report header: {rep}")
    order = rep["order"]
    check(len(order) == 24, f"{len(order)} runs, expected 24")
    for i in range(0, len(order) - 1, 2):
        a, b = order[i], order[i + 1]
        first = "ptxlm" if a["round"] % 2 else "llama.cpp"
        check(a["test"] == b["test"] and a["round"] == b["round"] and {a["engine"], b["engine"]} == {"ptxlm", "llama.cpp"}
              and a["engine"] == first, f"runs {i}, {i + 1} do not alternate: {a} {b}")
    calls = [json.loads(l) for l in log.read_text().splitlines()]
    check(len(calls) == 12, f"the peer ran {len(calls)} times, expected 12")
    for c in calls:
        check(c[c.index("-t") + 1] == "2" and c[c.index("-r") + 1] == "1" and c[c.index("-m") + 1] == str(model), f"peer args {c}")

    # md with a plot: ratios as printed are the printed means' ratio.
    png = tmp / "plot.png"
    p = compare("-m", str(model), "-p", "8", "-n", "2", "-d", "0,8", "--rounds", "2", "--plot", str(png), env=env)
    if check(p.returncode == 0, f"compare md: {p.stderr[-500:]}"):
        rows = [l for l in p.stdout.splitlines() if l.startswith("| ") and "---" not in l][1:]
        check(len(rows) == 4, f"compare md rows: {p.stdout}")
        for line in rows:
            cells = [c.strip() for c in line.strip("|").split("|")]
            ours, peer, ratio = (float(cells[i].split(" ± ")[0]) for i in (1, 2, 3))
            check(abs(ratio - ours / peer) <= 0.0006 + 1e-3 * ratio, f"printed ratio {ratio} vs {ours}/{peer}: {line}")
        check(png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "no PNG written")

    # A failing peer fails the comparison with a message naming it.
    p = compare("-m", str(model), "-p", "8", "-n", "0", "--rounds", "1", env=dict(env, FAKE_LLAMA_BENCH_FAIL="1"))
    check(p.returncode != 0 and "llama.cpp failed" in p.stderr, f"failing peer: {p.returncode} {p.stderr[-300:]!r}")
    p = compare("-m", str(tmp / "missing.gguf"), env=env)
    check(p.returncode != 0 and "missing.gguf" in p.stderr, f"compare on a missing model: {p.stderr[-300:]!r}")


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        models = check_ptxlm_bench(tmp)
        check_compare(tmp, models["llama"])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
