// libFuzzer entry for the GGUF reader: parse the input, then walk every
// accessor on the result. A gguf::Error is the expected outcome for malformed
// input; anything else escaping (std::bad_alloc, std::length_error) or any
// sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "gguf/gguf.h"

namespace {

// Calls an accessor; an Error is a fine answer for a value of the wrong type.
template <class F>
void probe(F&& f) {
    try {
        f();
    } catch (const ptxlm::gguf::Error&) {
    }
}

// Reads every byte a view promises, so ASan sees any view past the buffer.
uint64_t touch(const uint8_t* p, uint64_t n) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; ++i) sum += p[i];
    return sum;
}

void walk(const ptxlm::gguf::File& f) {
    using namespace ptxlm::gguf;
    volatile uint64_t sink = f.version() + f.alignment() + f.data_offset() + f.file_size();
    for (const KeyValue& kv : f.metadata()) {
        const std::string& k = kv.key;
        if (f.find(k) != &kv) __builtin_trap();  // the index must agree with the list
        sink = sink + touch(kv.raw.data(), kv.raw.size());
        for (std::string_view s : kv.strings) sink = sink + touch(reinterpret_cast<const uint8_t*>(s.data()), s.size());
        probe([&] { (void)f.get_uint(k); });
        probe([&] { (void)f.get_u32(k); });
        probe([&] { (void)f.get_int(k); });
        probe([&] { (void)f.get_float(k); });
        probe([&] { (void)f.get_bool(k); });
        probe([&] { (void)f.get_string(k); });
        probe([&] { (void)f.get_string_array(k); });
        probe([&] { (void)f.get_f32_array(k); });
        probe([&] { (void)f.get_int_array(k); });
        probe([&] { (void)f.get_per_layer_u32(k, 4); });
        // Only as many layers as the array claims: the file backs that count.
        probe([&] { (void)f.get_per_layer_u32(k, uint32_t(kv.count)); });
    }
    for (const TensorInfo& t : f.tensors()) {
        if (f.find_tensor(t.name) != &t) __builtin_trap();
        if (t.data < f.bytes().data() || t.n_bytes > f.file_size() ||
            t.data + t.n_bytes > f.bytes().data() + f.file_size())
            __builtin_trap();  // the parser promised the extent lies inside the file
        sink = sink + touch(t.data, t.n_bytes) + t.n_elements() + t.n_rows();
        (void)type_name(t.type);
    }
    (void)f.find("general.architecture");
    (void)f.find_tensor("token_embd.weight");
}

}  // namespace

// The one entry both the fuzzer and gguf_replay use. Returns a line describing
// the outcome: the Error's message, or a summary of what parsed.
std::string ptxlm_fuzz_one(const uint8_t* data, size_t size) {
    try {
        const auto f = ptxlm::gguf::File::parse({data, size}, "input");
        walk(f);
        return "ok: v" + std::to_string(f.version()) + ", " + std::to_string(f.metadata().size()) + " keys, " +
               std::to_string(f.tensors().size()) + " tensors, data at " + std::to_string(f.data_offset());
    } catch (const ptxlm::gguf::Error& e) {
        return std::string("error: ") + e.what();
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    (void)ptxlm_fuzz_one(data, size);
    return 0;
}
