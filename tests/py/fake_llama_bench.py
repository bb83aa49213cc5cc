"""A stand-in for llama.cpp's llama-bench in bench/compare's test: accepts
the flags bench/compare passes, prints one row in llama-bench's JSON form
with a rate that depends only on the test, holds 64 MiB resident (so the test
can tell whose peak memory was measured), and appends its arguments to
$FAKE_LLAMA_BENCH_LOG. Exits 1 when $FAKE_LLAMA_BENCH_FAIL is set."""
import argparse
import json
import os
import sys

ap = argparse.ArgumentParser()
for flag in ("-m", "-p", "-n", "-d", "-t", "-r", "-o"):
    ap.add_argument(flag, required=True)
a = ap.parse_args()
if os.environ.get("FAKE_LLAMA_BENCH_FAIL"):
    print("fake llama-bench: failing as asked", file=sys.stderr)
    sys.exit(1)
with open(os.environ["FAKE_LLAMA_BENCH_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
ballast = bytearray(64 << 20)
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
p, n, d = int(a.p), int(a.n), int(a.d)
rate = 1000.0 / (1 + d / 100) if p else 50.0 / (1 + d / 100)
print(json.dumps([{"build_commit": "fake000", "model_filename": a.m, "model_type": "fake", "n_threads": int(a.t),
                   "n_prompt": p, "n_gen": n, "n_depth": d, "avg_ts": rate, "stddev_ts": 0.0, "samples_ts": [rate]}]))
