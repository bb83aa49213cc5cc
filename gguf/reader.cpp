// GGUF reader, part 1: mapping the file and parsing it.
//
// The parser walks the bytes with one bounds-checked cursor. Every count,
// length and offset read from the file is checked against the bytes that are
// left (with overflow-safe arithmetic) before it is used to index, reserve or
// allocate, so a hostile file gets an Error, never a crash or a huge
// allocation. Typed metadata access lives in reader_meta.cpp.
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>

#include "gguf/gguf.h"

namespace ptxlm::gguf {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian and the reader copies fields as they are");

namespace {

// The smallest encodings of a KV and of a tensor info. A count larger than
// (bytes left / smallest encoding) cannot be backed by the file.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;               // key length, 1-byte key, type, u8 value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name length, 1-byte name, n_dims, ne[0], type, offset
constexpr uint64_t kStringLengthBytes = 8;
constexpr uint64_t kMaxElements = uint64_t(std::numeric_limits<int64_t>::max());  // ggml counts in int64

std::string str(uint64_t v) { return std::to_string(v); }

}  // namespace

// A name from the file, quoted for an error message: non-printable bytes are
// escaped and long names cut, so a hostile name cannot garble the message.
std::string quote_for_message(std::string_view s) {
    constexpr size_t kMaxShown = 80;
    std::string out = "\"";
    for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += char(c);
        } else if (c >= 0x20 && c < 0x7f) {
            out += char(c);
        } else {
            static const char kHex[] = "0123456789abcdef";
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 15];
        }
    }
    if (s.size() > kMaxShown) out += "...";
    out += '"';
    return out;
}

const char* value_type_name(ValueType t) {
    switch (t) {
        case ValueType::U8: return "u8";
        case ValueType::I8: return "i8";
        case ValueType::U16: return "u16";
        case ValueType::I16: return "i16";
        case ValueType::U32: return "u32";
        case ValueType::I32: return "i32";
        case ValueType::F32: return "f32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::U64: return "u64";
        case ValueType::I64: return "i64";
        case ValueType::F64: return "f64";
    }
    return "unknown";
}

uint64_t value_type_size(ValueType t) {
    switch (t) {
        case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
        case ValueType::U16: case ValueType::I16: return 2;
        case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
        case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
        case ValueType::STRING: case ValueType::ARRAY: return 0;
    }
    return 0;
}

// ---------------------------------------------------------------------------
// The mapping and the File's special members.

struct File::Mapping {
    void* addr = nullptr;
    size_t size = 0;
    Mapping(void* a, size_t n) : addr(a), size(n) {}
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping() {
        if (addr != nullptr) munmap(addr, size);
    }
};

File::File() = default;
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

std::string File::where(uint64_t offset) const { return name_ + ": offset " + str(offset) + ": "; }

const KeyValue* File::find(std::string_view key) const {
    const auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const TensorInfo* File::find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------
// The parser.

class Parser {
public:
    explicit Parser(File& f) : f_(f), base_(f.bytes_.data()), size_(f.bytes_.size()) {}
    void run();

private:
    [[noreturn]] void fail(uint64_t offset, std::string_view field, const std::string& what) const {
        throw Error(f_.where(offset) + std::string(field) + ": " + what);
    }
    uint64_t left() const { return size_ - pos_; }
    void need(uint64_t n, std::string_view field) const {
        if (n > left())
            fail(pos_, field, "truncated: needs " + str(n) + " bytes, " + str(left()) + " left in the file");
    }
    template <class T>
    T read(std::string_view field) {
        need(sizeof(T), field);
        T v;
        std::memcpy(&v, base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    // A string whose length field starts at the cursor; max_len 0 = no limit
    // beyond the file. Names (keys, tensor names) must be non-empty and NUL-free.
    std::string_view read_string(std::string_view field, uint64_t max_len, bool is_name);
    std::string_view take(uint64_t n) {
        const auto* p = reinterpret_cast<const char*>(base_ + pos_);
        pos_ += n;
        return {p, size_t(n)};
    }

    void parse_header();
    void parse_kv(uint64_t index);
    void parse_value(KeyValue& kv, const std::string& field);
    void check_alignment_kv(const KeyValue& kv, uint64_t type_offset, uint64_t value_offset);
    void parse_tensor_info(uint64_t index);
    void place_tensors();

    File& f_;
    const uint8_t* base_;
    uint64_t size_;
    uint64_t pos_ = 0;
    uint64_t tensor_count_ = 0;
    uint64_t kv_count_ = 0;
};

std::string_view Parser::read_string(std::string_view field, uint64_t max_len, bool is_name) {
    const uint64_t at = pos_;
    const uint64_t len = read<uint64_t>(field);
    if (is_name && len == 0) fail(at, field, "empty name");
    if (max_len != 0 && len > max_len)
        fail(at, field, "name length " + str(len) + " exceeds the limit of " + str(max_len) + " bytes");
    if (len > left())
        fail(at, field, "string length " + str(len) + " exceeds the " + str(left()) + " bytes left in the file");
    const std::string_view s = take(len);
    if (is_name && s.find('\0') != std::string_view::npos)
        fail(at, field, "name " + quote_for_message(s) + " contains a NUL byte");
    return s;
}

void Parser::parse_header() {
    const auto magic = read<uint32_t>("magic");
    if (magic != kMagic) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "expected 0x%08x (\"GGUF\"), got 0x%08x", kMagic, magic);
        fail(0, "magic", buf);
    }
    const auto version = read<uint32_t>("version");
    if (version == 1)
        fail(4, "version", "GGUF v1 (32-bit counts) is not supported; convert the file to v3");
    if (version != 2 && version != 3)
        fail(4, "version", "unsupported version " + str(version) + " (supported: 2 and 3)");
    f_.version_ = version;
    tensor_count_ = read<uint64_t>("tensor_count");
    kv_count_ = read<uint64_t>("kv_count");
    // tensor_count is checked once the metadata is consumed, before anything uses it.
    if (kv_count_ > left() / kMinKvBytes)
        fail(16, "kv_count", str(kv_count_) + " entries cannot fit in the " + str(left()) +
                                 " bytes left (each needs at least " + str(kMinKvBytes) + ")");
}

void Parser::parse_kv(uint64_t index) {
    KeyValue kv;
    kv.offset = pos_;
    const std::string_view key = read_string("kv[" + str(index) + "] key", kMaxNameBytes, true);
    const std::string field = quote_for_message(key);
    if (const auto [it, inserted] = f_.kv_index_.emplace(key, f_.kvs_.size()); !inserted)
        fail(kv.offset, field, "duplicate key (first at offset " + str(f_.kvs_[it->second].offset) + ")");
    kv.key = std::string(key);

    const uint64_t type_offset = pos_;
    const auto type = read<uint32_t>(field + " type");
    if (type > uint32_t(ValueType::F64)) fail(type_offset, field + " type", "unknown value type " + str(type));
    kv.type = ValueType(type);
    const uint64_t value_offset = pos_;
    parse_value(kv, field);
    if (key == "general.alignment") check_alignment_kv(kv, type_offset, value_offset);
    f_.kvs_.push_back(std::move(kv));
}

void Parser::parse_value(KeyValue& kv, const std::string& field) {
    const uint64_t start = pos_;
    kv.count = 1;
    if (kv.type == ValueType::STRING) {
        kv.strings.push_back(read_string(field + " value", 0, false));
        kv.raw = {base_ + start + kStringLengthBytes, pos_ - start - kStringLengthBytes};
        return;
    }
    if (kv.type != ValueType::ARRAY) {
        const uint64_t n = value_type_size(kv.type);
        need(n, field + " value");
        kv.raw = {base_ + pos_, n};
        if (kv.type == ValueType::BOOL && base_[pos_] > 1)
            fail(pos_, field + " value", "bool must be 0 or 1, got " + str(base_[pos_]));
        pos_ += n;
        return;
    }

    const uint64_t elem_offset = pos_;
    const auto elem = read<uint32_t>(field + " element type");
    if (elem == uint32_t(ValueType::ARRAY)) fail(elem_offset, field + " element type", "nested arrays are not supported");
    if (elem > uint32_t(ValueType::F64)) fail(elem_offset, field + " element type", "unknown value type " + str(elem));
    kv.elem_type = ValueType(elem);
    const uint64_t count_offset = pos_;
    kv.count = read<uint64_t>(field + " count");
    const uint64_t data_start = pos_;

    if (kv.elem_type == ValueType::STRING) {
        if (kv.count > left() / kStringLengthBytes)
            fail(count_offset, field + " count", str(kv.count) + " strings cannot fit in the " + str(left()) +
                                                     " bytes left (each needs at least 8)");
        // Two passes: validate every length first, then allocate exactly.
        for (uint64_t j = 0, at = pos_; j < kv.count; ++j) {
            if (size_ - at < kStringLengthBytes)
                fail(at, field + "[" + str(j) + "]", "truncated: string length needs 8 bytes, " +
                                                          str(size_ - at) + " left in the file");
            uint64_t len;
            std::memcpy(&len, base_ + at, 8);
            at += kStringLengthBytes;
            if (len > size_ - at)
                fail(at - kStringLengthBytes, field + "[" + str(j) + "]",
                     "string length " + str(len) + " exceeds the " + str(size_ - at) + " bytes left in the file");
            at += len;
        }
        kv.strings.reserve(size_t(kv.count));
        for (uint64_t j = 0; j < kv.count; ++j) {
            uint64_t len;
            std::memcpy(&len, base_ + pos_, 8);
            pos_ += kStringLengthBytes;
            kv.strings.push_back(take(len));
        }
    } else {
        const uint64_t n = value_type_size(kv.elem_type);
        if (kv.count > left() / n)
            fail(count_offset, field + " count",
                 str(kv.count) + " elements of " + value_type_name(kv.elem_type) + " (" + str(n) +
                     " bytes each) need more than the " + str(left()) + " bytes left");
        if (kv.elem_type == ValueType::BOOL) {
            for (uint64_t j = 0; j < kv.count; ++j)
                if (base_[pos_ + j] > 1)
                    fail(pos_ + j, field + "[" + str(j) + "]", "bool must be 0 or 1, got " + str(base_[pos_ + j]));
        }
        pos_ += kv.count * n;
    }
    kv.raw = {base_ + data_start, pos_ - data_start};
}

void Parser::check_alignment_kv(const KeyValue& kv, uint64_t type_offset, uint64_t value_offset) {
    const std::string field = "\"general.alignment\"";
    if (kv.type != ValueType::U32)
        fail(type_offset, field + " type", std::string("must be u32, got ") + value_type_name(kv.type));
    uint32_t a;
    std::memcpy(&a, kv.raw.data(), 4);
    if (a == 0 || (a & (a - 1)) != 0)
        fail(value_offset, field + " value", "must be a nonzero power of two, got " + str(a));
    f_.alignment_ = a;
}

void Parser::parse_tensor_info(uint64_t index) {
    TensorInfo t;
    t.info_offset = pos_;
    const std::string_view name = read_string("tensor[" + str(index) + "] name", kMaxTensorNameBytes, true);
    const std::string field = "tensor " + quote_for_message(name);
    if (const auto [it, inserted] = f_.tensor_index_.emplace(name, f_.tensors_.size()); !inserted)
        fail(t.info_offset, field, "duplicate tensor name (first at offset " +
                                       str(f_.tensors_[it->second].info_offset) + ")");
    t.name = std::string(name);

    const uint64_t dims_offset = pos_;
    t.n_dims = read<uint32_t>(field + " n_dims");
    if (t.n_dims == 0 || t.n_dims > kMaxDims)
        fail(dims_offset, field + " n_dims", "must be 1.." + str(kMaxDims) + ", got " + str(t.n_dims));
    const uint64_t ne_offset = pos_;
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
        const std::string ne_field = field + " ne[" + str(d) + "]";
        const uint64_t at = pos_;
        t.ne[d] = read<uint64_t>(ne_field);
        // ggml would accept 0 (an empty tensor); no real model has one and a
        // zero dimension only hides mistakes, so it is rejected.
        if (t.ne[d] == 0) fail(at, ne_field, "dimension is zero");
        if (t.ne[d] > kMaxElements) fail(at, ne_field, str(t.ne[d]) + " exceeds INT64_MAX");
        if (t.ne[d] > kMaxElements / n_elements)
            fail(ne_offset, field + " ne", "element count overflows int64 at ne[" + str(d) + "]");
        n_elements *= t.ne[d];
    }

    const uint64_t type_offset = pos_;
    t.type = read<uint32_t>(field + " type");
    const TypeTraits* traits = find_type(t.type);
    if (traits == nullptr) fail(type_offset, field + " type", "unknown ggml type " + str(t.type));
    if (traits->block_elems == 0 || traits->block_bytes == 0)
        fail(type_offset, field + " type", "ggml type " + std::string(traits->name) + " has no storage size");
    if (t.ne[0] % traits->block_elems != 0)
        fail(ne_offset, field + " ne[0]",
             "row length " + str(t.ne[0]) + " is not a multiple of " + traits->name + "'s block size " +
                 str(traits->block_elems));
    // Overflow-safe size: blocks per row * bytes per block * rows, each step checked.
    const uint64_t blocks = t.ne[0] / traits->block_elems;
    const uint64_t rows = n_elements / t.ne[0];
    if (blocks > std::numeric_limits<uint64_t>::max() / traits->block_bytes ||
        blocks * traits->block_bytes > std::numeric_limits<uint64_t>::max() / rows)
        fail(ne_offset, field + " ne", "tensor size in bytes overflows 64 bits");
    const std::optional<uint64_t> row = row_bytes(*traits, t.ne[0]);
    if (!row || *row != blocks * traits->block_bytes)
        fail(ne_offset, field + " ne[0]", "row size disagrees with the type table");
    t.n_bytes = *row * rows;

    const uint64_t offset_offset = pos_;
    t.offset = read<uint64_t>(field + " offset");
    if (t.offset % f_.alignment_ != 0)
        fail(offset_offset, field + " offset",
             str(t.offset) + " is not a multiple of the alignment " + str(f_.alignment_));
    f_.tensors_.push_back(std::move(t));
}

void Parser::place_tensors() {
    // The data section starts at the end of the tensor infos padded to the alignment.
    const uint64_t a = f_.alignment_;
    const uint64_t pad = (a - pos_ % a) % a;
    if (pos_ > std::numeric_limits<uint64_t>::max() - pad)
        fail(pos_, "data section", "start overflows 64 bits");
    f_.data_offset_ = pos_ + pad;
    if (f_.tensors_.empty()) return;  // nothing to place; a file may end right after its infos
    if (f_.data_offset_ > size_)
        fail(pos_, "data section",
             "starts at offset " + str(f_.data_offset_) + " (tensor infos padded to the alignment " + str(a) +
                 "), past the end of the file (" + str(size_) + " bytes)");
    const uint64_t data_size = size_ - f_.data_offset_;
    for (TensorInfo& t : f_.tensors_) {
        if (t.offset > data_size || t.n_bytes > data_size - t.offset)
            fail(t.info_offset, "tensor " + quote_for_message(t.name) + " data",
                 "needs " + str(t.n_bytes) + " bytes at data offset " + str(t.offset) +
                     ", past the end of the data section (" + str(data_size) + " bytes from file offset " +
                     str(f_.data_offset_) + ")");
        t.data = base_ + f_.data_offset_ + t.offset;
    }
    // Overlaps: sort by offset and compare neighbours (extents are in range now).
    std::vector<size_t> order(f_.tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
        return f_.tensors_[x].offset < f_.tensors_[y].offset;
    });
    for (size_t i = 1; i < order.size(); ++i) {
        const TensorInfo& prev = f_.tensors_[order[i - 1]];
        const TensorInfo& cur = f_.tensors_[order[i]];
        if (prev.offset + prev.n_bytes > cur.offset)
            fail(cur.info_offset, "tensor " + quote_for_message(cur.name) + " offset",
                 "data at " + str(cur.offset) + " overlaps tensor " + quote_for_message(prev.name) + " (bytes " +
                     str(prev.offset) + ".." + str(prev.offset + prev.n_bytes) + ")");
    }
}

void Parser::run() {
    parse_header();
    f_.kvs_.reserve(size_t(kv_count_));
    for (uint64_t i = 0; i < kv_count_; ++i) parse_kv(i);
    // Re-check against what is left now that the metadata is consumed.
    if (tensor_count_ > left() / kMinTensorInfoBytes)
        fail(8, "tensor_count", str(tensor_count_) + " tensor infos cannot fit in the " + str(left()) +
                                    " bytes left after the metadata (each needs at least " +
                                    str(kMinTensorInfoBytes) + ")");
    f_.tensors_.reserve(size_t(tensor_count_));
    for (uint64_t i = 0; i < tensor_count_; ++i) parse_tensor_info(i);
    place_tensors();
}

// ---------------------------------------------------------------------------

File File::parse(std::span<const uint8_t> bytes, std::string name) {
    File f;
    f.name_ = std::move(name);
    f.bytes_ = bytes;
    Parser(f).run();
    return f;
}

void File::drop_pages(const uint8_t* p, uint64_t n) const {
    if (!mapping_ || !mapping_->addr || p < bytes_.data() || n > uint64_t(bytes_.data() + bytes_.size() - p)) return;
    const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
    const uint64_t begin = (reinterpret_cast<uint64_t>(p) + page - 1) / page * page;
    const uint64_t end = (reinterpret_cast<uint64_t>(p) + n) / page * page;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

File File::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        throw Error(path + ": cannot stat: " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(path + ": not a regular file");
    }
    const auto size = static_cast<size_t>(st.st_size);
    void* addr = nullptr;
    if (size > 0) {  // mmap rejects a zero length; an empty file fails at "magic" below
        addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (addr == MAP_FAILED) {
            const int e = errno;
            ::close(fd);
            throw Error(path + ": cannot map " + std::to_string(size) + " bytes: " + std::strerror(e));
        }
    }
    ::close(fd);  // the mapping keeps the file alive

    File f;
    f.mapping_ = std::make_unique<Mapping>(addr, size);
    f.name_ = path;
    f.bytes_ = {static_cast<const uint8_t*>(addr), size};
    Parser(f).run();
    return f;
}

}  // namespace ptxlm::gguf
