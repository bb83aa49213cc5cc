// GGUF writer: v3, ggml's layout. general.alignment (u32) is written first
// when the alignment is not the default; tensor offsets are the running sum of
// sizes each padded to the alignment; the data section starts at the end of
// the tensor infos padded to the alignment, and every tensor's bytes are
// followed by zero padding to the alignment (as gguf-py writes them).
#include "gguf/writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

namespace ptxlm::gguf {
namespace {

constexpr uint32_t kVersion = 3;
constexpr const char* kAlignmentKey = "general.alignment";

[[noreturn]] void fail(const std::string& field, const std::string& what) {
    throw Error("gguf writer: " + field + ": " + what);
}

uint64_t pad_to(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

void check_key(const std::string& key) {
    if (key.empty()) fail("key", "empty key name");
    if (key.size() > kMaxNameBytes)
        fail("key " + quote_for_message(key), "name length " + std::to_string(key.size()) + " exceeds the limit of " +
                                                  std::to_string(kMaxNameBytes) + " bytes");
    if (key.find('\0') != std::string::npos) fail("key " + quote_for_message(key), "name contains a NUL byte");
}

void check_array(const std::string& key, const MetaArray& a) {
    const std::string field = "key " + quote_for_message(key);
    if (a.elem_type == ValueType::ARRAY) fail(field, "nested arrays are not supported");
    if (a.elem_type == ValueType::STRING) {
        if (!a.bytes.empty()) fail(field, "array of string carries numeric bytes");
        return;
    }
    const uint64_t n = value_type_size(a.elem_type);
    if (n == 0) fail(field, "unknown array element type " + std::to_string(uint32_t(a.elem_type)));
    if (!a.strings.empty()) fail(field, std::string("array of ") + value_type_name(a.elem_type) + " carries strings");
    if (a.bytes.size() % n != 0)
        fail(field, std::to_string(a.bytes.size()) + " bytes is not a whole number of " +
                        value_type_name(a.elem_type) + " elements");
    if (a.elem_type == ValueType::BOOL)
        for (uint8_t b : a.bytes)
            if (b > 1) fail(field, "bool element must be 0 or 1, got " + std::to_string(b));
}

template <class T>
MetaArray pack(ValueType t, const std::vector<T>& v) {
    MetaArray a{t, std::vector<uint8_t>(v.size() * sizeof(T)), {}};
    if (!v.empty()) std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
    return a;
}

}  // namespace

uint64_t MetaArray::count() const {
    if (elem_type == ValueType::STRING) return strings.size();
    const uint64_t n = value_type_size(elem_type);
    return n == 0 ? 0 : bytes.size() / n;
}

Writer::Writer(uint64_t alignment) : alignment_(alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > std::numeric_limits<uint32_t>::max())
        fail("alignment", std::to_string(alignment) + " is not a nonzero power of two that fits u32");
}

void Writer::set(const std::string& key, MetaValue v) {
    check_key(key);
    for (const auto& kv : kvs_)
        if (kv.first == key) fail("key " + quote_for_message(key), "duplicate key");
    if (const auto* a = std::get_if<MetaArray>(&v)) check_array(key, *a);
    if (key == kAlignmentKey) {
        // The layout follows the constructor's alignment; an explicit key may
        // only restate it (a tool copying every key of a file does that).
        const auto* a = std::get_if<uint32_t>(&v);
        if (a == nullptr || *a != alignment_)
            fail("key " + quote_for_message(key),
                 "must be u32 equal to the Writer's alignment " + std::to_string(alignment_));
    }
    kvs_.emplace_back(key, std::move(v));
}

void Writer::set_strings(const std::string& key, const std::vector<std::string>& v) {
    set(key, MetaArray{ValueType::STRING, {}, v});
}
void Writer::set_f32s(const std::string& key, const std::vector<float>& v) { set(key, pack(ValueType::F32, v)); }
void Writer::set_i32s(const std::string& key, const std::vector<int32_t>& v) { set(key, pack(ValueType::I32, v)); }

void Writer::add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne, std::vector<uint8_t> bytes) {
    const std::string field = "tensor " + quote_for_message(name);
    if (name.empty()) fail("tensor", "empty name");
    if (name.size() > kMaxTensorNameBytes)
        fail(field, "name length " + std::to_string(name.size()) + " exceeds ggml's limit of " +
                        std::to_string(kMaxTensorNameBytes) + " bytes");
    if (name.find('\0') != std::string::npos) fail(field, "name contains a NUL byte");
    for (const auto& t : tensors_)
        if (t.name == name) fail(field, "duplicate tensor name");
    const TypeTraits* traits = find_type(uint32_t(type));
    if (traits == nullptr) fail(field, "unknown ggml type " + std::to_string(uint32_t(type)));
    if (ne.empty() || ne.size() > kMaxDims)
        fail(field, "must have 1.." + std::to_string(kMaxDims) + " dimensions, got " + std::to_string(ne.size()));
    uint64_t n_elements = 1;
    for (uint64_t d : ne) {
        if (d == 0) fail(field, "dimension is zero");
        if (d > uint64_t(std::numeric_limits<int64_t>::max()) / n_elements) fail(field, "element count overflows int64");
        n_elements *= d;
    }
    const std::optional<uint64_t> row = row_bytes(*traits, ne[0]);
    if (!row)
        fail(field, "row length " + std::to_string(ne[0]) + " is not a multiple of " + traits->name +
                        "'s block size " + std::to_string(traits->block_elems));
    const uint64_t rows = n_elements / ne[0];
    if (*row > std::numeric_limits<uint64_t>::max() / rows || *row * rows != bytes.size())
        fail(field, "holds " + std::to_string(bytes.size()) + " bytes; " + traits->name + " " +
                        std::to_string(n_elements) + " elements need " + std::to_string(*row) + " x " +
                        std::to_string(rows));
    tensors_.push_back({name, type, std::move(ne), std::move(bytes)});
}

void Writer::emit(const std::function<void(const void* data, size_t n)>& out) const {
    // Every piece goes through `put`, which counts the bytes written so far.
    uint64_t pos = 0;
    auto put = [&](const void* p, size_t n) {
        out(p, n);
        pos += n;
    };
    auto put_u32 = [&](uint32_t v) { put(&v, 4); };
    auto put_u64 = [&](uint64_t v) { put(&v, 8); };
    auto put_string = [&](const std::string& s) {
        put_u64(s.size());
        put(s.data(), s.size());
    };
    static const uint8_t kZeros[256] = {};
    auto put_zeros = [&](uint64_t n) {
        while (n > 0) {
            const uint64_t k = std::min<uint64_t>(n, sizeof kZeros);
            put(kZeros, k);
            n -= k;
        }
    };

    bool has_alignment_key = false;
    for (const auto& kv : kvs_) has_alignment_key |= kv.first == kAlignmentKey;
    const bool add_alignment_key = alignment_ != kDefaultAlignment && !has_alignment_key;

    put_u32(kMagic);
    put_u32(kVersion);
    put_u64(tensors_.size());
    put_u64(kvs_.size() + (add_alignment_key ? 1 : 0));
    if (add_alignment_key) {
        put_string(kAlignmentKey);
        put_u32(uint32_t(ValueType::U32));
        put_u32(uint32_t(alignment_));
    }
    for (const auto& [key, value] : kvs_) {
        put_string(key);
        const auto type = ValueType(value.index());  // the variant lists the types in id order
        put_u32(uint32_t(type));
        std::visit(
            [&](const auto& v) {
                using T = std::decay_t<decltype(v)>;
                if constexpr (std::is_same_v<T, std::string>) {
                    put_string(v);
                } else if constexpr (std::is_same_v<T, MetaArray>) {
                    put_u32(uint32_t(v.elem_type));
                    put_u64(v.count());
                    if (v.elem_type == ValueType::STRING)
                        for (const auto& s : v.strings) put_string(s);
                    else
                        put(v.bytes.data(), v.bytes.size());
                } else if constexpr (std::is_same_v<T, bool>) {
                    const uint8_t b = v ? 1 : 0;
                    put(&b, 1);
                } else {
                    put(&v, sizeof v);
                }
            },
            value);
    }

    // Tensor infos: offsets are the running sum of padded sizes.
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        put_string(t.name);
        put_u32(uint32_t(t.ne.size()));
        for (uint64_t d : t.ne) put_u64(d);
        put_u32(uint32_t(t.type));
        put_u64(offset);
        offset += pad_to(t.bytes.size(), alignment_);
    }
    // Data section.
    const uint64_t data_start = pad_to(pos, alignment_);
    put_zeros(data_start - pos);
    for (const auto& t : tensors_) {
        put(t.bytes.data(), t.bytes.size());
        put_zeros(pad_to(t.bytes.size(), alignment_) - t.bytes.size());
    }
}

std::vector<uint8_t> Writer::serialize() const {
    std::vector<uint8_t> bytes;
    emit([&](const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        bytes.insert(bytes.end(), b, b + n);
    });
    return bytes;
}

void Writer::write(const std::string& path) const {
    // Write beside the destination, then rename: readers never see a partial file.
    std::string tmp = path + ".tmp.XXXXXX";
    const int fd = mkstemp(tmp.data());
    if (fd < 0) throw Error(path + ": cannot create a temporary file " + tmp + ": " + std::strerror(errno));
    auto give_up = [&](const std::string& what, int err) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw Error(path + ": " + what + ": " + std::strerror(err));
    };

    // Buffer the many small pieces of metadata; large tensor blobs go straight through.
    std::vector<uint8_t> buf;
    buf.reserve(1 << 20);
    auto write_all = [&](const uint8_t* p, size_t n) {
        while (n > 0) {
            const ssize_t w = ::write(fd, p, n);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) give_up("write failed", errno);
            p += w;
            n -= size_t(w);
        }
    };
    auto flush = [&] {
        write_all(buf.data(), buf.size());
        buf.clear();
    };
    emit([&](const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        if (buf.size() + n > buf.capacity()) flush();
        if (n >= buf.capacity())
            write_all(b, n);
        else
            buf.insert(buf.end(), b, b + n);
    });
    flush();
    // mkstemp creates 0600; a model file is an ordinary readable file.
    if (fchmod(fd, 0644) != 0) give_up("cannot set permissions", errno);
    if (fsync(fd) != 0) give_up("fsync failed", errno);
    if (::close(fd) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        throw Error(path + ": close failed: " + std::strerror(e));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        throw Error(path + ": cannot rename " + tmp + " into place: " + std::strerror(e));
    }
}

}  // namespace ptxlm::gguf
