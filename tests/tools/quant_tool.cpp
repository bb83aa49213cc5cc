// Test-only tool: runs the library's row quantizers and dequantizers on raw
// files, so Python can cross-check them against gguf-py.
//
//   quant_tool dequant  TYPE IN OUT   IN: whole blocks of TYPE; OUT: f32 LE
//   quant_tool quantize TYPE IN OUT   IN: f32 LE, a whole number of blocks; OUT: blocks
//   quant_tool types                  the type table: name id block_elems block_bytes dequant quant
//
// Exit status: 0 ok, 2 bad usage or bad input (message on stderr), 1 I/O error on OUT.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/quant.h"

namespace {

using ptxlm::gguf::TypeTraits;

int fail(int code, const std::string& msg) {
    std::fprintf(stderr, "quant_tool: %s\n", msg.c_str());
    return code;
}

bool read_file(const char* path, std::vector<uint8_t>& out) {
    std::FILE* f = std::fopen(path, "rb");
    if (!f) return false;
    out.clear();
    uint8_t buf[1 << 16];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + got);
    const bool ok = !std::ferror(f);   // e.g. EISDIR for a directory
    std::fclose(f);
    return ok;
}

bool write_file(const char* path, const void* data, size_t n) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) return false;
    f.write(static_cast<const char*>(data), std::streamsize(n));
    return bool(f);
}

int usage() {
    return fail(2, "usage: quant_tool dequant|quantize TYPE IN OUT | quant_tool types");
}

int list_types() {
    // Every id the table knows (ggml's ids are all below 64).
    for (uint32_t id = 0; id < 64; ++id) {
        const TypeTraits* t = ptxlm::gguf::find_type(id);
        if (!t) continue;
        std::printf("%s %u %u %u %d %d\n", t->name, id, t->block_elems, t->block_bytes,
                    t->dequantize_row ? 1 : 0, t->quantize_row ? 1 : 0);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "types") == 0) return list_types();
    if (argc != 5) return usage();
    const std::string mode = argv[1];
    const TypeTraits* t = ptxlm::gguf::find_type_by_name(argv[2]);
    if (!t) return fail(2, std::string("unknown type '") + argv[2] + "'");

    std::vector<uint8_t> in;
    if (!read_file(argv[3], in)) return fail(2, std::string("cannot read ") + argv[3]);

    if (mode == "dequant") {
        if (!t->dequantize_row) return fail(2, std::string("no dequantizer for ") + t->name);
        if (in.size() % t->block_bytes != 0)
            return fail(2, std::string(argv[3]) + ": " + std::to_string(in.size()) +
                               " bytes is not a whole number of " + t->name + " blocks (" +
                               std::to_string(t->block_bytes) + " bytes)");
        const int64_t n = int64_t(in.size() / t->block_bytes) * t->block_elems;
        std::vector<float> out(size_t(n) + 1);   // +1: never a zero-size buffer
        t->dequantize_row(in.data(), out.data(), n);
        if (!write_file(argv[4], out.data(), size_t(n) * sizeof(float)))
            return fail(1, std::string("cannot write ") + argv[4]);
        return 0;
    }
    if (mode == "quantize") {
        if (!t->quantize_row) return fail(2, std::string("no quantizer for ") + t->name);
        const size_t block_in = size_t(t->block_elems) * sizeof(float);
        if (in.size() % block_in != 0)
            return fail(2, std::string(argv[3]) + ": " + std::to_string(in.size()) +
                               " bytes is not a whole number of " + std::to_string(t->block_elems) +
                               "-float blocks");
        const int64_t n = int64_t(in.size() / sizeof(float));
        std::vector<float> x(size_t(n) + 1);
        std::memcpy(x.data(), in.data(), in.size());
        const size_t out_bytes = in.size() / block_in * t->block_bytes;
        std::vector<uint8_t> out(out_bytes + 1);
        t->quantize_row(x.data(), out.data(), n);
        if (!write_file(argv[4], out.data(), out_bytes))
            return fail(1, std::string("cannot write ") + argv[4]);
        return 0;
    }
    return usage();
}
