"""The SASS that ptxas makes of our kernels, read per hot loop.

Each kernel is assembled by ptxas for the target (`-arch=sm_XX` and nothing
else, as kernels/ptx/ptxas.cpp does: ptxas's default -O3) and disassembled
by nvdisasm (the venv's, from requirements.txt). A backward branch (a BRA to
a label at or before it, predicated or not) closes a loop whose body is
[label, branch]; the innermost loops (containing no other backward branch)
are reported with their static instruction counts per iteration of the SASS
loop (after whatever unrolling ptxas did), by class and by raw opcode.

Every count is warp-level and static: one SASS instruction is issued once
per warp, and a global load of W bytes per lane counts 32 x W bytes per warp
whether its predicate is on or not, and whether lanes share addresses or not
(a block header every lane of the block loads counts once per lane).

An innermost loop with global loads is a staging loop if it also stores to
shared memory (our GEMV kernels first copy the input vector into shared
memory, 4x unrolled, so those loops load more bytes per iteration than the
weight loops), else a load loop. A kernel's hot loop is its load loop with
the most global load bytes per iteration (the first of equals). In our GEMV
kernels the load loops are the weight loops, one per fused segment, and the
weights are their only global loads, so `insts_per_global_byte` is
instructions per weight byte as the lanes load them. The gates check every
load loop, the hot one included.

    bench/sass -m MODEL.gguf [--arch sm_90] [--kernel REGEX] [--json]
    bench/sass --cubin FILE.cubin --kernel REGEX [--json]
    bench/sass --ptx FILE.ptx... [--forbid-conversions] [--max-conversions-per-byte X] [--max-insts-per-byte X]

The gates exit 1 naming every load loop that breaks them; usage errors and
tool failures exit 2 with one line (then ptxas's log, when it rejects a file).
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("PTXLM_BUILD_DIR", os.path.join(ROOT, "build"))
ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")
HOT_RULE = ("hot loop: the load loop (an innermost loop with global loads and no shared stores) with the most "
            "global load bytes per iteration; loops that also store to shared memory are staging copies")

# Base mnemonic (the opcode before its first '.') -> class; a U-prefixed
# mnemonic not listed is the uniform datapath; anything else is "other".
CLASSES = {
    "conversions": "I2F I2FP F2I F2F F2FP I2I I2IP FRND",
    "fp32": "FFMA FMUL FADD FMNMX FSEL FSET FSETP FSWZADD FCHK",
    # HADD2.F32 is how ptxas converts f16 to f32 on sm_86+ (a block scale: kept apart from
    # the per-weight conversions); HFMA2.MMA is also its way to set a constant.
    "half": "HFMA2 HMUL2 HADD2 HMNMX2 HSET2 HSETP2",
    "integer": "IMAD IADD3 IADD IMUL IMNMX ISETP IABS LEA VIADD VIADDMNMX VIMNMX ISCADD POPC FLO BREV",
    "idp": "IDP",
    "bitops": "LOP3 LOP SHF SHL SHR SGXT PRMT BFE BFI BMSK",
    "moves": "MOV SEL CS2R S2R S2UR P2R R2P PLOP3 VOTE",
    "shared_loads": "LDS LDSM",
    "shared_stores": "STS",
    "global_loads": "LDG LDGSTS",
    "global_stores": "STG RED ATOMG ATOM",
    "const_loads": "LDC ULDC",
    "shuffles": "SHFL",
    "barriers": "BAR",
    "mufu": "MUFU",
    "control": "BRA BRX JMP CALL RET EXIT BSSY BSYNC WARPSYNC ENDCOLLECTIVE NOP YIELD BMOV",
}
CLASS_OF = {m: c for c, ms in CLASSES.items() for m in ms.split()}
CLASS_NAMES = list(CLASSES) + ["uniform", "other"]
# Bytes per lane from a load's modifiers; none of these means 32 bits.
WIDTH = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}

INST = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:(@!?U?P\w+)\s+)?([A-Z0-9_.]+)\s*([^;]*);")
LABEL = re.compile(r"^\s*(\.L\w+):\s*$")
SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
TARGET = re.compile(r"`\((\.L\w+)\)")


def die(msg):
    print(f"sass: {msg}", file=sys.stderr)
    sys.exit(2)


def class_of(opcode):
    base = opcode.split(".")[0]
    return CLASS_OF.get(base) or ("uniform" if base.startswith("U") else "other")


def width(opcode):
    for m in reversed(opcode.split(".")[1:]):
        if m in WIDTH:
            return WIDTH[m]
    return 4


def find_ptxas(given):
    """As kernels/ptx/ptxas.cpp's find_ptxas: PTXLM_PTXAS, the toolkit, PATH."""
    if given and not os.access(given, os.X_OK):
        die(f"--ptxas {given}: not an executable")
    for p in (given, os.environ.get("PTXLM_PTXAS"), "/usr/local/cuda/bin/ptxas", shutil.which("ptxas")):
        if p and os.access(p, os.X_OK):
            return p
    die("no ptxas: set PTXLM_PTXAS, install the CUDA toolkit in /usr/local/cuda, or pass --ptxas PATH")


def find_nvdisasm(given):
    if given:
        if os.access(given, os.X_OK):
            return given
        die(f"--nvdisasm {given}: not an executable")
    # The nvidia-cuda-nvdisasm wheel puts it in site-packages/nvidia/cu<major>/bin.
    found = sorted(glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "*", "bin", "nvdisasm")))
    if found:
        return found[-1]
    die(f"no nvdisasm in {sys.prefix}: install requirements.txt (nvidia-cuda-nvdisasm; ./run.sh does) "
        "or pass --nvdisasm PATH")


def run(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        die(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}".rstrip())
    return p.stdout


def parse(text):
    """nvdisasm -c text -> {function: ([(addr, opcode, operands)], {label: addr})}."""
    funcs, cur, pending = {}, None, []
    for line in text.splitlines():
        if m := SECTION.match(line):
            cur = funcs.setdefault(m.group(1), ([], {}))
            pending = []
        elif cur is None:
            continue
        elif m := LABEL.match(line):
            pending.append(m.group(1))
        elif m := INST.match(line):
            addr = int(m.group(1), 16)
            for lab in pending:
                cur[1][lab] = addr
            pending = []
            cur[0].append((addr, m.group(3), m.group(4).strip()))
    for insts, _ in funcs.values():  # the NOPs that pad a function to its alignment
        while insts and insts[-1][1] == "NOP":
            insts.pop()
    return funcs


def loop_stats(body):
    classes, opcodes, ldg, lds = Counter(), Counter(), Counter(), Counter()
    for _, op, _ in body:
        c = class_of(op)
        classes[c] += 1
        opcodes[op] += 1
        if c == "global_loads":
            ldg[8 * width(op)] += 1
        elif c == "shared_loads":
            lds[8 * width(op)] += 1
    gbytes = sum(bits // 8 * 32 * n for bits, n in ldg.items())

    def per_byte(n):
        return n / gbytes if gbytes else None

    return {
        "insts": len(body),
        "global_load_bytes": gbytes,  # per warp per iteration
        "global_load_widths": {str(b): n for b, n in sorted(ldg.items())},
        "shared_load_bytes": sum(bits // 8 * 32 * n for bits, n in lds.items()),
        "shared_load_widths": {str(b): n for b, n in sorted(lds.items())},
        "classes": {c: classes[c] for c in CLASS_NAMES},
        "opcodes": dict(sorted(opcodes.items())),
        "insts_per_global_byte": per_byte(len(body)),
        "conversions_per_global_byte": per_byte(classes["conversions"]),
        "shared_loads_per_global_byte": per_byte(classes["shared_loads"]),
    }


def analyse(name, insts, labels):
    # Backward branches: (target address, branch address, label). A branch to
    # itself is left out: it is the trap ptxas puts after the last EXIT.
    back = []
    for addr, op, operands in insts:
        t = TARGET.search(operands)
        if op.startswith("BRA") and t and t.group(1) in labels and labels[t.group(1)] < addr:
            back.append((labels[t.group(1)], addr, t.group(1)))
    loops = []
    for start, end, label in back:
        if any(start <= b < end for _, b, _ in back if b != end):
            continue
        body = [i for i in insts if start <= i[0] <= end]
        lp = {"label": label, "start": f"0x{start:04x}", "end": f"0x{end:04x}", **loop_stats(body)}
        lp["kind"] = ("" if not lp["global_load_bytes"] else "staging" if lp["classes"]["shared_stores"]
                      else "load")
        lp["hot"] = False
        loops.append(lp)
    load = [lp for lp in loops if lp["kind"] == "load"]
    if load:
        max(load, key=lambda lp: lp["global_load_bytes"])["hot"] = True
    return {"name": name, "total_insts": len(insts), "loops": loops}


def kernels_of(a, tmp):
    """The .ptx files to assemble, with a filter on file names when they are kernel names."""
    if a.model:
        ptxlm = os.environ.get("PTXLM_BIN") or os.path.join(BUILD, "tools", "ptxlm", "ptxlm")
        if not os.access(ptxlm, os.X_OK):
            die(f"no ptxlm binary at {ptxlm}: build it (./run.sh build) or set PTXLM_BIN")
        run([ptxlm, "ptx", "-m", a.model, "--out", tmp, "--arch", a.arch, "--schedule", a.schedule,
             "--gpu-path", a.gpu_path or "default"], "ptxlm ptx")
        files = sorted(glob.glob(os.path.join(tmp, "*.ptx")))
        return [f for f in files if re.search(a.kernel, os.path.basename(f)[:-4])]
    for f in a.ptx:
        if not os.path.isfile(f):
            die(f"--ptx {f}: no such file")
    return a.ptx


def report(a):
    ptxas, nvdisasm = find_ptxas(a.ptxas), find_nvdisasm(a.nvdisasm)
    out = []
    if a.cubin:   # a cubin compiled elsewhere (a peer's kernels, bench/peer-mmvq): disassembled as it is
        if not os.path.isfile(a.cubin):
            die(f"--cubin {a.cubin}: no such file")
        for name, (insts, labels) in parse(run([nvdisasm, "-c", a.cubin], f"nvdisasm on {a.cubin}")).items():
            if re.search(a.kernel, name):
                out.append({"file": os.path.basename(a.cubin), **analyse(name, insts, labels)})
    with tempfile.TemporaryDirectory(prefix="ptxlm-sass-") as tmp:
        for i, f in enumerate(kernels_of(a, tmp) if not a.cubin else []):
            cubin = os.path.join(tmp, f"{i}.cubin")
            run([ptxas, f"-arch={a.arch}", f, "-o", cubin], f"ptxas on {f}")
            for name, (insts, labels) in parse(run([nvdisasm, "-c", cubin], f"nvdisasm on {f}")).items():
                if re.search(a.kernel, name):
                    out.append({"file": os.path.basename(f), **analyse(name, insts, labels)})
    if not out:
        die(f"no kernel matched --kernel '{a.kernel}'")
    return out


def violations(kernels, a):
    bad = []
    for k in kernels:
        for lp in (lp for lp in k["loops"] if lp["kind"] == "load"):
            where = f"{k['name']} {'hot' if lp['hot'] else 'load'} loop {lp['start']}-{lp['end']}"
            if a.forbid_conversions and lp["classes"]["conversions"]:
                bad.append(f"{where}: {lp['classes']['conversions']} conversions per iteration (--forbid-conversions)")
            if a.max_conversions_per_byte is not None and lp["conversions_per_global_byte"] > a.max_conversions_per_byte:
                bad.append(f"{where}: {lp['conversions_per_global_byte']:.4f} conversions per global byte "
                           f"> {a.max_conversions_per_byte} (--max-conversions-per-byte)")
            if a.max_insts_per_byte is not None and lp["insts_per_global_byte"] > a.max_insts_per_byte:
                bad.append(f"{where}: {lp['insts_per_global_byte']:.4f} instructions per global byte "
                           f"> {a.max_insts_per_byte} (--max-insts-per-byte)")
    return bad


def widths(w):
    return " ".join(f"{n}x{b}" for b, n in w.items()) or "-"


def ratio(x):
    return "-" if x is None else f"{x:.4f}"


def markdown(kernels, a):
    rows = [f"# SASS per loop ({a.arch}, ptxas -arch={a.arch}, nvdisasm)", "",
            "Static warp-level counts per iteration of each innermost SASS loop (after ptxas's unrolling); "
            "LDG B = global load bytes per warp per iteration (lane width x 32, predicated or not; lanes that load "
            "the same address count once each); widths as count x bits. In our GEMV kernels the load loops are "
            "the weight loops and their only global loads are the weights, so insts/B is instructions per weight "
            f"byte as the lanes load them. The {HOT_RULE}.", "",
            "| kernel (static insts) | loop | kind | insts | LDG B | LDG widths | insts/B | cvt | cvt/B | fp32 | int "
            "| idp | half | bitops | LDS (widths) | STS | shfl | bar | mufu | other |",
            "|" + "---|" * 20]
    rest = ("moves", "const_loads", "global_stores", "uniform", "control", "other")
    for k in kernels:
        loops = [lp for lp in k["loops"] if lp["kind"] == "load" or not a.load_loops]
        if not loops:
            rows.append(f"| {k['name']} ({k['total_insts']}) | no loop |" + " |" * 18)
        for lp in loops:
            n = lp["classes"]
            cells = [f"{k['name']} ({k['total_insts']})", f"{lp['start']}-{lp['end']}",
                     "**hot**" if lp["hot"] else lp["kind"], lp["insts"], lp["global_load_bytes"],
                     widths(lp["global_load_widths"]), ratio(lp["insts_per_global_byte"]), n["conversions"],
                     ratio(lp["conversions_per_global_byte"]), n["fp32"], n["integer"], n["idp"], n["half"],
                     n["bitops"], f"{n['shared_loads']} ({widths(lp['shared_load_widths'])})", n["shared_stores"],
                     n["shuffles"], n["barriers"], n["mufu"], sum(n[x] for x in rest)]
            rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    rows.append("")
    rows.append("other = moves, constant loads, global stores, uniform datapath, control and unclassified; "
                "--json has every class and the raw opcode histogram.")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("-m", "--model", help="GGUF model: its decode chain's kernels (ptxlm ptx)")
    src.add_argument("--ptx", nargs="+", metavar="FILE", help="hand-written or saved .ptx files")
    src.add_argument("--cubin", metavar="FILE", help="a cubin built elsewhere (e.g. a peer's kernels by nvcc), "
                     "disassembled as it is (--arch does not apply)")
    ap.add_argument("--arch", default="sm_90", choices=ARCHS, help="target (default sm_90)")
    ap.add_argument("--schedule", default="graph", choices=("graph", "persistent"), help="with -m (default graph)")
    ap.add_argument("--gpu-path", choices=("quantized", "reference"),
                    help="with -m: the GEMVs' inputs, 8-bit or f32 (ptxlm ptx --gpu-path; default: the schedule's)")
    ap.add_argument("--kernel", default="", metavar="REGEX", help="only kernels whose name matches")
    ap.add_argument("--json", action="store_true", help="JSON on stdout instead of the Markdown table")
    ap.add_argument("--load-loops", action="store_true", help="the table shows load loops only")
    ap.add_argument("--ptxas", help="ptxas to use (default: $PTXLM_PTXAS, /usr/local/cuda/bin/ptxas, PATH)")
    ap.add_argument("--nvdisasm", help="nvdisasm to use (default: the venv's)")
    ap.add_argument("--max-insts-per-byte", type=float, metavar="X",
                    help="exit 1 if a load loop issues more than X instructions per global byte")
    ap.add_argument("--forbid-conversions", action="store_true",
                    help="exit 1 if a load loop converts (I2F, F2F, ...)")
    ap.add_argument("--max-conversions-per-byte", type=float, metavar="X",
                    help="exit 1 if a load loop converts more than X times per global byte (a conversion per "
                         "block passes, one per weight fails)")
    a = ap.parse_args()
    try:
        re.compile(a.kernel)
    except re.error as e:
        die(f"--kernel '{a.kernel}': {e}")
    kernels = report(a)
    bad = violations(kernels, a)
    if a.json:
        print(json.dumps({"arch": a.arch, "hot_rule": HOT_RULE, "kernels": kernels, "violations": bad}, indent=1))
    else:
        print(markdown(kernels, a))
    for b in bad:
        print(f"sass: FAIL {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
