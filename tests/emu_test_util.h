// Helpers shared by the emu interpreter tests: a module loaded from PTX text,
// its global memory, and a packed parameter buffer.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "interp.h"
#include "stats.h"

namespace ptxlm::emu::testing_util {

inline const char* kHead = ".version 7.8\n.target sm_90\n.address_size 64\n";

struct Params {
    std::vector<uint8_t> b;
    template <class T>
    Params& add(T v) {
        size_t a = sizeof(T);
        b.resize((b.size() + a - 1) / a * a);
        size_t o = b.size();
        b.resize(o + sizeof(T));
        std::memcpy(b.data() + o, &v, sizeof(T));
        return *this;
    }
};

struct Emu {
    Memory mem;
    std::shared_ptr<const Program> prog;
    std::string log;
    // `body` gets the default header unless it brings its own .version.
    explicit Emu(const std::string& body) {
        prog = load_program(body.find(".version") == std::string::npos ? std::string(kHead) + body : body, &log);
    }
    uint64_t alloc(size_t bytes, bool zero = true) {
        uint64_t a = mem.alloc(bytes);
        if (zero) std::memset(mem.translate(a, bytes), 0, bytes);
        return a;
    }
    template <class T>
    void put(uint64_t a, const std::vector<T>& v) { std::memcpy(mem.translate(a, v.size() * sizeof(T)), v.data(), v.size() * sizeof(T)); }
    template <class T>
    std::vector<T> get(uint64_t a, size_t n) {
        std::vector<T> v(n);
        std::memcpy(v.data(), mem.translate(a, n * sizeof(T)), n * sizeof(T));
        return v;
    }
    std::optional<Fault> run(const char* k, Dim3 grid, Dim3 block, const Params& p, Stats* s = nullptr, uint32_t dyn = 0) {
        LaunchConfig c;
        c.grid = grid;
        c.block = block;
        c.params = p.b.data();
        c.params_size = uint32_t(p.b.size());
        c.dynamic_shared_bytes = dyn;
        return run_kernel(*prog, k, c, mem, s);
    }
};

#define ASSERT_LOADED(e) ASSERT_TRUE((e).prog) << (e).log
#define ASSERT_NO_FAULT(f) ASSERT_FALSE(f.has_value()) << f->message

inline uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bitsf(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

}  // namespace ptxlm::emu::testing_util
