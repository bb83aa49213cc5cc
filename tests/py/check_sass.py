"""bench/sass: loops found in the SASS ptxas makes, and their counts.

Known answers from hand-written PTX, on sm_80, sm_86, sm_89 and sm_90: a loop
with one 16-byte non-coherent load per lane, four int->float conversions and
four FMAs per iteration (512 global bytes per warp per iteration, exactly the
4 conversions and 4 FFMAs), the same loop with dp4a instead (no conversion,
2 IDPs: the negative control), a kernel without a loop (none reported) and
two nested loops (only the inner one reported). The gates --forbid-conversions
and --max-insts-per-byte pass on one kernel and fail on the other; bad input
gives exit 2 with one clear line; a cubin ptxas made of the same PTX for
sm_90 (--cubin, as bench/peer-mmvq reads nvcc's) reports the same. Then the real gemma-3-270m: every GEMV
kernel `ptxlm ptx` writes has a hot loop that loads global memory; the
figures are printed, not asserted (the kernels are about to be rebuilt).
Last, the rebuilt 8-bit-input Q4_K GEMV on a tiny synthetic llama passes
the per-block-conversion and instructions-per-byte gates, and today's f32
Q4_K kernels of the same model fail them (q8_gate).

nvdisasm comes from requirements.txt (nvidia-cuda-nvdisasm); a venv without
it fails this test.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402

SRC = Path(os.environ.get("PTXLM_SOURCE_DIR", "."))
PTXLM = os.environ.get("PTXLM_BIN", "build/tools/ptxlm/ptxlm")
MODELS = Path(os.environ.get("PTXLM_MODELS_DIR", SRC / "models"))
BINARY_DIR = os.environ.get("PTXLM_BINARY_DIR", str(SRC / "build"))
SASS = SRC / "bench" / "sass.py"
ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")

# cvt_loop and dp4a_loop read n x 16 bytes per lane, 512 bytes apart (one
# warp's stride); "nounroll" keeps ptxas's loop to one PTX iteration, and
# the stored accumulator keeps the conversions alive.
HEAD = """.version 8.0
.target sm_80
.address_size 64
"""
LOOP = """
.visible .entry NAME(.param .u64 w, .param .u64 out, .param .u32 n)
{
  .reg .pred %p;
  .reg .u32 %i, %n, %q<4>, %t;
  .reg .u64 %a, %o, %off;
  .reg .f32 %f<4>, %facc;
  .reg .s32 %acc;
  ld.param.u64 %a, [w];
  ld.param.u64 %o, [out];
  ld.param.u32 %n, [n];
  mov.u32 %t, %tid.x;
  mul.wide.u32 %off, %t, 16;
  add.u64 %a, %a, %off;
  mov.f32 %facc, 0f00000000;
  mov.s32 %acc, 0;
  mov.u32 %i, 0;
LOOP:
  .pragma "nounroll";
  ld.global.nc.v4.u32 {%q0, %q1, %q2, %q3}, [%a];
BODY
  add.u64 %a, %a, 512;
  add.u32 %i, %i, 1;
  setp.lt.u32 %p, %i, %n;
  @%p bra LOOP;
  mul.wide.u32 %off, %t, 4;
  add.u64 %o, %o, %off;
  st.global.STORE [%o], ACC;
  ret;
}
"""
CVT_BODY = "\n".join([f"  cvt.rn.f32.s32 %f{i}, %q{i};" for i in range(4)] +
                     [f"  fma.rn.f32 %facc, %f{i}, %f{i}, %facc;" for i in range(4)])
DP4A_BODY = "  dp4a.s32.s32 %acc, %q0, %q1, %acc;\n  dp4a.s32.s32 %acc, %q2, %q3, %acc;"
OTHERS = """
.visible .entry no_loop(.param .u64 w, .param .u64 out)
{
  .reg .u32 %t, %q;
  .reg .u64 %a, %o, %off;
  .reg .f32 %f;
  ld.param.u64 %a, [w];
  ld.param.u64 %o, [out];
  mov.u32 %t, %tid.x;
  mul.wide.u32 %off, %t, 4;
  add.u64 %a, %a, %off;
  add.u64 %o, %o, %off;
  ld.global.nc.u32 %q, [%a];
  cvt.rn.f32.s32 %f, %q;
  st.global.f32 [%o], %f;
  ret;
}

.visible .entry nested(.param .u64 w, .param .u64 out, .param .u32 n)
{
  .reg .pred %p;
  .reg .u32 %i, %j, %n, %q, %acc, %t;
  .reg .u64 %a, %o, %off;
  ld.param.u64 %a, [w];
  ld.param.u64 %o, [out];
  ld.param.u32 %n, [n];
  mov.u32 %t, %tid.x;
  mul.wide.u32 %off, %t, 4;
  add.u64 %a, %a, %off;
  mov.u32 %acc, 0;
  mov.u32 %i, 0;
OUTER:
  .pragma "nounroll";
  mov.u32 %j, 0;
INNER:
  .pragma "nounroll";
  ld.global.nc.u32 %q, [%a];
  xor.b32 %acc, %acc, %q;
  add.u64 %a, %a, 128;
  add.u32 %j, %j, 1;
  setp.lt.u32 %p, %j, %n;
  @%p bra INNER;
  mul.lo.u32 %acc, %acc, 3;
  add.u32 %i, %i, 1;
  setp.lt.u32 %p, %i, %n;
  @%p bra OUTER;
  add.u64 %o, %o, %off;
  st.global.u32 [%o], %acc;
  ret;
}
"""
PTX = (HEAD + LOOP.replace("NAME", "cvt_loop").replace("BODY", CVT_BODY).replace("STORE", "f32").replace("ACC", "%facc")
       + LOOP.replace("NAME", "dp4a_loop").replace("BODY", DP4A_BODY).replace("STORE", "s32").replace("ACC", "%acc")
       + OTHERS)


def sass(*args):
    return subprocess.run([sys.executable, str(SASS), *args], capture_output=True, text=True, timeout=300)


def report(*args):
    """The JSON report as {kernel name: kernel}, or None (the failure recorded)."""
    p = sass("--json", *args)
    if not check(p.returncode == 0, f"bench/sass {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}"):
        return None
    return {k["name"]: k for k in json.loads(p.stdout)["kernels"]}


def hot(k):
    return next((lp for lp in k["loops"] if lp["hot"]), None)


def known_answers(ptx):
    for arch in ARCHS:
        ks = report("--ptx", ptx, "--arch", arch)
        if ks is None:
            return None
        check(sorted(ks) == ["cvt_loop", "dp4a_loop", "nested", "no_loop"], f"{arch}: kernels {sorted(ks)}")
        cvt, dp4a = ks["cvt_loop"]["loops"], ks["dp4a_loop"]["loops"]
        if not check(len(cvt) == 1 and len(dp4a) == 1, f"{arch}: one loop each in cvt_loop, dp4a_loop: {cvt} {dp4a}"):
            continue
        c, d = cvt[0], dp4a[0]
        # ptxas 13.0 on every target: LDG.E.128, 4 I2F (sm_80-89) or I2FP.F32.S32 (sm_90), 4 FFMA; 14
        # instructions with the counter, the pointer bump (IADD3 + IADD3.X), ISETP and BRA. The dp4a
        # loop: 2 IDP.4A (each takes 4 bytes of two operands) and the same 6 others.
        for name, lp in (("cvt_loop", c), ("dp4a_loop", d)):
            check(lp["hot"] and lp["kind"] == "load", f"{arch} {name}: the loop is the hot load loop: {lp}")
            check(lp["global_load_bytes"] == 512, f"{arch} {name}: 512 global bytes per warp per iteration, "
                  f"got {lp['global_load_bytes']}")
            check(lp["global_load_widths"] == {"128": 1}, f"{arch} {name}: one 128-bit LDG: {lp['global_load_widths']}")
        check(c["classes"]["conversions"] == 4, f"{arch} cvt_loop: 4 conversions, got {c['classes']}")
        check(c["classes"]["fp32"] == 4 and sum(n for op, n in c["opcodes"].items() if op == "FFMA") == 4,
              f"{arch} cvt_loop: 4 FFMA, got {c['opcodes']}")
        check(c["insts"] == 14 and abs(c["insts_per_global_byte"] - 14 / 512) < 1e-4,
              f"{arch} cvt_loop: 14 instructions, 14/512 per byte: {c['insts']} {c['insts_per_global_byte']}")
        check(d["classes"]["conversions"] == 0 and d["classes"]["idp"] == 2 and d["insts"] == 8,
              f"{arch} dp4a_loop: no conversion, 2 IDP, 8 instructions: {d['opcodes']}")
        check(ks["no_loop"]["loops"] == [] and hot(ks["no_loop"]) is None, f"{arch} no_loop: {ks['no_loop']['loops']}")
        n = ks["nested"]["loops"]
        check(len(n) == 1 and n[0]["global_load_bytes"] == 128 and n[0]["opcodes"].get("BRA") == 1,
              f"{arch} nested: only the inner loop (one 32-bit LDG, one branch: its own): {n}")
        check(sum(c["classes"].values()) == c["insts"], f"{arch}: the classes add up to the instructions")
    return ks


def gates(ptx, ks):
    p = sass("--ptx", ptx, "--kernel", "dp4a_loop", "--forbid-conversions")
    check(p.returncode == 0, f"--forbid-conversions passes dp4a_loop: exit {p.returncode} {p.stderr.strip()}")
    p = sass("--ptx", ptx, "--kernel", "_loop$", "--forbid-conversions")
    check(p.returncode == 1 and "cvt_loop hot loop" in p.stderr and "dp4a_loop" not in p.stderr,
          f"--forbid-conversions fails cvt_loop alone: exit {p.returncode} {p.stderr.strip()}")
    # Between the two loops' figures (8/512 and 14/512).
    limit = (hot(ks["cvt_loop"])["insts_per_global_byte"] + hot(ks["dp4a_loop"])["insts_per_global_byte"]) / 2
    p = sass("--ptx", ptx, "--kernel", "dp4a_loop", "--max-insts-per-byte", f"{limit:.5f}")
    check(p.returncode == 0, f"--max-insts-per-byte {limit:.5f} passes dp4a_loop: {p.stderr.strip()}")
    p = sass("--ptx", ptx, "--kernel", "_loop$", "--max-insts-per-byte", f"{limit:.5f}", "--json")
    bad = json.loads(p.stdout)["violations"] if p.stdout else []
    check(p.returncode == 1 and len(bad) == 1 and bad[0].startswith("cvt_loop hot loop"),
          f"--max-insts-per-byte {limit:.5f} fails cvt_loop alone: exit {p.returncode} {bad} {p.stderr.strip()}")


def errors(ptx, tmp):
    bad = Path(tmp) / "bad.ptx"
    bad.write_text(HEAD + ".visible .entry broken()\n{\n  frobnicate.u32 %r0;\n}\n")
    # Our own errors open with one "sass: ..." line (ptxas's log follows its line); argparse's name the flag.
    for what, args, needle in (
            ("no nvdisasm", ["--ptx", ptx, "--nvdisasm", "/nonexistent/nvdisasm"], "sass: --nvdisasm /nonexistent"),
            ("no kernel matched", ["--ptx", ptx, "--kernel", "^nothing$"], "sass: no kernel matched"),
            ("ptxas rejects", ["--ptx", str(bad)], "sass: ptxas on"),
            ("unknown arch", ["--ptx", ptx, "--arch", "sm_70"], "--arch: invalid choice: 'sm_70'")):
        p = sass(*args)
        lines = p.stderr.splitlines()
        check(p.returncode == 2 and any(needle in ln for ln in (lines[:1] if needle.startswith("sass:") else lines)),
              f"{what}: exit 2 with a line naming it: exit {p.returncode} {p.stderr.strip()[:300]}")
        if what == "ptxas rejects":
            check("frobnicate" in p.stderr, f"ptxas's log follows: {p.stderr.strip()[:300]}")
    p = sass("--ptx", ptx, "--kernel", "cvt_loop")
    check(p.returncode == 0 and "| cvt_loop (" in p.stdout and "**hot**" in p.stdout,
          f"the Markdown table has cvt_loop's hot row: {p.stdout[-600:]} {p.stderr}")


def cubin(ptx, tmp, ks):
    """--cubin reads a cubin built elsewhere (bench/peer-mmvq's nvcc output) as --ptx reads what it assembles."""
    ptxas = os.environ.get("PTXLM_PTXAS") or "/usr/local/cuda/bin/ptxas"
    out = str(Path(tmp) / "known.cubin")
    p = subprocess.run([ptxas, "-arch=sm_90", ptx, "-o", out], capture_output=True, text=True)
    if not check(p.returncode == 0, f"ptxas -arch=sm_90 on the known PTX: {p.stderr.strip()}"):
        return
    got = report("--cubin", out)
    if got is not None:
        check(got == {n: dict(k, file="known.cubin") for n, k in ks.items()},
              f"--cubin reports what --ptx --arch sm_90 does: {sorted(got)}")
    p = sass("--cubin", str(Path(tmp) / "missing.cubin"))
    check(p.returncode == 2 and p.stderr.startswith("sass: --cubin"), f"a missing cubin: {p.returncode} {p.stderr[:200]}")


def gemma(tmp):
    model = MODELS / "gemma-3-270m-q4_k_m.gguf"
    if not check(model.exists(), f"{model} missing (models/fetch)"):
        return
    out = Path(tmp) / "ptx"
    p = subprocess.run([PTXLM, "ptx", "-m", str(model), "--out", str(out)], capture_output=True, text=True)
    if not check(p.returncode == 0, f"ptxlm ptx: {p.stderr}"):
        return
    want = sorted(f.stem for f in out.glob("gemv*.ptx"))
    ks = report("-m", str(model), "--kernel", "^gemv")
    if ks is None:
        return
    check(want and sorted(ks) == want, f"every GEMV kernel is reported: {sorted(ks)} vs {want}")
    fields = ("insts", "global_load_bytes", "global_load_widths", "shared_load_bytes", "shared_load_widths",
              "classes", "opcodes", "insts_per_global_byte", "conversions_per_global_byte", "kind", "hot")
    print(f"{'gemma-3-270m GEMV hot loop (sm_90)':56} insts  LDG B  insts/B  cvt  fp32  LDS  bitops")
    for name, k in sorted(ks.items()):
        lp = hot(k)
        if not check(lp is not None and lp["global_load_bytes"] > 0, f"{name}: a hot loop loading global memory"):
            continue
        check(all(f in lp for f in fields), f"{name}: hot loop fields {sorted(lp)}")
        c = lp["classes"]
        print(f"{name:56} {lp['insts']:5} {lp['global_load_bytes']:6} {lp['insts_per_global_byte']:8.4f} "
              f"{c['conversions']:4} {c['fp32']:5} {c['shared_loads']:4} {c['bitops']:7}")


def q8_gate(tmp):
    """The 8-bit-input Q4_K GEMV (the default path on a tiny synthetic llama,
    Q4_K_M, every input width a multiple of 256): its weight loops
    convert once per block, not per weight, and issue at most 0.075
    instructions per byte as the lanes load them (the four lanes of a block
    each load its 16-byte header, so 0.1 per distinct weight byte: issue 20's
    target). Negative control: the f32-input Q4_K kernels of the same model
    (--gpu-path reference) fail both gates."""
    model = Path(tmp) / "tiny-llama.gguf"
    p = subprocess.run([str(Path(BINARY_DIR) / "models" / "synth" / "ptxlm-synth"), "--arch", "llama", "--size", "tiny",
                        "--out", str(model)], capture_output=True, text=True)
    if not check(p.returncode == 0, f"ptxlm-synth: {p.stderr}"):
        return
    gate = ["--max-conversions-per-byte", "0.004", "--max-insts-per-byte", "0.075"]
    q = subprocess.run([sys.executable, str(SASS), "-m", str(model), "--kernel", "_q8_", "--json", *gate],
                       capture_output=True, text=True, timeout=300)
    ks = json.loads(q.stdout)["kernels"] if q.stdout else []
    check(q.returncode == 0 and len(ks) >= 2, f"8-bit-input GEMVs pass the gates: exit {q.returncode} "
          f"{[k['name'] for k in ks]} {q.stderr.strip()[:400]}")
    for k in ks:
        lp = hot(k)
        if check(lp is not None, f"{k['name']}: a hot loop"):
            print(f"{k['name']:56} {lp['insts']:5} {lp['global_load_bytes']:6} {lp['insts_per_global_byte']:8.4f} "
                  f"{lp['classes']['conversions']:4} idp {lp['classes']['idp']}")
    old = sass("-m", str(model), "--gpu-path", "reference", "--kernel", "^gemv.*q4_k", *gate)
    check(old.returncode == 1 and old.stderr.count("(--max-conversions-per-byte)") >= 1
          and old.stderr.count("(--max-insts-per-byte)") >= 1,
          f"the f32-input Q4_K GEMVs fail both gates: exit {old.returncode} {old.stderr.strip()[:400]}")


def main():
    with tempfile.TemporaryDirectory(prefix="check-sass-") as tmp:
        ptx = str(Path(tmp) / "known.ptx")
        Path(ptx).write_text(PTX)
        ks = known_answers(ptx)
        if ks is None:
            print("bench/sass could not run (the line above says why; for a missing nvdisasm: "
                  "install requirements.txt into .venv, ./run.sh does)")
            return finish()
        gates(ptx, ks)
        errors(ptx, tmp)
        cubin(ptx, tmp, ks)
        gemma(tmp)
        q8_gate(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
