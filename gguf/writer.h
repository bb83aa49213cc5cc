// GGUF writer: metadata of every value type and tensors, written as GGUF v3
// with ggml's layout rules (offsets are the running padded sum, data section
// aligned to general.alignment), so llama.cpp and gguf-py read the result.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "gguf/gguf.h"

namespace ptxlm::gguf {

struct MetaArray {
    ValueType elem_type;
    std::vector<uint8_t> bytes;           // packed elements for numeric/bool types
    std::vector<std::string> strings;     // STRING elements
    uint64_t count() const;
};

using MetaValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, MetaArray, uint64_t, int64_t, double>;

class Writer {
public:
    explicit Writer(uint64_t alignment = kDefaultAlignment);

    // Keys keep insertion order; setting an existing key throws Error.
    void set(const std::string& key, MetaValue v);
    void set_u32(const std::string& key, uint32_t v) { set(key, v); }
    void set_f32(const std::string& key, float v) { set(key, v); }
    void set_bool(const std::string& key, bool v) { set(key, v); }
    void set_string(const std::string& key, std::string v) { set(key, std::move(v)); }
    void set_strings(const std::string& key, const std::vector<std::string>& v);
    void set_f32s(const std::string& key, const std::vector<float>& v);
    void set_i32s(const std::string& key, const std::vector<int32_t>& v);

    // Data must already be in `type`'s block layout: ne[0] a multiple of the
    // block size and bytes.size() equal to the tensor's size. Throws Error.
    void add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne,
                    std::vector<uint8_t> bytes);

    // Writes to `path` (via a temporary file renamed into place). Throws Error.
    void write(const std::string& path) const;
    // The same bytes, in memory.
    std::vector<uint8_t> serialize() const;

private:
    struct Tensor { std::string name; GgmlType type; std::vector<uint64_t> ne; std::vector<uint8_t> bytes; };
    // Produces the file's bytes in order, in pieces, to `out`.
    void emit(const std::function<void(const void* data, size_t n)>& out) const;
    uint64_t alignment_;
    std::vector<std::pair<std::string, MetaValue>> kvs_;
    std::vector<Tensor> tensors_;
};

}  // namespace ptxlm::gguf
