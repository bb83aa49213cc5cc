// gguf_tool: a test-only helper for tests/py/check_gguf.py.
//
//   gguf_tool write-sample OUT [--alignment N]
//       writes, with our Writer, a file holding every metadata value type,
//       arrays of each (strings, empty ones included) and tensors of several
//       types and ranks.
//   gguf_tool dump FILE [--hash-over N]
//       prints our reader's view as JSON: version, alignment, data offset,
//       every key (type ids, value; arrays longer than N elements (default 64)
//       as count + SHA-256 of their raw element bytes as stored, strings with
//       their u64 length prefix) and every tensor (name, type id, ne, offset,
//       size, SHA-256 of its bytes).
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/writer.h"

using namespace ptxlm::gguf;
using json = nlohmann::ordered_json;

namespace {

// ---- SHA-256 (FIPS 180-4), enough for test hashing --------------------------
class Sha256 {
public:
    void update(const void* data, size_t n) {
        const auto* p = static_cast<const uint8_t*>(data);
        total_ += n;
        if (fill_ > 0) {
            const size_t k = std::min(n, size_t(64) - fill_);
            std::memcpy(buf_ + fill_, p, k);
            fill_ += k;
            p += k;
            n -= k;
            if (fill_ == 64) {
                block(buf_);
                fill_ = 0;
            }
        }
        for (; n >= 64; p += 64, n -= 64) block(p);
        std::memcpy(buf_, p, n);
        fill_ += n;
    }
    std::string hex() {
        const uint64_t bits = total_ * 8;
        const uint8_t one = 0x80, zero = 0;
        update(&one, 1);
        while (fill_ != 56) update(&zero, 1);
        uint8_t len[8];
        for (int i = 0; i < 8; ++i) len[i] = uint8_t(bits >> (56 - 8 * i));
        update(len, 8);
        std::string out;
        char tmp[9];
        for (uint32_t v : h_) {
            std::snprintf(tmp, sizeof tmp, "%08x", v);
            out += tmp;
        }
        return out;
    }

private:
    static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
    void block(const uint8_t* p) {
        static constexpr uint32_t k[64] = {
            0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
            0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
            0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
            0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
            0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
            0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
            0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
            0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
        uint32_t w[64];
        for (int i = 0; i < 16; ++i)
            w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
        for (int i = 16; i < 64; ++i) {
            const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
        for (int i = 0; i < 64; ++i) {
            const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
            const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
        }
        h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e, h_[5] += f, h_[6] += g, h_[7] += h;
    }
    uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    uint8_t buf_[64] = {};
    size_t fill_ = 0;
    uint64_t total_ = 0;
};

std::string sha256(const void* p, size_t n) {
    Sha256 s;
    s.update(p, n);
    return s.hex();
}

// ---- dump -------------------------------------------------------------------

// Strict UTF-8 as Python's decoder checks it: no overlongs, no surrogates,
// nothing above U+10FFFF.
bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = uint8_t(s[i]);
        size_t n;  // continuation bytes
        uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
        if (c < 0x80) n = 0;
        else if (c >= 0xC2 && c <= 0xDF) n = 1;
        else if (c >= 0xE0 && c <= 0xEF) n = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) n = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else return false;
        if (n > s.size() - i - 1) return false;
        for (size_t k = 1; k <= n; ++k) {
            const auto b = uint8_t(s[i + k]);
            if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return false;
        }
        i += n + 1;
    }
    return true;
}

json string_json(std::string_view s) {
    if (valid_utf8(s)) return std::string(s);
    std::string hex;
    char tmp[3];
    for (unsigned char c : s) {
        std::snprintf(tmp, sizeof tmp, "%02x", c);
        hex += tmp;
    }
    return json{{"hex", hex}};
}

json float_json(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return v;
}

template <class T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

json scalar_json(ValueType t, const uint8_t* p) {
    switch (t) {
        case ValueType::U8: return load<uint8_t>(p);
        case ValueType::I8: return load<int8_t>(p);
        case ValueType::U16: return load<uint16_t>(p);
        case ValueType::I16: return load<int16_t>(p);
        case ValueType::U32: return load<uint32_t>(p);
        case ValueType::I32: return load<int32_t>(p);
        case ValueType::F32: return float_json(load<float>(p));
        case ValueType::BOOL: return load<uint8_t>(p) != 0;
        case ValueType::U64: return load<uint64_t>(p);
        case ValueType::I64: return load<int64_t>(p);
        case ValueType::F64: return float_json(load<double>(p));
        default: return nullptr;
    }
}

json kv_json(const KeyValue& kv, uint64_t hash_over) {
    json j;
    j["key"] = kv.key;
    j["type"] = uint32_t(kv.type);
    if (kv.type == ValueType::STRING) {
        j["value"] = string_json(kv.strings[0]);
    } else if (!kv.is_array()) {
        j["value"] = scalar_json(kv.type, kv.raw.data());
    } else {
        j["elem_type"] = uint32_t(kv.elem_type);
        j["count"] = kv.count;
        if (kv.count > hash_over) {
            // raw holds the elements exactly as stored (strings with their length prefix).
            j["sha256"] = sha256(kv.raw.data(), kv.raw.size());
        } else {
            json v = json::array();
            if (kv.elem_type == ValueType::STRING) {
                for (std::string_view s : kv.strings) v.push_back(string_json(s));
            } else {
                const uint64_t n = value_type_size(kv.elem_type);
                for (uint64_t i = 0; i < kv.count; ++i) v.push_back(scalar_json(kv.elem_type, kv.raw.data() + i * n));
            }
            j["value"] = std::move(v);
        }
    }
    return j;
}

int dump(const std::string& path, uint64_t hash_over) {
    const File f = File::open(path);
    json out;
    out["version"] = f.version();
    out["alignment"] = f.alignment();
    out["data_offset"] = f.data_offset();
    out["file_size"] = f.file_size();
    json kvs = json::array();
    for (const KeyValue& kv : f.metadata()) kvs.push_back(kv_json(kv, hash_over));
    out["metadata"] = std::move(kvs);
    json tensors = json::array();
    for (const TensorInfo& t : f.tensors()) {
        json ne = json::array();
        for (uint32_t d = 0; d < t.n_dims; ++d) ne.push_back(t.ne[d]);
        tensors.push_back({{"name", t.name},
                           {"type", t.type},
                           {"ne", ne},
                           {"offset", t.offset},
                           {"n_bytes", t.n_bytes},
                           {"sha256", sha256(t.data, t.n_bytes)}});
    }
    out["tensors"] = std::move(tensors);
    std::puts(out.dump(1).c_str());
    return 0;
}

// ---- write-sample -----------------------------------------------------------

template <class T>
MetaArray array_of(ValueType t, std::initializer_list<T> v) {
    MetaArray a{t, std::vector<uint8_t>(v.size() * sizeof(T)), {}};
    if (v.size() != 0) std::memcpy(a.bytes.data(), std::data(v), a.bytes.size());
    return a;
}

// Deterministic filler bytes: tensor contents are opaque to the container.
std::vector<uint8_t> filler(size_t n, uint32_t seed) {
    std::vector<uint8_t> b(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto& v : b) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        v = uint8_t(x);
    }
    return b;
}

int write_sample(const std::string& out, uint64_t alignment) {
    Writer w(alignment);
    w.set_string("general.architecture", "sample");
    w.set_string("general.name", "ptxlm writer sample");
    w.set("sample.u8", uint8_t{200});
    w.set("sample.i8", int8_t{-100});
    w.set("sample.u16", uint16_t{60000});
    w.set("sample.i16", int16_t{-30000});
    w.set("sample.u32", uint32_t{4000000000u});
    w.set("sample.i32", int32_t{-2000000000});
    w.set("sample.f32", 0.1f);
    w.set("sample.f32_subnormal", 1e-40f);
    w.set("sample.bool_true", true);
    w.set("sample.bool_false", false);
    w.set("sample.string", std::string("h\xc3\xa9llo, w\xc3\xb6rld \xe2\x9c\x93"));
    w.set("sample.empty_string", std::string());
    w.set("sample.u64", std::numeric_limits<uint64_t>::max());
    w.set("sample.i64", std::numeric_limits<int64_t>::min());
    w.set("sample.f64", 1.0 / 3.0);
    w.set("sample.f64_negative_zero", -0.0);
    w.set("array.u8", array_of<uint8_t>(ValueType::U8, {0, 1, 255}));
    w.set("array.i8", array_of<int8_t>(ValueType::I8, {-128, 0, 127}));
    w.set("array.u16", array_of<uint16_t>(ValueType::U16, {0, 65535}));
    w.set("array.i16", array_of<int16_t>(ValueType::I16, {-32768, 32767}));
    w.set("array.u32", array_of<uint32_t>(ValueType::U32, {0, 1, 4294967295u}));
    w.set("array.i32", array_of<int32_t>(ValueType::I32, {std::numeric_limits<int32_t>::min(), -1, 7}));
    w.set_f32s("array.f32", {1.5f, -2.25f, 3e38f, 1e-45f});
    w.set("array.bool", array_of<uint8_t>(ValueType::BOOL, {1, 0, 1}));
    w.set_strings("array.string", {"a", "", "\xc3\xbcn\xc3\xaf", "with\nnewline", "<0x0A>"});
    w.set("array.u64", array_of<uint64_t>(ValueType::U64, {0, std::numeric_limits<uint64_t>::max()}));
    w.set("array.i64", array_of<int64_t>(ValueType::I64, {std::numeric_limits<int64_t>::min(), 42}));
    w.set("array.f64", array_of<double>(ValueType::F64, {0.5, -1e300}));
    w.set("array.empty_u32", MetaArray{ValueType::U32, {}, {}});
    w.set_strings("array.empty_string", {});
    std::vector<int32_t> long_i32(1000);
    for (size_t i = 0; i < long_i32.size(); ++i) long_i32[i] = int32_t(i * 7919 % 1009) - 500;
    w.set_i32s("array.long_i32", long_i32);
    std::vector<std::string> long_strings;
    for (int i = 0; i < 300; ++i) long_strings.push_back("token_" + std::to_string(i));
    w.set_strings("array.long_string", long_strings);

    struct Spec { const char* name; GgmlType type; std::vector<uint64_t> ne; };
    const Spec specs[] = {
        {"f32.weight", GgmlType::F32, {8, 3}},
        {"f16.weight", GgmlType::F16, {16}},
        {"bf16.weight", GgmlType::BF16, {4, 2}},
        {"q4_0.weight", GgmlType::Q4_0, {64, 2}},
        {"q8_0.weight", GgmlType::Q8_0, {32}},
        {"q4_1.weight", GgmlType::Q4_1, {32, 1, 1, 2}},
        {"q5_0.weight", GgmlType::Q5_0, {32, 1, 2}},
        {"q4_k.weight", GgmlType::Q4_K, {256, 2}},
        {"q6_k.weight", GgmlType::Q6_K, {256}},
    };
    uint32_t seed = 1;
    for (const Spec& s : specs) {
        uint64_t rows = 1;
        for (size_t d = 1; d < s.ne.size(); ++d) rows *= s.ne[d];
        const uint64_t bytes = *row_bytes(type_traits(s.type), s.ne[0]) * rows;
        w.add_tensor(s.name, s.type, s.ne, filler(bytes, seed++));
    }
    w.write(out);
    return 0;
}

int usage() {
    std::fprintf(stderr, "usage: gguf_tool write-sample OUT [--alignment N]\n"
                         "       gguf_tool dump FILE [--hash-over N]\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) return usage();
    const std::string cmd = argv[1], path = argv[2];
    uint64_t alignment = kDefaultAlignment, hash_over = 64;
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string opt = argv[i];
        if (opt == "--alignment") alignment = std::strtoull(argv[i + 1], nullptr, 10);
        else if (opt == "--hash-over") hash_over = std::strtoull(argv[i + 1], nullptr, 10);
        else return usage();
    }
    if (argc % 2 == 0) return usage();  // an option without its value
    try {
        if (cmd == "write-sample") return write_sample(path, alignment);
        if (cmd == "dump") return dump(path, hash_over);
    } catch (const Error& e) {
        std::fprintf(stderr, "gguf_tool: %s\n", e.what());
        return 1;
    }
    return usage();
}
