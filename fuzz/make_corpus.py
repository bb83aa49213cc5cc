#!/usr/bin/env python3
"""Writes the GGUF test corpus (run on /work/main/.venv python; needs gguf, numpy).

  tests/corpus/gguf/        malformed files, each named by what it breaks; the
                            reader must reject every one with a gguf::Error
                            (tests/test_gguf.cpp maps each name to the words
                            its message must contain).
  tests/corpus/gguf-valid/  valid files that must parse; they also seed the fuzzer.

The malformed files are built byte by byte (the writer libraries refuse to
produce them); one valid seed is written by gguf-py's GGUFWriter. Output is
deterministic. Files found by the fuzzer are added to tests/corpus/gguf by
hand (named fuzz_*.gguf) and are left alone here.

  .venv/bin/python fuzz/make_corpus.py [--out-dir tests/corpus]
"""
import argparse
import os
import struct

import numpy as np

# Value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
# ggml types used here.
T_F32, T_F16, T_Q4_0, T_Q8_0, T_Q4_K, T_Q6_K = 0, 1, 2, 8, 12, 14


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b)) + b


def kv(key, vtype, payload):
    return gstr(key) + u32(vtype) + payload


def kv_u32(key, v):
    return kv(key, U32, u32(v))


def kv_str(key, s):
    return kv(key, STRING, gstr(s))


def kv_arr(key, elem, count, elems):
    return kv(key, ARRAY, u32(elem) + u64(count) + elems)


def tinfo(name, ne, ggml_type, offset):
    return gstr(name) + u32(len(ne)) + b"".join(u64(d) for d in ne) + u32(ggml_type) + u64(offset)


def pad(n, a):
    return (a - n % a) % a


def gguf(kvs=(), tensors=(), data=b"", version=3, n_tensors=None, n_kv=None, align=32, magic=b"GGUF"):
    """A file from pieces; counts default to the pieces given."""
    head = magic + u32(version) + u64(len(tensors) if n_tensors is None else n_tensors) + \
        u64(len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tensors)
    if tensors:
        body += b"\0" * pad(len(body), align)
    return body + data


def f32s(*v):
    return struct.pack(f"<{len(v)}f", *v)


def data_bytes(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


# ---- the valid small file, with its section boundaries ----------------------

def valid_small(version=3):
    """Returns (bytes, {boundary name: offset}) for a small valid file."""
    kvs = [
        kv_str("general.architecture", "test"),
        kv_u32("test.block_count", 2),
        kv_arr("test.scores", F32, 3, f32s(0.5, -1.0, 2.0)),
        kv_arr("tokenizer.ggml.tokens", STRING, 3, gstr("<s>") + gstr("a") + gstr("bc")),
    ]
    # F32 [8,2] = 64 B at 0; Q8_0 [32,2] = 68 B at 64; F16 [4] = 8 B at 160.
    tensors = [
        tinfo("tok.weight", [8, 2], T_F32, 0),
        tinfo("q8.weight", [32, 2], T_Q8_0, 64),
        tinfo("f16.weight", [4], T_F16, 160),
    ]
    data = data_bytes(64, 1) + data_bytes(68, 2) + b"\0" * 28 + data_bytes(8, 3) + b"\0" * 24
    b = gguf(kvs, tensors, data, version=version)
    marks = {}
    pos = 24
    marks["first_key"] = pos
    marks["first_type"] = pos + 8 + len("general.architecture")
    marks["first_value"] = marks["first_type"] + 4
    for k in kvs[:-1]:
        pos += len(k)
    marks["last_kv"] = pos
    pos += len(kvs[-1])
    marks["tensor_infos"] = pos
    marks["second_tensor_info"] = pos + len(tensors[0])
    pos += sum(len(t) for t in tensors)
    marks["end_of_infos"] = pos
    marks["data"] = pos + pad(pos, 32)
    return b, marks


def malformed():
    """name -> bytes for every hand-built malformed file."""
    small, m = valid_small()
    ok_kv = kv_u32("test.ok", 1)
    f32_8 = tinfo("t.weight", [8], T_F32, 0)
    d32 = data_bytes(32, 7)
    out = {}

    # Header.
    out["bad_magic"] = b"GGML" + small[4:]
    out["version1"] = small[:4] + u32(1) + small[8:]
    out["version_huge"] = small[:4] + u32(0xFFFFFFFF) + small[8:]
    out["trunc_header"] = small[:20]
    out["huge_kv_count"] = gguf([ok_kv], n_kv=1 << 62)
    out["huge_tensor_count"] = gguf([ok_kv], n_tensors=1 << 62)

    # Keys and values.
    out["trunc_kv_key"] = gguf(n_kv=1) + u64(40) + b"general.arch"
    out["trunc_kv_value"] = gguf(n_kv=1) + gstr("k.x") + u32(U32) + b"\x01\x02"
    out["huge_key_len"] = gguf(n_kv=1) + u64(0xFFFFFFFFFFFFFFFF) + b"general.architecture" + u32(U8) + b"\0"
    out["empty_key"] = gguf([kv_u32("", 1)])
    out["long_key"] = gguf([kv_u32("k" * 257, 1)])
    out["nul_in_key"] = gguf([kv_u32("gen\0eral.x", 1)])
    out["dup_key"] = gguf([kv_u32("test.a", 1), ok_kv, kv_u32("test.a", 2)])
    out["bad_value_type"] = gguf([kv("test.x", 13, u32(0))])
    out["bad_bool"] = gguf([kv("test.flag", BOOL, b"\x02")])
    out["huge_string_len"] = gguf([kv("general.name", STRING, u64(1 << 63) + b"abc")])
    out["nested_array"] = gguf([kv_arr("test.nested", ARRAY, 1, u32(U32) + u64(1) + u32(5))])
    out["bad_array_elem_type"] = gguf([kv_arr("test.arr", 42, 1, u32(5))])
    out["huge_array_count"] = gguf([kv_arr("test.arr", U32, 1 << 61, u32(1) + u32(2) + u32(3))])
    out["huge_string_array_count"] = gguf([kv_arr("tokenizer.ggml.tokens", STRING, 1 << 60, gstr("a"))])
    out["string_array_elem_past_end"] = gguf([kv_arr("tokenizer.ggml.tokens", STRING, 2, gstr("a") + u64(1000) + b"xyz")])
    out["bad_bool_array"] = gguf([kv_arr("test.flags", BOOL, 3, b"\x01\x00\x07")])

    # Alignment.
    out["bad_alignment_zero"] = gguf([kv_u32("general.alignment", 0)], [f32_8], d32)
    out["bad_alignment_npot"] = gguf([kv_u32("general.alignment", 48)], [f32_8], d32)
    out["alignment_wrong_type"] = gguf([kv("general.alignment", U64, u64(64))], [f32_8], d32)

    # Tensor infos.
    out["dup_tensor"] = gguf([ok_kv], [f32_8, tinfo("t.weight", [8], T_F32, 32)], d32 * 2)
    out["empty_tensor_name"] = gguf([ok_kv], [tinfo("", [8], T_F32, 0)], d32)
    out["long_tensor_name"] = gguf([ok_kv], [tinfo("x" * 64, [8], T_F32, 0)], d32)
    out["huge_tensor_name_len"] = gguf([ok_kv], n_tensors=1) + u64(1 << 63) + b"t.weight" + b"\0" * 40
    out["bad_ndims"] = gguf([ok_kv], [tinfo("t.weight", [8, 1, 1, 1, 1], T_F32, 0)], d32)
    out["zero_ndims"] = gguf([ok_kv], [tinfo("t.weight", [], T_F32, 0)] , d32)
    out["zero_dim"] = gguf([ok_kv], [tinfo("t.weight", [8, 0], T_F32, 0)], d32)
    out["dim_over_int64"] = gguf([ok_kv], [tinfo("t.weight", [1 << 63], T_F32, 0)], d32)
    out["dims_overflow"] = gguf([ok_kv], [tinfo("t.weight", [1 << 32, 1 << 32], T_F32, 0)], d32)
    out["tensor_bytes_overflow"] = gguf([ok_kv], [tinfo("t.weight", [1 << 62], T_F32, 0)], d32)
    out["bad_ggml_type"] = gguf([ok_kv], [tinfo("t.weight", [8], 99, 0)], d32)
    out["row_not_block_multiple"] = gguf([ok_kv], [tinfo("t.weight", [100, 2], T_Q4_K, 0)], data_bytes(288, 8))
    out["misaligned_offset"] = gguf([ok_kv], [tinfo("t.weight", [4], T_F32, 16)], d32)

    # Tensor data.
    out["offset_past_end"] = gguf([ok_kv], [tinfo("t.weight", [8], T_F32, 4096)], d32)
    out["offset_wrap"] = gguf([ok_kv], [tinfo("t.weight", [16], T_F32, (1 << 64) - 32)], d32 * 2)
    out["overlapping_tensors"] = gguf(
        [ok_kv], [tinfo("a.weight", [16], T_F32, 0), tinfo("b.weight", [8], T_F32, 32)], d32 * 2)
    out["trunc_data"] = small[:len(small) - 40]
    out["data_section_past_end"] = gguf([kv_u32("general.alignment", 1 << 20)], [f32_8], d32)

    # Truncations of the valid small file at each section boundary.
    cuts = {
        "trunc_at_magic": 2,
        "trunc_at_version": 4,
        "trunc_at_tensor_count": 8,
        "trunc_at_kv_count": 16,
        "trunc_at_first_key": m["first_key"],
        "trunc_mid_first_key": m["first_key"] + 12,
        "trunc_at_first_type": m["first_type"],
        "trunc_at_first_value": m["first_value"],
        "trunc_at_last_kv": m["last_kv"],
        "trunc_mid_last_kv": m["tensor_infos"] - 3,
        "trunc_at_tensor_infos": m["tensor_infos"],
        "trunc_mid_tensor_info": m["second_tensor_info"] + 5,
        "trunc_at_end_of_infos": m["end_of_infos"],
        "trunc_at_data": m["data"],
        "trunc_mid_data": m["data"] + 100,
        "trunc_last_byte": len(small) - 25,  # the last tensor's final byte (the rest is padding)
    }
    for name, n in cuts.items():
        out[name] = small[:n]
    out["empty_file"] = b""
    return out


def valid():
    small, _ = valid_small()
    out = {
        "valid_small": small,
        "valid_v2": valid_small(version=2)[0],
        "valid_empty": gguf(),
        "valid_no_tensors": gguf([kv_str("general.architecture", "test"), kv_u32("test.n", 3)]),
        "valid_align64": gguf([kv_u32("general.alignment", 64), kv_str("general.architecture", "test")],
                              [tinfo("a.weight", [8], T_F32, 0), tinfo("b.weight", [16], T_F32, 64)],
                              data_bytes(32, 4) + b"\0" * 32 + data_bytes(64, 5), align=64),
        # Offsets need not be the running padded sum (ggml insists; we only
        # require alignment, extents inside the data and no overlap).
        "valid_unordered_offsets": gguf([kv_str("general.architecture", "test")],
                                        [tinfo("late.weight", [8], T_F32, 64), tinfo("early.weight", [8], T_F32, 0)],
                                        data_bytes(32, 6) + b"\0" * 32 + data_bytes(32, 7)),
    }
    return out


def write_gguf_py_sample(path):
    """A file written by gguf-py's own writer: every value type, several tensor types."""
    import gguf

    w = gguf.GGUFWriter(path, "sample")
    w.add_name("gguf-py sample")
    w.add_uint8("s.u8", 255)
    w.add_int8("s.i8", -128)
    w.add_uint16("s.u16", 65535)
    w.add_int16("s.i16", -32768)
    w.add_uint32("s.u32", 4294967295)
    w.add_int32("s.i32", -2147483648)
    w.add_float32("s.f32", 3.5)
    w.add_bool("s.bool", True)
    w.add_string("s.string", "gr\u00fc\u00dfe")
    w.add_string("s.empty", "")
    w.add_uint64("s.u64", 2**64 - 1)
    w.add_int64("s.i64", -2**63)
    w.add_float64("s.f64", -0.25)
    w.add_array("s.strings", ["x", "", "\u2713"])
    w.add_array("s.ints", [1, 2, 3])
    w.add_array("s.floats", [0.5, 1.5])
    w.add_array("s.empty_array", [])
    w.add_uint32("s.head_count", 4)
    w.add_array("s.head_count_kv", [1, 2])
    w.add_tensor("f32.weight", np.arange(16, dtype=np.float32).reshape(2, 8))
    w.add_tensor("f16.weight", np.arange(32, dtype=np.float16))
    w.add_tensor("q8_0.weight", np.frombuffer(data_bytes(68, 9), dtype=np.uint8).reshape(2, 34),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("q4_k.weight", np.frombuffer(data_bytes(144, 10), dtype=np.uint8).reshape(1, 144),
                 raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=os.path.normpath(os.path.join(here, "..", "tests", "corpus")))
    args = ap.parse_args()
    bad_dir = os.path.join(args.out_dir, "gguf")
    ok_dir = os.path.join(args.out_dir, "gguf-valid")
    os.makedirs(bad_dir, exist_ok=True)
    os.makedirs(ok_dir, exist_ok=True)
    for folder, files in ((bad_dir, malformed()), (ok_dir, valid())):
        for name, b in files.items():
            assert len(b) < 64 * 1024, name
            with open(os.path.join(folder, name + ".gguf"), "wb") as f:
                f.write(b)
    write_gguf_py_sample(os.path.join(ok_dir, "valid_gguf_py.gguf"))
    print(f"wrote {len(malformed())} malformed files to {bad_dir} and {len(valid()) + 1} valid files to {ok_dir}")


if __name__ == "__main__":
    main()
