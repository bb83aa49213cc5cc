"""`ptxlm serve --device cuda --parallel 2` with emu as the driver (issue 22):
the slots are sequences of one batcher over the GPU's batch step (one copy
of the weights, one pool of KV pages). Two concurrent greedy completions on
a tiny synthetic llama give the text each gets from a CPU server, on the
reference arithmetic of both devices (the default path's step is bit-equal
to its single-sequence path: test_cuda_step); /metrics shows steps that
carried both sequences. Refused at start, by name: the persistent schedule
with --parallel 2, --batch-tokens above the GPU step's 16.
"""
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402
from check_serve import PTXLM, Server, metric, synth  # noqa: E402

EMU = os.environ["PTXLM_EMU_LIBCUDA"]
PROMPTS = ["Once upon a time", "The keeper climbed the stairs and"]
N = 12


def complete(s, prompt, out, i):
    st, body, _ = s.request("POST", "/v1/completions",
                            {"model": "x", "prompt": prompt, "max_tokens": N, "temperature": 0})
    out[i] = (st, body)


def answers(s, together):
    out = [None] * len(PROMPTS)
    threads = [threading.Thread(target=complete, args=(s, p, out, i)) for i, p in enumerate(PROMPTS)]
    for t in threads:
        t.start()
        if not together:
            t.join()
    for t in threads:
        t.join()
    texts = []
    for st, body in out:
        check(st == 200, f"completion: {st} {body[:300]!r}")
        texts.append(json.loads(body)["choices"][0]["text"] if st == 200 else None)
    return texts


def main():
    model = synth("llama", "tiny")
    cpu = Server(model, "--device", "cpu", "--cpu-path", "reference", "-t", "1", "-c", "64", "--parallel", "1")
    try:
        alone = answers(cpu, together=False)
    finally:
        check(cpu.stop() == 0, "the CPU server's exit code")
    env = {"PTXLM_LIBCUDA": EMU}
    gpu = Server(model, "--device", "cuda", "--gpu-path", "reference", "-c", "64", "--parallel", "2", env=env)
    try:
        log = gpu.stderr()
        check("2 sequences stepped together" in log and "CUDA" in log and "pages" in log,
              f"the GPU server does not say it steps 2 sequences: {log[-600:]!r}")
        together = answers(gpu, together=True)
        print(f"cpu alone: {alone}\ngpu together: {together}")
        check(together == alone, f"GPU answers together {together} != the CPU's {alone}")
        m = gpu.metrics()
        one = metric(m, "ptxlm_batch_step_sequences_bucket", le="1")
        every = metric(m, "ptxlm_batch_step_sequences_bucket", le="+Inf")
        check(one is not None and every is not None and every > one,
              f"no step carried both sequences: buckets <=1 {one}, all {every}")
    finally:
        rc = gpu.stop()
        check(rc == 0, f"the GPU server's exit code {rc}")
    full = dict(os.environ, **env)
    # The schedule is refused before the model loads (no summary line of it).
    for extra, word, loaded in ((["--schedule", "persistent"], "persistent", False),
                                (["--batch-tokens", "32"], "--batch-tokens 32", True)):
        p = subprocess.run([PTXLM, "serve", "-m", str(model), "--port", "0", "--device", "cuda", "-c", "64",
                            "--parallel", "2", *extra], capture_output=True, text=True, timeout=120, env=full)
        check(p.returncode != 0 and word in p.stderr and ("(llama," in p.stderr) == loaded,
              f"serve --device cuda --parallel 2 {extra}: exit {p.returncode}, {p.stderr[-300:]!r}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
