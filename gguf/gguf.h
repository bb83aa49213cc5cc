// GGUF reader: maps a file, validates every count, offset and size against it,
// and exposes typed metadata and the tensor table without copying tensor data.
//
// A hostile file cannot get past open(): every error is a gguf::Error whose
// message names the file, the byte offset and the field at fault.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/quant.h"

namespace ptxlm::gguf {

constexpr uint32_t kMagic = 0x46554747;       // "GGUF" little-endian
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxNameBytes = 256;      // key names
constexpr uint64_t kMaxTensorNameBytes = 63; // ggml: GGML_MAX_NAME 64 incl. NUL
constexpr uint32_t kMaxDims = 4;

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* value_type_name(ValueType t);  // "u32", "string", "array" ...; "unknown" otherwise
// Bytes of one scalar of type t; 0 for STRING, ARRAY and unknown ids.
uint64_t value_type_size(ValueType t);
// A name from a file, quoted for an error message: non-printable bytes
// escaped as \xNN, long names cut, so a hostile name cannot garble a message.
std::string quote_for_message(std::string_view s);

// One metadata entry. Views point into the mapping and live as long as the File.
struct KeyValue {
    std::string key;
    ValueType type = ValueType::U8;
    ValueType elem_type = ValueType::U8;  // arrays only
    uint64_t count = 0;                   // arrays: element count; otherwise 1
    uint64_t offset = 0;                  // file offset of the key's length field
    std::span<const uint8_t> raw;         // scalar bytes, string bytes, or array element bytes as stored
                                          // (array of string: each element with its u64 length prefix)
    std::vector<std::string_view> strings;  // STRING: one item; ARRAY of STRING: every item

    bool is_array() const { return type == ValueType::ARRAY; }
};

struct TensorInfo {
    std::string name;
    uint32_t type = 0;                    // raw ggml type id (validated: known type)
    uint32_t n_dims = 0;
    std::array<uint64_t, kMaxDims> ne{1, 1, 1, 1};  // ne[0] innermost (row length)
    uint64_t offset = 0;                  // relative to the data section
    uint64_t n_bytes = 0;
    uint64_t info_offset = 0;             // file offset of this tensor info
    const uint8_t* data = nullptr;        // into the mapping

    uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    uint64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
    GgmlType ggml_type() const { return static_cast<GgmlType>(type); }
};

class File {
public:
    // Maps and validates the file; throws Error.
    static File open(const std::string& path);
    // Validates a buffer already in memory (the fuzzer's entry); the buffer must
    // outlive the File. `name` is used in error messages.
    static File parse(std::span<const uint8_t> bytes, std::string name);

    File(File&&) noexcept;
    File& operator=(File&&) noexcept;
    ~File();

    const std::string& path() const { return name_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    // End of the tensor infos padded to the alignment. Past file_size() only
    // when the file has no tensors (it may end right after its infos).
    uint64_t data_offset() const { return data_offset_; }
    uint64_t file_size() const { return bytes_.size(); }
    std::span<const uint8_t> bytes() const { return bytes_; }
    // Lets the whole pages of [p, p + n) leave memory when the file is
    // mapped (open()): a later read brings them back from the page cache.
    // Nothing happens for a parsed buffer or a range outside the file.
    void drop_pages(const uint8_t* p, uint64_t n) const;

    const std::vector<KeyValue>& metadata() const { return kvs_; }
    const std::vector<TensorInfo>& tensors() const { return tensors_; }

    const KeyValue* find(std::string_view key) const;
    const TensorInfo* find_tensor(std::string_view name) const;

    // Typed access. nullopt when absent; Error when present with a type that
    // cannot hold the request (a negative i32 asked as unsigned, a string asked
    // as a number, a value out of range of the requested width).
    std::optional<uint64_t> get_uint(std::string_view key) const;  // u8..u64, i8..i64 >= 0, bool
    std::optional<uint32_t> get_u32(std::string_view key) const;   // get_uint within u32 range
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;   // f32, f64, or any integer
    std::optional<bool> get_bool(std::string_view key) const;
    std::optional<std::string_view> get_string(std::string_view key) const;

    // Arrays (Error if present but not an array of a compatible element type).
    std::optional<std::vector<std::string_view>> get_string_array(std::string_view key) const;
    std::optional<std::vector<float>> get_f32_array(std::string_view key) const;  // f32/f64/ints
    std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

    // A per-layer integer as llama.cpp accepts it: either a scalar (the same
    // for every layer) or an array of exactly n_layers integers.
    std::optional<std::vector<uint32_t>> get_per_layer_u32(std::string_view key, uint32_t n_layers) const;

    // Message prefix "<file>: offset N: " used by every error of this file.
    std::string where(uint64_t offset) const;

private:
    File();
    struct Mapping;
    std::unique_ptr<Mapping> mapping_;
    std::string name_;
    std::span<const uint8_t> bytes_;
    uint32_t version_ = 0;
    uint64_t alignment_ = kDefaultAlignment;
    uint64_t data_offset_ = 0;
    std::vector<KeyValue> kvs_;
    std::vector<TensorInfo> tensors_;
    // Name -> index; the views point into the file bytes, which outlive them.
    std::unordered_map<std::string_view, size_t> kv_index_;
    std::unordered_map<std::string_view, size_t> tensor_index_;

    friend class Parser;
};

}  // namespace ptxlm::gguf
