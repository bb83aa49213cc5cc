// A parsed file's metadata entry as gguf::Writer takes it: tests that copy
// a file with edits (test_tokenizer, test_separate_qkv).
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace ptxlm::testing_util {

// A metadata entry of a file as a writer value.
inline gguf::MetaValue to_meta(const gguf::KeyValue& kv) {
    using VT = gguf::ValueType;
    auto scalar = [&](auto v) {
        std::memcpy(&v, kv.raw.data(), sizeof v);
        return gguf::MetaValue(v);
    };
    switch (kv.type) {
        case VT::U8: return scalar(uint8_t{});
        case VT::I8: return scalar(int8_t{});
        case VT::U16: return scalar(uint16_t{});
        case VT::I16: return scalar(int16_t{});
        case VT::U32: return scalar(uint32_t{});
        case VT::I32: return scalar(int32_t{});
        case VT::F32: return scalar(float{});
        case VT::U64: return scalar(uint64_t{});
        case VT::I64: return scalar(int64_t{});
        case VT::F64: return scalar(double{});
        case VT::BOOL: return gguf::MetaValue(kv.raw[0] != 0);
        case VT::STRING: return gguf::MetaValue(std::string(kv.strings.at(0)));
        case VT::ARRAY: {
            gguf::MetaArray a;
            a.elem_type = kv.elem_type;
            if (kv.elem_type == VT::STRING) a.strings.assign(kv.strings.begin(), kv.strings.end());
            else a.bytes.assign(kv.raw.begin(), kv.raw.end());
            return a;
        }
    }
    throw std::logic_error("unknown value type");
}

}  // namespace ptxlm::testing_util
