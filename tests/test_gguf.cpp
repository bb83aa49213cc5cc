// GGUF reader and writer: round trips of every value type and several tensor
// types, typed accessor semantics, and the malformed corpus, where each file
// must be rejected with an Error naming the offset and field at fault.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace fs = std::filesystem;
using namespace ptxlm::gguf;

namespace {

const fs::path kCorpus = fs::path(PTXLM_SOURCE_DIR) / "tests" / "corpus";

template <class T>
MetaArray array_of(ValueType t, std::vector<T> v) {
    MetaArray a{t, std::vector<uint8_t>(v.size() * sizeof(T)), {}};
    if (!v.empty()) std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
    return a;
}

template <class T>
T scalar(const KeyValue& kv) {
    EXPECT_EQ(kv.raw.size(), sizeof(T)) << kv.key;
    T v{};
    std::memcpy(&v, kv.raw.data(), std::min(kv.raw.size(), sizeof(T)));
    return v;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = uint8_t(seed + i * 37);
    return b;
}

// Parses bytes the test keeps alive.
struct Parsed {
    std::vector<uint8_t> bytes;
    File file;
    explicit Parsed(std::vector<uint8_t> b) : bytes(std::move(b)), file(File::parse(bytes, "mem.gguf")) {}
};

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

// ---- round trips ---------------------------------------------------------------

TEST(GgufRoundTrip, EveryScalarType) {
    Writer w;
    w.set("v.u8", uint8_t{250});
    w.set("v.i8", int8_t{-7});
    w.set("v.u16", uint16_t{65000});
    w.set("v.i16", int16_t{-32000});
    w.set("v.u32", uint32_t{4000000000u});
    w.set("v.i32", int32_t{-5});
    w.set("v.f32", 1.25f);
    w.set("v.bool", true);
    w.set("v.string", std::string("h\xc3\xa9llo"));
    w.set("v.empty", std::string());
    w.set("v.u64", std::numeric_limits<uint64_t>::max());
    w.set("v.i64", std::numeric_limits<int64_t>::min());
    w.set("v.f64", -0.1);
    Parsed p(w.serialize());
    const File& f = p.file;

    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), 32u);
    ASSERT_EQ(f.metadata().size(), 13u);
    const char* keys[] = {"v.u8", "v.i8", "v.u16", "v.i16", "v.u32", "v.i32", "v.f32",
                          "v.bool", "v.string", "v.empty", "v.u64", "v.i64", "v.f64"};
    const ValueType types[] = {ValueType::U8, ValueType::I8, ValueType::U16, ValueType::I16, ValueType::U32,
                               ValueType::I32, ValueType::F32, ValueType::BOOL, ValueType::STRING,
                               ValueType::STRING, ValueType::U64, ValueType::I64, ValueType::F64};
    for (size_t i = 0; i < 13; ++i) {
        EXPECT_EQ(f.metadata()[i].key, keys[i]);  // insertion order kept
        EXPECT_EQ(f.metadata()[i].type, types[i]) << keys[i];
        EXPECT_EQ(f.metadata()[i].count, 1u);
        EXPECT_EQ(f.find(keys[i]), &f.metadata()[i]);
    }
    EXPECT_EQ(scalar<uint8_t>(*f.find("v.u8")), 250);
    EXPECT_EQ(scalar<int8_t>(*f.find("v.i8")), -7);
    EXPECT_EQ(scalar<uint16_t>(*f.find("v.u16")), 65000);
    EXPECT_EQ(scalar<int16_t>(*f.find("v.i16")), -32000);
    EXPECT_EQ(*f.get_u32("v.u32"), 4000000000u);
    EXPECT_EQ(*f.get_int("v.i32"), -5);
    EXPECT_EQ(*f.get_float("v.f32"), 1.25);
    EXPECT_EQ(*f.get_bool("v.bool"), true);
    EXPECT_EQ(*f.get_string("v.string"), "h\xc3\xa9llo");
    EXPECT_EQ(*f.get_string("v.empty"), "");
    EXPECT_EQ(*f.get_uint("v.u64"), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(*f.get_int("v.i64"), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(*f.get_float("v.f64"), -0.1);
    EXPECT_EQ(f.find("v.missing"), nullptr);
    EXPECT_EQ(f.data_offset() % 32, 0u);
    EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufRoundTrip, ArraysOfEveryType) {
    Writer w;
    w.set("a.u8", array_of<uint8_t>(ValueType::U8, {0, 255}));
    w.set("a.i8", array_of<int8_t>(ValueType::I8, {-128, 127}));
    w.set("a.u16", array_of<uint16_t>(ValueType::U16, {1, 65535}));
    w.set("a.i16", array_of<int16_t>(ValueType::I16, {-32768, 2}));
    w.set("a.u32", array_of<uint32_t>(ValueType::U32, {3, 4294967295u}));
    w.set_i32s("a.i32", {-1, 0, 1});
    w.set_f32s("a.f32", {0.5f, -0.0f, 1e-45f});
    w.set("a.bool", array_of<uint8_t>(ValueType::BOOL, {1, 0}));
    w.set_strings("a.string", {"x", "", "\xe2\x9c\x93", std::string("nul\0in", 6)});
    w.set("a.u64", array_of<uint64_t>(ValueType::U64, {std::numeric_limits<uint64_t>::max()}));
    w.set("a.i64", array_of<int64_t>(ValueType::I64, {std::numeric_limits<int64_t>::min(), 9}));
    w.set("a.f64", array_of<double>(ValueType::F64, {2.5, -1e300}));
    w.set("a.empty_u32", MetaArray{ValueType::U32, {}, {}});
    w.set_strings("a.empty_string", {});
    Parsed p(w.serialize());
    const File& f = p.file;

    const KeyValue* u8 = f.find("a.u8");
    ASSERT_NE(u8, nullptr);
    EXPECT_TRUE(u8->is_array());
    EXPECT_EQ(u8->elem_type, ValueType::U8);
    EXPECT_EQ(u8->count, 2u);
    EXPECT_EQ(std::vector<uint8_t>(u8->raw.begin(), u8->raw.end()), (std::vector<uint8_t>{0, 255}));
    EXPECT_EQ(*f.get_int_array("a.i8"), (std::vector<int64_t>{-128, 127}));
    EXPECT_EQ(*f.get_int_array("a.u16"), (std::vector<int64_t>{1, 65535}));
    EXPECT_EQ(*f.get_int_array("a.i16"), (std::vector<int64_t>{-32768, 2}));
    EXPECT_EQ(*f.get_int_array("a.u32"), (std::vector<int64_t>{3, 4294967295}));
    EXPECT_EQ(*f.get_int_array("a.i32"), (std::vector<int64_t>{-1, 0, 1}));
    const auto f32 = *f.get_f32_array("a.f32");
    ASSERT_EQ(f32.size(), 3u);
    EXPECT_EQ(f32[0], 0.5f);
    EXPECT_TRUE(std::signbit(f32[1]));
    EXPECT_EQ(f32[2], 1e-45f);
    EXPECT_EQ(f.find("a.bool")->elem_type, ValueType::BOOL);
    EXPECT_EQ(f.find("a.bool")->raw[0], 1);
    EXPECT_EQ(*f.get_string_array("a.string"),
              (std::vector<std::string_view>{"x", "", "\xe2\x9c\x93", std::string_view("nul\0in", 6)}));
    EXPECT_EQ(f.find("a.u64")->count, 1u);
    EXPECT_THROW(f.get_int_array("a.u64"), Error);  // 2^64-1 does not fit i64
    EXPECT_EQ(*f.get_int_array("a.i64"), (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 9}));
    EXPECT_EQ(*f.get_f32_array("a.f64"), (std::vector<float>{2.5f, -INFINITY}));
    EXPECT_EQ(f.find("a.empty_u32")->count, 0u);
    EXPECT_TRUE(f.get_int_array("a.empty_u32")->empty());
    EXPECT_EQ(f.find("a.empty_string")->elem_type, ValueType::STRING);
    EXPECT_TRUE(f.get_string_array("a.empty_string")->empty());
}

class GgufTensors : public ::testing::TestWithParam<uint64_t> {};

TEST_P(GgufTensors, BytesAndLayoutSurviveRoundTrip) {
    const uint64_t alignment = GetParam();
    struct Spec { std::string name; GgmlType type; std::vector<uint64_t> ne; };
    const std::vector<Spec> specs = {
        {"f32", GgmlType::F32, {5, 3}},  // 60 bytes: not a multiple of the alignment
        {"f16", GgmlType::F16, {7}},
        {"bf16", GgmlType::BF16, {2, 2, 2}},
        {"q4_0", GgmlType::Q4_0, {64, 3}},
        {"q8_0", GgmlType::Q8_0, {32, 1, 1, 2}},
        {"q4_k", GgmlType::Q4_K, {512, 2}},
        {"q6_k", GgmlType::Q6_K, {256}},
    };
    Writer w(alignment);
    w.set_string("general.architecture", "test");
    std::vector<std::vector<uint8_t>> data;
    for (size_t i = 0; i < specs.size(); ++i) {
        uint64_t rows = 1;
        for (size_t d = 1; d < specs[i].ne.size(); ++d) rows *= specs[i].ne[d];
        data.push_back(pattern(*row_bytes(type_traits(specs[i].type), specs[i].ne[0]) * rows, uint8_t(i)));
        w.add_tensor(specs[i].name, specs[i].type, specs[i].ne, data.back());
    }
    Parsed p(w.serialize());
    const File& f = p.file;

    EXPECT_EQ(f.alignment(), alignment);
    if (alignment == kDefaultAlignment) {
        EXPECT_EQ(f.find("general.alignment"), nullptr);  // the default is implied
    } else {
        ASSERT_NE(f.find("general.alignment"), nullptr);
        EXPECT_EQ(f.find("general.alignment")->type, ValueType::U32);
        EXPECT_EQ(*f.get_u32("general.alignment"), alignment);
    }
    EXPECT_EQ(f.data_offset() % alignment, 0u);
    ASSERT_EQ(f.tensors().size(), specs.size());
    uint64_t expect_offset = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        const TensorInfo& t = f.tensors()[i];
        EXPECT_EQ(t.name, specs[i].name);
        EXPECT_EQ(t.ggml_type(), specs[i].type);
        EXPECT_EQ(t.n_dims, specs[i].ne.size());
        for (size_t d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], d < specs[i].ne.size() ? specs[i].ne[d] : 1u);
        // ggml's rule: offsets are the running sum of sizes padded to the alignment.
        EXPECT_EQ(t.offset, expect_offset) << t.name;
        expect_offset += (t.n_bytes + alignment - 1) / alignment * alignment;
        EXPECT_EQ(t.n_bytes, data[i].size());
        EXPECT_EQ(t.data, f.bytes().data() + f.data_offset() + t.offset);
        EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), data[i]) << t.name;
        EXPECT_EQ(f.find_tensor(t.name), &t);
    }
    EXPECT_EQ(f.file_size(), f.data_offset() + expect_offset);
    EXPECT_EQ(f.find_tensor("missing"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufTensors, ::testing::Values(32, 64));

TEST(GgufWriter, WritesThroughTempFileAndOpens) {
    const fs::path dir = fs::temp_directory_path() / ("ptxlm_test_gguf_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path path = dir / "out.gguf";
    Writer w(64);
    w.set_u32("test.n", 3);
    w.add_tensor("t", GgmlType::F32, {4}, pattern(16, 1));
    w.write(path.string());
    w.write(path.string());  // replacing an existing file works too
    {
        File f = File::open(path.string());
        EXPECT_EQ(f.path(), path.string());
        EXPECT_EQ(*f.get_u32("test.n"), 3u);
        EXPECT_EQ(f.alignment(), 64u);
        EXPECT_EQ(std::vector<uint8_t>(f.bytes().begin(), f.bytes().end()), w.serialize());
        File moved = std::move(f);
        EXPECT_EQ(moved.find_tensor("t")->data[0], pattern(16, 1)[0]);  // views survive a move
    }
    size_t n_files = 0;
    for (const auto& e : fs::directory_iterator(dir)) n_files += e.is_regular_file();
    EXPECT_EQ(n_files, 1u);  // no temporary left behind
    EXPECT_THROW(w.write((dir / "no_such_dir" / "x.gguf").string()), Error);
    fs::remove_all(dir);
}

TEST(GgufWriter, RejectsWhatTheReaderWould) {
    EXPECT_THROW(Writer(0), Error);
    EXPECT_THROW(Writer(48), Error);
    Writer w;
    w.set_u32("k", 1);
    EXPECT_THROW(w.set_u32("k", 2), Error);
    EXPECT_THROW(w.set_u32("", 2), Error);
    EXPECT_THROW(w.set_u32(std::string(kMaxNameBytes + 1, 'k'), 2), Error);
    EXPECT_THROW(w.set("nested", MetaArray{ValueType::ARRAY, {}, {}}), Error);
    EXPECT_THROW(w.set("ragged", MetaArray{ValueType::U32, {1, 2, 3}, {}}), Error);
    EXPECT_THROW(w.set("general.alignment", uint32_t{64}), Error);  // differs from the Writer's 32
    EXPECT_NO_THROW(w.set("general.alignment", uint32_t{32}));
    EXPECT_THROW(w.add_tensor("t", GgmlType::Q4_K, {100}, {}), Error);          // not a block multiple
    EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {4}, pattern(15, 0)), Error);  // wrong size
    EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {4, 0}, {}), Error);
    EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {1, 1, 1, 1, 1}, pattern(4, 0)), Error);
    EXPECT_THROW(w.add_tensor(std::string(kMaxTensorNameBytes + 1, 't'), GgmlType::F32, {1}, pattern(4, 0)), Error);
    EXPECT_THROW(w.add_tensor("t", GgmlType(99), {1}, pattern(4, 0)), Error);
    w.add_tensor("t", GgmlType::F32, {1}, pattern(4, 0));
    EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {1}, pattern(4, 0)), Error);
    Parsed p(w.serialize());  // an explicit general.alignment equal to the default round-trips
    EXPECT_EQ(*p.file.get_u32("general.alignment"), 32u);
}

// ---- typed accessors -------------------------------------------------------------

TEST(GgufAccessors, IntegerWidthsAndSigns) {
    Writer w;
    w.set("u8", uint8_t{7});
    w.set("i32", int32_t{12});
    w.set("neg", int32_t{-3});
    w.set("u64", uint64_t{1} << 40);
    w.set("u64_small", uint64_t{99});
    w.set("i64_big", int64_t{1} << 35);
    w.set("u64_huge", std::numeric_limits<uint64_t>::max());
    w.set("flag", true);
    w.set("f", 2.5f);
    w.set("s", std::string("12"));
    w.set_i32s("arr", {1, 2});
    Parsed p(w.serialize());
    const File& f = p.file;

    EXPECT_EQ(*f.get_uint("u8"), 7u);
    EXPECT_EQ(*f.get_u32("u8"), 7u);
    EXPECT_EQ(*f.get_u32("i32"), 12u);        // gguf-py writes counts as i32 sometimes
    EXPECT_EQ(*f.get_u32("u64_small"), 99u);  // ... or as u64
    EXPECT_EQ(*f.get_uint("u64"), uint64_t{1} << 40);
    EXPECT_EQ(*f.get_uint("flag"), 1u);
    EXPECT_EQ(*f.get_int("neg"), -3);
    EXPECT_EQ(*f.get_int("i64_big"), int64_t{1} << 35);
    EXPECT_EQ(*f.get_float("i32"), 12.0);
    EXPECT_EQ(*f.get_float("neg"), -3.0);
    EXPECT_EQ(*f.get_float("f"), 2.5);
    EXPECT_FALSE(f.get_uint("absent").has_value());
    EXPECT_FALSE(f.get_string("absent").has_value());
    EXPECT_FALSE(f.get_per_layer_u32("absent", 3).has_value());

    // Errors name the file, the key's offset and the key.
    const std::string neg = error_of([&] { (void)f.get_u32("neg"); });
    EXPECT_NE(neg.find("mem.gguf: offset " + std::to_string(f.find("neg")->offset) + ": \"neg\": "), std::string::npos)
        << neg;
    EXPECT_NE(neg.find("value -3 (i32) is negative"), std::string::npos) << neg;
    EXPECT_THROW(f.get_uint("neg"), Error);
    EXPECT_NE(error_of([&] { (void)f.get_u32("u64"); }).find("out of range of u32"), std::string::npos);
    EXPECT_NE(error_of([&] { (void)f.get_int("u64_huge"); }).find("out of range of i64"), std::string::npos);
    EXPECT_NE(error_of([&] { (void)f.get_u32("s"); }).find("is string, expected an unsigned integer"),
              std::string::npos);
    EXPECT_THROW(f.get_int("s"), Error);
    EXPECT_THROW(f.get_float("s"), Error);
    EXPECT_THROW(f.get_uint("f"), Error);  // a float is not an integer
    EXPECT_THROW(f.get_u32("arr"), Error);
    EXPECT_THROW(f.get_bool("u8"), Error);
    EXPECT_THROW(f.get_string("u8"), Error);
    EXPECT_THROW(f.get_string_array("arr"), Error);
    EXPECT_THROW(f.get_int_array("u8"), Error);
    EXPECT_THROW(f.get_f32_array("s"), Error);
}

TEST(GgufAccessors, PerLayer) {
    Writer w;
    w.set_u32("scalar", 4);
    w.set_i32s("array", {4, 1, 4});
    w.set("array_u64", array_of<uint64_t>(ValueType::U64, {8, 8, uint64_t{1} << 33}));
    w.set_i32s("negative", {4, -1, 4});
    w.set_f32s("floats", {1, 2, 3});
    w.set_strings("strings", {"a", "b", "c"});
    w.set("neg_scalar", int32_t{-1});
    Parsed p(w.serialize());
    const File& f = p.file;

    EXPECT_EQ(*f.get_per_layer_u32("scalar", 3), (std::vector<uint32_t>{4, 4, 4}));
    EXPECT_EQ(*f.get_per_layer_u32("array", 3), (std::vector<uint32_t>{4, 1, 4}));
    const std::string wrong_len = error_of([&] { (void)f.get_per_layer_u32("array", 4); });
    EXPECT_NE(wrong_len.find("\"array\": array has 3 elements, expected one per layer (4)"), std::string::npos)
        << wrong_len;
    EXPECT_THROW(f.get_per_layer_u32("array_u64", 3), Error);  // 2^33 out of u32 range
    EXPECT_NE(error_of([&] { (void)f.get_per_layer_u32("negative", 3); }).find("element 1: value -1"),
              std::string::npos);
    EXPECT_THROW(f.get_per_layer_u32("floats", 3), Error);
    EXPECT_THROW(f.get_per_layer_u32("strings", 3), Error);
    EXPECT_THROW(f.get_per_layer_u32("neg_scalar", 3), Error);
}

// ---- the malformed corpus --------------------------------------------------------

// Each malformed file and the words its error must contain (after "<path>: ").
// The offsets were checked by hand against make_corpus.py's layout.
const std::map<std::string, std::string> kExpected = {
    {"alignment_wrong_type.gguf", "offset 49: \"general.alignment\" type: must be u32, got u64"},
    {"bad_alignment_npot.gguf", "offset 53: \"general.alignment\" value: must be a nonzero power of two, got 48"},
    {"bad_alignment_zero.gguf", "offset 53: \"general.alignment\" value: must be a nonzero power of two, got 0"},
    {"bad_array_elem_type.gguf", "offset 44: \"test.arr\" element type: unknown value type 42"},
    {"bad_bool.gguf", "offset 45: \"test.flag\" value: bool must be 0 or 1, got 2"},
    {"bad_bool_array.gguf", "offset 60: \"test.flags\"[2]: bool must be 0 or 1, got 7"},
    {"bad_ggml_type.gguf", "offset 75: tensor \"t.weight\" type: unknown ggml type 99"},
    {"bad_magic.gguf", "offset 0: magic: expected 0x46554747 (\"GGUF\"), got 0x4c4d4747"},
    {"bad_ndims.gguf", "offset 63: tensor \"t.weight\" n_dims: must be 1..4, got 5"},
    {"bad_value_type.gguf", "offset 38: \"test.x\" type: unknown value type 13"},
    {"data_section_past_end.gguf", "offset 97: data section: starts at offset 1048576"},
    {"dim_over_int64.gguf", "offset 67: tensor \"t.weight\" ne[0]: 9223372036854775808 exceeds INT64_MAX"},
    {"dims_overflow.gguf", "offset 67: tensor \"t.weight\" ne: element count overflows int64 at ne[1]"},
    {"dup_key.gguf", "offset 69: \"test.a\": duplicate key (first at offset 24)"},
    {"dup_tensor.gguf", "offset 87: tensor \"t.weight\": duplicate tensor name (first at offset 47)"},
    {"empty_file.gguf", "offset 0: magic: truncated: needs 4 bytes, 0 left"},
    {"empty_key.gguf", "offset 24: kv[0] key: empty name"},
    {"empty_tensor_name.gguf", "offset 47: tensor[0] name: empty name"},
    {"huge_array_count.gguf", "offset 48: \"test.arr\" count: 2305843009213693952 elements of u32"},
    {"huge_key_len.gguf", "offset 24: kv[0] key: name length 18446744073709551615 exceeds the limit of 256"},
    {"huge_kv_count.gguf", "offset 16: kv_count: 4611686018427387904 entries cannot fit in the 23 bytes left"},
    {"huge_string_array_count.gguf", "offset 61: \"tokenizer.ggml.tokens\" count: 1152921504606846976 strings cannot fit"},
    {"huge_string_len.gguf", "offset 48: \"general.name\" value: string length 9223372036854775808 exceeds the 3 bytes left"},
    {"huge_tensor_count.gguf", "offset 8: tensor_count: 4611686018427387904 tensor infos cannot fit"},
    {"huge_tensor_name_len.gguf", "offset 47: tensor[0] name: name length 9223372036854775808 exceeds the limit of 63"},
    {"long_key.gguf", "offset 24: kv[0] key: name length 257 exceeds the limit of 256 bytes"},
    {"long_tensor_name.gguf", "offset 47: tensor[0] name: name length 64 exceeds the limit of 63 bytes"},
    {"misaligned_offset.gguf", "offset 79: tensor \"t.weight\" offset: 16 is not a multiple of the alignment 32"},
    {"nested_array.gguf", "offset 47: \"test.nested\" element type: nested arrays are not supported"},
    {"nul_in_key.gguf", "offset 24: kv[0] key: name \"gen\\x00eral.x\" contains a NUL byte"},
    {"offset_past_end.gguf", "offset 47: tensor \"t.weight\" data: needs 32 bytes at data offset 4096, past the end"},
    {"offset_wrap.gguf", "offset 47: tensor \"t.weight\" data: needs 64 bytes at data offset 18446744073709551584"},
    {"overlapping_tensors.gguf", "offset 87: tensor \"b.weight\" offset: data at 32 overlaps tensor \"a.weight\""},
    {"row_not_block_multiple.gguf", "offset 67: tensor \"t.weight\" ne[0]: row length 100 is not a multiple of Q4_K's block size 256"},
    {"string_array_elem_past_end.gguf", "offset 78: \"tokenizer.ggml.tokens\"[1]: string length 1000 exceeds the 3 bytes left"},
    {"tensor_bytes_overflow.gguf", "offset 67: tensor \"t.weight\" ne: tensor size in bytes overflows 64 bits"},
    {"trunc_at_data.gguf", "offset 222: tensor \"tok.weight\" data: needs 64 bytes at data offset 0"},
    {"trunc_at_end_of_infos.gguf", "offset 363: data section: starts at offset 384"},
    {"trunc_at_first_key.gguf", "offset 16: kv_count: 4 entries cannot fit in the 0 bytes left"},
    {"trunc_at_first_type.gguf", "offset 16: kv_count: 4 entries cannot fit in the 28 bytes left"},
    {"trunc_at_first_value.gguf", "offset 16: kv_count: 4 entries cannot fit in the 32 bytes left"},
    {"trunc_at_kv_count.gguf", "offset 16: kv_count: truncated: needs 8 bytes, 0 left"},
    {"trunc_at_last_kv.gguf", "offset 147: kv[3] key: truncated: needs 8 bytes, 0 left"},
    {"trunc_at_magic.gguf", "offset 0: magic: truncated: needs 4 bytes, 2 left"},
    {"trunc_at_tensor_count.gguf", "offset 8: tensor_count: truncated: needs 8 bytes, 0 left"},
    {"trunc_at_tensor_infos.gguf", "offset 8: tensor_count: 3 tensor infos cannot fit in the 0 bytes left"},
    {"trunc_at_version.gguf", "offset 4: version: truncated: needs 4 bytes, 0 left"},
    {"trunc_data.gguf", "offset 321: tensor \"f16.weight\" data: needs 8 bytes at data offset 160"},
    {"trunc_header.gguf", "offset 16: kv_count: truncated: needs 8 bytes, 4 left"},
    {"trunc_kv_key.gguf", "offset 24: kv[0] key: string length 40 exceeds the 12 bytes left"},
    {"trunc_kv_value.gguf", "offset 39: \"k.x\" value: truncated: needs 4 bytes, 2 left"},
    {"trunc_last_byte.gguf", "offset 321: tensor \"f16.weight\" data: needs 8 bytes at data offset 160"},
    {"trunc_mid_data.gguf", "offset 272: tensor \"q8.weight\" data: needs 68 bytes at data offset 64"},
    {"trunc_mid_first_key.gguf", "offset 16: kv_count: 4 entries cannot fit in the 12 bytes left"},
    {"trunc_mid_last_kv.gguf", "offset 212: \"tokenizer.ggml.tokens\"[2]: truncated: string length needs 8 bytes, 7 left"},
    {"trunc_mid_tensor_info.gguf", "offset 8: tensor_count: 3 tensor infos cannot fit in the 55 bytes left"},
    {"version1.gguf", "offset 4: version: GGUF v1 (32-bit counts) is not supported"},
    {"version_huge.gguf", "offset 4: version: unsupported version 4294967295"},
    {"zero_dim.gguf", "offset 75: tensor \"t.weight\" ne[1]: dimension is zero"},
    {"zero_ndims.gguf", "offset 63: tensor \"t.weight\" n_dims: must be 1..4, got 0"},
};

TEST(GgufCorpus, EveryMalformedFileIsRejectedWithItsMessage) {
    const fs::path dir = kCorpus / "gguf";
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    std::set<std::string> seen;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        seen.insert(name);
        const auto it = kExpected.find(name);
        if (it == kExpected.end()) {
            ADD_FAILURE() << name << ": not in the expectation table; add the words its error must contain";
            continue;
        }
        const std::string msg = error_of([&] { (void)File::open(e.path().string()); });
        const std::string want = e.path().string() + ": " + it->second;
        EXPECT_EQ(msg.rfind(want, 0), 0u) << name << "\n  got:  " << msg << "\n  want: " << want << "...";
    }
    for (const auto& [name, msg] : kExpected) EXPECT_TRUE(seen.count(name)) << name << " missing from " << dir;
}

TEST(GgufCorpus, EveryValidFileParses) {
    const fs::path dir = kCorpus / "gguf-valid";
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        EXPECT_NO_THROW((void)File::open(e.path().string())) << e.path();
        ++n;
    }
    EXPECT_GE(n, 5u);
    const File f = File::open((dir / "valid_gguf_py.gguf").string());  // written by gguf-py itself
    EXPECT_EQ(*f.get_string("general.architecture"), "sample");
    EXPECT_EQ(*f.get_per_layer_u32("s.head_count_kv", 2), (std::vector<uint32_t>{1, 2}));
    EXPECT_EQ(*f.get_per_layer_u32("s.head_count", 2), (std::vector<uint32_t>{4, 4}));
    EXPECT_EQ(f.find_tensor("q4_k.weight")->ggml_type(), GgmlType::Q4_K);
    EXPECT_EQ(f.find_tensor("f32.weight")->ne[0], 8u);  // numpy shape (2, 8) is ne {8, 2}
    EXPECT_EQ(f.find_tensor("f32.weight")->ne[1], 2u);
}

// Every prefix of a valid file is rejected until the last tensor's final byte
// is present (only zero padding may be missing), and every prefix is rejected
// with an Error, never anything else.
TEST(GgufCorpus, EveryTruncationIsAnError) {
    std::ifstream in(kCorpus / "gguf-valid" / "valid_small.gguf", std::ios::binary);
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    ASSERT_FALSE(bytes.empty());
    const File whole = File::parse(bytes, "whole");
    uint64_t needed = 0;
    for (const TensorInfo& t : whole.tensors()) needed = std::max(needed, whole.data_offset() + t.offset + t.n_bytes);
    for (size_t n = 0; n < bytes.size(); ++n) {
        const std::span<const uint8_t> prefix(bytes.data(), n);
        if (n < needed)
            EXPECT_THROW((void)File::parse(prefix, "prefix"), Error) << n;
        else
            EXPECT_NO_THROW((void)File::parse(prefix, "prefix")) << n;
    }
}

// A small deterministic mutation run: whatever the bytes, parse either
// succeeds or throws gguf::Error (the fuzzer does this at scale).
TEST(GgufCorpus, MutationsNeverThrowAnythingElse) {
    std::ifstream in(kCorpus / "gguf-valid" / "valid_small.gguf", std::ios::binary);
    const std::vector<uint8_t> seed{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    ASSERT_FALSE(seed.empty());
    std::mt19937 rng(1234);
    size_t parsed = 0;
    for (int iter = 0; iter < 20000; ++iter) {
        std::vector<uint8_t> b = seed;
        const int flips = 1 + int(rng() % 4);
        for (int k = 0; k < flips; ++k) {
            const size_t at = rng() % b.size();
            b[at] = (rng() % 4 == 0) ? 0xFF : uint8_t(rng());
        }
        try {
            const File f = File::parse(b, "mutant");
            for (const KeyValue& kv : f.metadata()) {
                try {
                    (void)f.get_int(kv.key);
                } catch (const Error&) {
                }
            }
            ++parsed;
        } catch (const Error&) {
        }
    }
    EXPECT_GT(parsed, 0u);  // some mutations land in tensor data and still parse
}

TEST(GgufOpen, MissingFileAndDirectory) {
    const std::string missing = error_of([] { (void)File::open("/nonexistent/x.gguf"); });
    EXPECT_NE(missing.find("/nonexistent/x.gguf: cannot open"), std::string::npos) << missing;
    const std::string dir = error_of([] { (void)File::open(PTXLM_SOURCE_DIR); });
    EXPECT_NE(dir.find("not a regular file"), std::string::npos) << dir;
}
