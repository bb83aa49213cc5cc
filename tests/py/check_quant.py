#!/usr/bin/env python3
"""Cross-check ptxlm's quant formats against the gguf Python package.

1. The type table (block elements and bytes) against gguf.constants.GGML_QUANT_SIZES.
2. Dequantization: seeded random blocks (random bytes, f16 scale fields set
   to finite values with |d| in [1e-4, 10]) through gguf.quants.dequantize and
   through `quant_tool dequant`; the outputs must be bit-identical (uint32 views).
   F16 and BF16 are checked over all 65536 bit patterns.
3. Quantization: seeded gaussian and uniform data through gguf.quants.quantize
   and `quant_tool quantize`, for the types gguf-py can quantize. Where both
   follow ggml's reference rule the bytes must match; everywhere our error must
   be no worse than 1.1x gguf-py's. Types gguf-py cannot quantize (Q2_K, Q3_K,
   IQ4_NL, IQ4_XS): our bytes, decoded by gguf-py's dequantizer, must round-trip
   within ROUND_TRIP_BOUND (relative RMS error), so the files we write decode
   as llama.cpp decodes them with the stated error.
4. A GGUF file: those types' tensors from our quantizer written with gguf-py's
   GGUFWriter and read back with GGUFReader (type ids and byte shapes as
   llama.cpp loads them), decoded by gguf-py bit for bit as by quant_tool.

Known differences between gguf-py and ggml are listed in KNOWN with the reason
and printed as such; they are not silent passes and not failures. Anything
else that differs fails (exit 1).

The tool is --tool PATH, or $PTXLM_BINARY_DIR/tests/quant_tool.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize as gg_dequantize, quantize as gg_quantize

# Offsets of f16 scale fields per block: set to sane values in random blocks
# so no inf/NaN arithmetic happens (both sides would agree on NaN anyway, but
# a NaN compare says nothing about operation order).
F16_FIELDS = {
    "Q4_0": [0], "Q5_0": [0], "Q8_0": [0],
    "Q4_1": [0, 2], "Q5_1": [0, 2],
    "Q2_K": [80, 82], "Q3_K": [108],
    "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0],
}

KNOWN = {
    # Type-table disagreements: name -> reason.
    "Q8_1": "gguf-py's GGML_QUANT_SIZES says 40 bytes (the old f32 d, f32 s layout); "
            "ggml's block_q8_1 is 36 bytes (f16 d, f16 s); ptxlm follows ggml. "
            "gguf-py has no Q8_1 dequantizer either, so it is not compared",
    "Q8_K": "gguf-py has no Q8_K dequantizer: not compared (checked by test_quant)",
}

# Relative RMS error bounds of our quantizers where gguf-py has none to
# compare with, per data set: the values test_quant measures and bounds (its
# kErrorBounds; "weights" is gaussian data scaled by 0.02). Measured here:
#   Q2_K .2680/.2218/.2679  Q3_K .1437/.1185/.1440
#   IQ4_NL .0738/.0625/.0738  IQ4_XS .0741/.0627/.0741
ROUND_TRIP_BOUND = {
    "Q2_K": {"gaussian": 0.31, "uniform": 0.255, "weights": 0.31},
    "Q3_K": {"gaussian": 0.166, "uniform": 0.136, "weights": 0.166},
    "IQ4_NL": {"gaussian": 0.085, "uniform": 0.072, "weights": 0.085},
    "IQ4_XS": {"gaussian": 0.085, "uniform": 0.072, "weights": 0.085},
}

# Our quantizers that follow ggml's reference rule exactly: bytes must match.
SAME_RULE = {"F16", "BF16", "Q8_0", "Q4_1", "Q5_1"}

FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print("  FAIL: " + msg)


def run_tool(tool, *args):
    r = subprocess.run([tool, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def our_types(tool):
    types = {}
    for line in run_tool(tool, "types").splitlines():
        name, tid, elems, nbytes, deq, quant = line.split()
        types[name] = dict(id=int(tid), elems=int(elems), bytes=int(nbytes),
                           dequant=deq == "1", quant=quant == "1")
    return types


def tool_dequant(tool, tmp, name, raw):
    src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    raw.tofile(src)
    run_tool(tool, "dequant", name, src, dst)
    return np.fromfile(dst, dtype="<f4")


def tool_quantize(tool, tmp, name, x):
    src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    x.astype("<f4").tofile(src)
    run_tool(tool, "quantize", name, src, dst)
    return np.fromfile(dst, dtype=np.uint8)


def random_f16_scales(rng, n):
    mag = np.exp(rng.uniform(np.log(1e-4), np.log(10.0), n))
    sign = np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)
    return (mag * sign).astype(np.float16).view(np.uint16)


def random_blocks(rng, name, nblocks, block_bytes):
    raw = rng.integers(0, 256, size=(nblocks, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS.get(name, []):
        h = random_f16_scales(rng, nblocks)
        raw[:, off] = (h & 0xFF).astype(np.uint8)
        raw[:, off + 1] = (h >> 8).astype(np.uint8)
    return raw


def compare_bits(name, ours, theirs, what):
    ours_u = np.ascontiguousarray(ours, dtype=np.float32).view(np.uint32).ravel()
    theirs_u = np.ascontiguousarray(theirs, dtype=np.float32).view(np.uint32).ravel()
    if ours_u.shape != theirs_u.shape:
        fail(f"{name}: {what}: {ours_u.size} values vs gguf-py's {theirs_u.size}")
        return False
    bad = np.nonzero(ours_u != theirs_u)[0]
    if bad.size:
        i = bad[0]
        fail(f"{name}: {what}: {bad.size} of {ours_u.size} values differ; first at {i}: "
             f"ours {ours_u[i]:#010x} gguf-py {theirs_u[i]:#010x}")
        return False
    return True


def check_table(types):
    print("== type table vs gguf.constants.GGML_QUANT_SIZES")
    for name, t in types.items():
        gg = GGML_QUANT_SIZES.get(T[name])
        if gg == (t["elems"], t["bytes"]) and T[name].value == t["id"]:
            print(f"  {name:5} id {t['id']:2}  {t['elems']:3} el / {t['bytes']:3} B  same")
        elif name in KNOWN and "GGML_QUANT_SIZES" in KNOWN[name]:
            print(f"  {name:5} KNOWN DIFFERENCE: ours {t['elems']} el / {t['bytes']} B, gguf-py {gg}: {KNOWN[name]}")
        else:
            fail(f"{name}: ours id {t['id']} {t['elems']} el / {t['bytes']} B, gguf-py id {T[name].value} {gg}")


def check_dequant(tool, tmp, types, rng):
    print("== dequantize: quant_tool vs gguf.quants.dequantize (bit-for-bit)")
    for name, t in types.items():
        if not t["dequant"]:
            continue
        if name in KNOWN:
            print(f"  {name:5} NOT COMPARED: {KNOWN[name]}")
            continue
        if name in ("F16", "BF16"):   # every bit pattern
            raw = np.arange(65536, dtype=np.uint32).astype("<u2").view(np.uint8)
        elif name == "F32":
            raw = rng.integers(0, 2**32, size=4096, dtype=np.uint64).astype("<u4")
            raw = raw[(raw & 0x7F800000) != 0x7F800000].view(np.uint8)   # finite
        else:
            raw = random_blocks(rng, name, 2048, t["bytes"]).ravel()
        ours = tool_dequant(tool, tmp, name, raw)
        theirs = gg_dequantize(raw.reshape(1, -1), T[name]).ravel()
        if name == "F16":
            # gguf-py converts with numpy, which keeps a signalling NaN
            # signalling; ggml (F16C, or its bit-trick fallback, which ends in
            # a float multiply) and ptxlm return it quiet. Compare every
            # non-NaN bit pattern exactly, and NaN as NaN with sign and payload.
            nan = np.isnan(theirs)
            ok = compare_bits(name, ours[~nan], theirs[~nan], "non-NaN values")
            ou, tu = ours[nan].view(np.uint32), theirs[nan].view(np.uint32)
            if not np.all(np.isnan(ours[nan])) or not np.array_equal(ou | 0x00400000, tu | 0x00400000):
                fail("F16: NaN inputs: sign/payload differ beyond the quiet bit")
                ok = False
            n_snan = int(np.count_nonzero(ou != tu))
            if ok:
                print(f"  {name:5} {ours.size} values bit-identical except {n_snan} signalling NaNs: "
                      "KNOWN DIFFERENCE (numpy keeps them signalling, ggml/ptxlm quiet them)")
            continue
        if compare_bits(name, ours, theirs, "dequantized values"):
            print(f"  {name:5} {ours.size:7} values bit-identical")


def rel_rms(x, y):
    x = x.astype(np.float64).ravel()
    y = y.astype(np.float64).ravel()
    return float(np.sqrt(np.sum((y - x) ** 2) / np.sum(x ** 2)))


def check_quantize(tool, tmp, types, rng):
    print("== quantize: quant_tool vs gguf.quants.quantize")
    data = {
        "gaussian": rng.standard_normal((64, 4096)).astype(np.float32),
        "uniform": rng.uniform(-1.0, 1.0, (64, 4096)).astype(np.float32),
        "weights": (0.02 * rng.standard_normal((64, 4096))).astype(np.float32),
    }
    for name, t in types.items():
        if not t["quant"] or name == "F32":
            continue
        try:
            gg_quantize(np.zeros((1, 256), dtype=np.float32), T[name])
        except NotImplementedError:
            if name not in ROUND_TRIP_BOUND:
                print(f"  {name:5} gguf-py has no quantizer: not compared")
                continue
            for kind, x in data.items():
                ours_b = tool_quantize(tool, tmp, name, x)
                e = rel_rms(x, gg_dequantize(ours_b.reshape(64, -1), T[name]))
                bound = ROUND_TRIP_BOUND[name][kind]
                print(f"  {name:5} {kind:8} gguf-py has no quantizer; ours through gguf-py's "
                      f"dequantizer: rel RMS {e:.5f} (bound {bound})")
                if not e < bound:
                    fail(f"{name} {kind}: round trip rel RMS {e:.5f} over the bound {bound}")
            continue
        for kind, x in data.items():
            ours_b = tool_quantize(tool, tmp, name, x)
            theirs_b = np.asarray(gg_quantize(x, T[name])).view(np.uint8).ravel()
            if ours_b.size != theirs_b.size:
                fail(f"{name} {kind}: {ours_b.size} bytes vs gguf-py's {theirs_b.size}")
                continue
            nb = ours_b.size // t["bytes"]
            same_blocks = int(np.count_nonzero(
                np.all(ours_b.reshape(nb, -1) == theirs_b.reshape(nb, -1), axis=1)))
            e_ours = rel_rms(x, gg_dequantize(ours_b.reshape(64, -1), T[name]))
            e_theirs = rel_rms(x, gg_dequantize(theirs_b.reshape(64, -1), T[name]))
            ratio = e_ours / e_theirs if e_theirs > 0 else (1.0 if e_ours == 0 else np.inf)
            print(f"  {name:5} {kind:8} bytes {'identical' if same_blocks == nb else f'{same_blocks}/{nb} blocks same'}; "
                  f"rel RMS ours {e_ours:.5f} gguf-py {e_theirs:.5f} (x{ratio:.3f})")
            if name in SAME_RULE and same_blocks != nb:
                fail(f"{name} {kind}: same rule as ggml/gguf-py but {nb - same_blocks} blocks differ")
            if ratio > 1.1:
                fail(f"{name} {kind}: our error {e_ours:.5f} is {ratio:.3f}x gguf-py's {e_theirs:.5f}")


def check_gguf_file(tool, tmp, types, rng):
    """Our quantizer's bytes in a GGUF file, as llama.cpp would load them: written
    with gguf-py's GGUFWriter (type id and byte shape as a llama.cpp tensor
    info), read back with GGUFReader, and dequantized by gguf-py bit for bit
    as quant_tool dequantizes them."""
    from gguf import GGUFReader, GGUFWriter
    print("== GGUF file: our quantizer's tensors through GGUFWriter/GGUFReader")
    names = [n for n in ROUND_TRIP_BOUND if types.get(n, {}).get("quant")]
    path = os.path.join(tmp, "ours.gguf")
    w = GGUFWriter(path, "llama")
    blobs = {}
    for name in names:
        x = (0.02 * rng.standard_normal((4, 512))).astype(np.float32)
        raw = tool_quantize(tool, tmp, name, x).reshape(4, -1)
        blobs[name] = raw
        w.add_tensor(f"t.{name}", raw, raw_dtype=T[name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    got = {t.name: t for t in GGUFReader(path).tensors}
    for name in names:
        t = got.get(f"t.{name}")
        if t is None or t.tensor_type != T[name] or list(t.shape) != [512, 4]:
            fail(f"{name}: tensor not read back as {name} [512, 4]")
            continue
        raw = np.asarray(t.data).view(np.uint8).reshape(4, -1)
        if not np.array_equal(raw, blobs[name]):
            fail(f"{name}: tensor bytes differ after the file round trip")
            continue
        ours = tool_dequant(tool, tmp, name, raw.ravel())
        if compare_bits(name, ours, gg_dequantize(raw, T[name]).ravel(), "file tensor"):
            print(f"  {name:6} [512, 4] read back from the file; gguf-py's values are ours bit for bit")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool", help="quant_tool binary (default $PTXLM_BINARY_DIR/tests/quant_tool)")
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args()
    tool = args.tool
    if not tool:
        bindir = os.environ.get("PTXLM_BINARY_DIR")
        if not bindir:
            print("check_quant: pass --tool or set PTXLM_BINARY_DIR", file=sys.stderr)
            return 2
        tool = os.path.join(bindir, "tests", "quant_tool")
    if not os.access(tool, os.X_OK):
        print(f"check_quant: no executable quant_tool at {tool}", file=sys.stderr)
        return 2

    rng = np.random.default_rng(args.seed)
    types = our_types(tool)
    with tempfile.TemporaryDirectory() as tmp:
        check_table(types)
        check_dequant(tool, tmp, types, rng)
        check_quantize(tool, tmp, types, rng)
        check_gguf_file(tool, tmp, types, rng)
    if FAILURES:
        print(f"check_quant: {len(FAILURES)} failure(s)")
        return 1
    print("check_quant: all compared types agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
