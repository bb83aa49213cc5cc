// GGUF reader, part 2: typed access to metadata.
//
// Converters accept every stored type that can hold the requested value
// exactly (llama.cpp's converters write counts as u32, others as i32 or u64)
// and throw an Error naming the key, its offset, the stored type and value
// otherwise. The parser has already checked sizes: raw holds exactly `count`
// elements of the stored type.
#include <cstring>
#include <limits>

#include "gguf/gguf.h"

namespace ptxlm::gguf {
namespace {

template <class T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// An integer of any stored width: value = negative ? -magnitude : magnitude.
struct Integer {
    bool negative = false;
    uint64_t magnitude = 0;

    std::string text() const {
        std::string s = negative ? "-" : "";  // (not "-" + to_string: GCC 12 warns falsely, -Wrestrict)
        s += std::to_string(magnitude);
        return s;
    }
    static Integer of_signed(int64_t v) {
        // -(v + 1) + 1 avoids negating INT64_MIN.
        return v < 0 ? Integer{true, uint64_t(-(v + 1)) + 1} : Integer{false, uint64_t(v)};
    }
};

bool is_integer(ValueType t) {
    switch (t) {
        case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
        case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64: return true;
        default: return false;
    }
}

// p holds one element of integer type t.
Integer integer_at(ValueType t, const uint8_t* p) {
    switch (t) {
        case ValueType::U8: return {false, load<uint8_t>(p)};
        case ValueType::U16: return {false, load<uint16_t>(p)};
        case ValueType::U32: return {false, load<uint32_t>(p)};
        case ValueType::U64: return {false, load<uint64_t>(p)};
        case ValueType::I8: return Integer::of_signed(load<int8_t>(p));
        case ValueType::I16: return Integer::of_signed(load<int16_t>(p));
        case ValueType::I32: return Integer::of_signed(load<int32_t>(p));
        case ValueType::I64: return Integer::of_signed(load<int64_t>(p));
        default: return {};
    }
}

std::string describe(const KeyValue& kv) {
    if (kv.is_array()) return std::string("array of ") + value_type_name(kv.elem_type);
    return value_type_name(kv.type);
}

}  // namespace

// Every accessor error: "<file>: offset N: "<key>": <what>".
[[noreturn]] static void fail_kv(const File& f, const KeyValue& kv, const std::string& what) {
    throw Error(f.where(kv.offset) + quote_for_message(kv.key) + ": " + what);
}

static uint64_t to_unsigned(const File& f, const KeyValue& kv, Integer v, uint64_t max, const char* want,
                            const std::string& where_in_value) {
    const char* stored = value_type_name(kv.is_array() ? kv.elem_type : kv.type);
    if (v.negative)
        fail_kv(f, kv, where_in_value + "value " + v.text() + " (" + stored + ") is negative, expected " + want);
    if (v.magnitude > max)
        fail_kv(f, kv, where_in_value + "value " + v.text() + " is out of range of " + want);
    return v.magnitude;
}

static int64_t to_signed(const File& f, const KeyValue& kv, Integer v, const std::string& where_in_value) {
    constexpr uint64_t kMax = uint64_t(std::numeric_limits<int64_t>::max());
    if (v.magnitude > (v.negative ? kMax + 1 : kMax))
        fail_kv(f, kv, where_in_value + "value " + v.text() + " is out of range of i64");
    return v.negative ? (v.magnitude == kMax + 1 ? std::numeric_limits<int64_t>::min() : -int64_t(v.magnitude))
                      : int64_t(v.magnitude);
}

std::optional<uint64_t> File::get_uint(std::string_view key) const {
    const KeyValue* kv = find(key);
    if (kv == nullptr) return std::nullopt;
    if (kv->type == ValueType::BOOL) return uint64_t(kv->raw[0]);
    if (!is_integer(kv->type)) fail_kv(*this, *kv, "is " + describe(*kv) + ", expected an unsigned integer");
    return to_unsigned(*this, *kv, integer_at(kv->type, kv->raw.data()), std::numeric_limits<uint64_t>::max(), "u64", "");
}

std::optional<uint32_t> File::get_u32(std::string_view key) const {
    const KeyValue* kv = find(key);
    if (kv == nullptr) return std::nullopt;
    if (kv->type == ValueType::BOOL) return uint32_t(kv->raw[0]);
    if (!is_integer(kv->type)) fail_kv(*this, *kv, "is " + describe(*kv) + ", expected an unsigned integer");
    return uint32_t(to_unsigned(*this, *kv, integer_at(kv->type, kv->raw.data()),
                                std::numeric_limits<uint32_t>::max(), "u32", ""));
}

std::optional<int64_t> File::get_int(std::string_view key) const {
    const KeyValue* kv = find(key);
    if (kv == nullptr) return std::nullopt;
    if (kv->type == ValueType::BOOL) return int64_t(kv->raw[0]);
    if (!is_integer(kv->type)) fail_kv(*this, *kv, "is " + describe(*kv) + ", expected an integer");
    return to_signed(*this, *kv, integer_at(kv->type, kv->raw.data()), "");
}

std::optional<double> File::get_float(std::string_view key) const {
    const KeyValue* kv = find(key);
    if (kv == nullptr) return std::nullopt;
    if (kv->type == ValueType::F32) return double(load<float>(kv->raw.data()));
    if (kv->type == ValueType::F64) return load<double>(kv->raw.data());
    if (is_integer(kv->type)) {
        const Integer v = integer_at(kv->type, kv->raw.data());
        return v.negative ? -double(v.magnitude) : double(v.magnitude);
    }
    fail_kv(*this, *kv, "is " + describe(*kv) + ", expected a number");
}

std::optional<bool> File::get_bool(std::string_view key) const {
    const KeyValue* kv = find(key);
    if (kv == nullptr) return std::nullopt;
    if (kv->type != ValueType::BOOL) fail_kv(*this, *kv, "is " + describe(*kv) + ", expected bool");
    return kv->raw[0] != 0;
}

std::optional<std::string_view> File::get_string(std::string_view key) const {
    const KeyValue* kv = find(key);
    if (kv == nullptr) return std::nullopt;
    if (kv->type != ValueType::STRING) fail_kv(*this, *kv, "is " + describe(*kv) + ", expected string");
    return kv->strings[0];
}

std::optional<std::vector<std::string_view>> File::get_string_array(std::string_view key) const {
    const KeyValue* kv = find(key);
    if (kv == nullptr) return std::nullopt;
    if (!kv->is_array() || kv->elem_type != ValueType::STRING)
        fail_kv(*this, *kv, "is " + describe(*kv) + ", expected array of string");
    return kv->strings;
}

std::optional<std::vector<float>> File::get_f32_array(std::string_view key) const {
    const KeyValue* kv = find(key);
    if (kv == nullptr) return std::nullopt;
    const ValueType t = kv->elem_type;
    if (!kv->is_array() || !(t == ValueType::F32 || t == ValueType::F64 || is_integer(t)))
        fail_kv(*this, *kv, "is " + describe(*kv) + ", expected array of numbers");
    const uint64_t n = value_type_size(t);
    std::vector<float> out(size_t(kv->count));
    for (uint64_t j = 0; j < kv->count; ++j) {
        const uint8_t* p = kv->raw.data() + j * n;
        if (t == ValueType::F32) {
            out[j] = load<float>(p);
        } else if (t == ValueType::F64) {
            out[j] = float(load<double>(p));
        } else {
            const Integer v = integer_at(t, p);
            out[j] = v.negative ? -float(v.magnitude) : float(v.magnitude);
        }
    }
    return out;
}

std::optional<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
    const KeyValue* kv = find(key);
    if (kv == nullptr) return std::nullopt;
    if (!kv->is_array() || !is_integer(kv->elem_type))
        fail_kv(*this, *kv, "is " + describe(*kv) + ", expected array of integers");
    const uint64_t n = value_type_size(kv->elem_type);
    std::vector<int64_t> out(size_t(kv->count));
    for (uint64_t j = 0; j < kv->count; ++j)
        out[j] = to_signed(*this, *kv, integer_at(kv->elem_type, kv->raw.data() + j * n),
                           "element " + std::to_string(j) + ": ");
    return out;
}

std::optional<std::vector<uint32_t>> File::get_per_layer_u32(std::string_view key, uint32_t n_layers) const {
    const KeyValue* kv = find(key);
    if (kv == nullptr) return std::nullopt;
    if (!kv->is_array()) return std::vector<uint32_t>(n_layers, *get_u32(key));
    if (!is_integer(kv->elem_type))
        fail_kv(*this, *kv, "is " + describe(*kv) + ", expected an unsigned integer or an array of them");
    if (kv->count != n_layers)
        fail_kv(*this, *kv, "array has " + std::to_string(kv->count) + " elements, expected one per layer (" +
                                std::to_string(n_layers) + ")");
    const uint64_t n = value_type_size(kv->elem_type);
    std::vector<uint32_t> out(n_layers);
    for (uint32_t j = 0; j < n_layers; ++j)
        out[j] = uint32_t(to_unsigned(*this, *kv, integer_at(kv->elem_type, kv->raw.data() + j * n),
                                      std::numeric_limits<uint32_t>::max(), "u32",
                                      "element " + std::to_string(j) + ": "));
    return out;
}

}  // namespace ptxlm::gguf
