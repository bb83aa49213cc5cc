#!/usr/bin/env python3
"""Cross-check our GGUF reader (and writer) against gguf-py's GGUFReader.

  check_gguf.py --tool GGUF_TOOL --sample
      writes sample files with our Writer (alignment 32 and 64), then checks
      that gguf-py reads them exactly as our reader does.
  check_gguf.py --tool GGUF_TOOL FILE...
      the same comparison on existing files (the real models). A missing file
      is a failure, not a skip.

The comparison covers version, alignment, data offset, every key (type, array
element type, value; long arrays by count and SHA-256 of the stored element
bytes) and every tensor (name, type, ne, offset, size, SHA-256 of its bytes).
"""
import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFValueType

HASH_OVER = 64  # arrays longer than this are compared by hash (gguf_tool dump --hash-over)


class Mismatch(Exception):
    pass


def ours(tool, path, hash_over):
    out = subprocess.run([tool, "dump", path, "--hash-over", str(hash_over)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def py_string(part):
    raw = part.tobytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": raw.hex()}


def py_scalar(vtype, part):
    v = part.tolist()[0]
    if vtype in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return float(v)
    if vtype == GGUFValueType.BOOL:
        return bool(v)
    return int(v)


def same_value(a, b):
    # -0.0 == 0.0 in Python; compare floats by sign too so a lost sign shows.
    if isinstance(a, float) and isinstance(b, (float, int)):
        return a == b and math.copysign(1, a) == math.copysign(1, float(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return a == b


def theirs_kv(field, hash_over):
    """gguf-py's view of one key in the shape gguf_tool dump prints."""
    main = field.types[0]
    out = {"key": field.name, "type": int(main)}
    if main == GGUFValueType.STRING:
        out["value"] = py_string(field.parts[-1])
        return out
    if main != GGUFValueType.ARRAY:
        out["value"] = py_scalar(main, field.parts[-1])
        return out
    # parts: key len, key, type, elem type, count, then the elements.
    elem = GGUFValueType(int(field.parts[3][0]))
    count = int(field.parts[4][0])
    out["elem_type"] = int(elem)
    out["count"] = count
    if len(field.types) > 1 and field.types[-1] != elem:
        raise Mismatch(f"{field.name}: gguf-py element type {field.types[-1]} != stored {elem}")
    if count > hash_over:
        h = hashlib.sha256()
        if elem == GGUFValueType.STRING:
            for i in field.data:  # each string: its length part precedes its bytes
                h.update(field.parts[i - 1].tobytes())
                h.update(field.parts[i].tobytes())
        else:
            for i in field.data:
                h.update(field.parts[i].tobytes())
        out["sha256"] = h.hexdigest()
    elif elem == GGUFValueType.STRING:
        out["value"] = [py_string(field.parts[i]) for i in field.data]
    else:
        out["value"] = [py_scalar(elem, field.parts[i]) for i in field.data]
    return out


def compare(tool, path, hash_over=HASH_OVER):
    mine = ours(tool, path, hash_over)
    r = GGUFReader(path)
    problems = []

    def check(what, a, b):
        if not same_value(a, b):
            problems.append(f"{what}: ours {a!r} != gguf-py {b!r}")

    check("version", mine["version"], int(r.fields["GGUF.version"].parts[0][0]))
    check("alignment", mine["alignment"], int(r.alignment))
    check("data_offset", mine["data_offset"], int(r.data_offset))

    fields = [f for name, f in r.fields.items() if not name.startswith("GGUF.")]
    check("key order", [kv["key"] for kv in mine["metadata"]], [f.name for f in fields])
    for kv, field in zip(mine["metadata"], fields):
        t = theirs_kv(field, hash_over)
        for k in sorted(set(kv) | set(t)):
            check(f"key {kv['key']!r} {k}", kv.get(k), t.get(k))

    check("tensor order", [t["name"] for t in mine["tensors"]], [t.name for t in r.tensors])
    for t, rt in zip(mine["tensors"], r.tensors):
        name = t["name"]
        check(f"tensor {name} type", t["type"], int(rt.tensor_type))
        # gguf-py's shape is ne in file order (ne[0] first); its data array is
        # reshaped the other way round (numpy order), which we do not use.
        check(f"tensor {name} ne", t["ne"], [int(d) for d in rt.shape])
        check(f"tensor {name} offset", t["offset"], int(rt.data_offset) - int(r.data_offset))
        check(f"tensor {name} n_bytes", t["n_bytes"], int(rt.n_bytes))
        data = np.ascontiguousarray(rt.data).view(np.uint8).reshape(-1)
        check(f"tensor {name} bytes", t["n_bytes"], int(data.size))
        check(f"tensor {name} sha256", t["sha256"], hashlib.sha256(data).hexdigest())

    if problems:
        raise Mismatch(f"{path}:\n  " + "\n  ".join(problems[:40]))
    return mine


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, help="path to gguf_tool")
    ap.add_argument("--sample", action="store_true", help="check files written by our writer")
    ap.add_argument("files", nargs="*", help="existing GGUF files to compare")
    args = ap.parse_args()
    if not args.sample and not args.files:
        ap.error("nothing to check: give --sample or files")

    missing = [f for f in args.files if not os.path.isfile(f)]
    if missing:
        for f in missing:
            print(f"FAIL: model file {f} is missing; run ./run.sh test or models/fetch to download it",
                  file=sys.stderr)
        return 1

    failures = 0
    checked = 0
    if args.sample:
        with tempfile.TemporaryDirectory() as tmp:
            for alignment in (32, 64):
                path = os.path.join(tmp, f"sample_align{alignment}.gguf")
                subprocess.run([args.tool, "write-sample", path, "--alignment", str(alignment)], check=True)
                # Once with arrays in full, once with every array hashed.
                for hash_over in (1 << 62, 0):
                    try:
                        mine = compare(args.tool, path, hash_over)
                        checked += 1
                        if mine["alignment"] != alignment:
                            raise Mismatch(f"{path}: alignment {mine['alignment']}, wrote {alignment}")
                        for t in mine["tensors"]:
                            if t["offset"] % alignment:
                                raise Mismatch(f"{path}: tensor {t['name']} offset {t['offset']} not aligned")
                        print(f"ok: {os.path.basename(path)} (hash over {hash_over}): "
                              f"{len(mine['metadata'])} keys, {len(mine['tensors'])} tensors match gguf-py")
                    except Mismatch as e:
                        print(f"FAIL: {e}", file=sys.stderr)
                        failures += 1
    for f in args.files:
        try:
            mine = compare(args.tool, f)
            checked += 1
            print(f"ok: {f}: {len(mine['metadata'])} keys, {len(mine['tensors'])} tensors, "
                  f"{sum(t['n_bytes'] for t in mine['tensors'])} tensor bytes match gguf-py")
        except Mismatch as e:
            print(f"FAIL: {e}", file=sys.stderr)
            failures += 1
    print(f"{checked} checks passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
