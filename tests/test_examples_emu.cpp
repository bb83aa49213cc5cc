// The example kernels (kernels/examples) run through the engine's real CUDA
// path (engine/cuda -> dlopen -> emu's libcuda.so.1, selected by
// PTXLM_LIBCUDA) and are compared with their C++ references at the
// tolerances examples.h states. A negative control proves the comparison
// bites: a kernel generated with a wrong parameter must fail it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/launch.h"
#include "engine/cuda/module.h"
#include "kernels/examples/examples.h"

namespace {

using namespace ptxlm;
namespace kx = ptxlm::kernels;
using ptx::DevPtr;

class ExamplesOnEmu : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        driver_ = cuda::Driver::load();   // PTXLM_LIBCUDA points at emu (set by ctest)
        ctx_ = new cuda::Context(driver_);
    }
    static void TearDownTestSuite() {
        delete ctx_;
        ctx_ = nullptr;
        driver_.reset();
    }

    cuda::DeviceBuffer upload(const std::vector<float>& v) {
        cuda::DeviceBuffer b(*ctx_, v.size() * sizeof(float));
        b.upload(v.data(), v.size() * sizeof(float));
        return b;
    }
    static std::vector<float> download(const cuda::DeviceBuffer& b, size_t n) {
        std::vector<float> v(n);
        b.download(v.data(), n * sizeof(float));
        return v;
    }
    // Loads, launches with the generator's own geometry, waits.
    void run(const ptx::GeneratedKernel& g, ptx::ParamPack pack) {
        cuda::Module m(*ctx_, g.ptx);
        cuda::Stream s(*ctx_);
        cuda::launch(m.function(g.name), g.geometry, s, pack);
        s.synchronize();
    }
    std::vector<float> randv(size_t n, float sd = 2.0f) {
        std::normal_distribution<float> nd(0.0f, sd);
        std::vector<float> v(n);
        for (float& x : v) x = nd(rng_);
        return v;
    }

    static std::shared_ptr<const cuda::Driver> driver_;
    static cuda::Context* ctx_;
    std::mt19937 rng_{1};
};
std::shared_ptr<const cuda::Driver> ExamplesOnEmu::driver_;
cuda::Context* ExamplesOnEmu::ctx_ = nullptr;

// Counts elements outside tolerance; reports the first few.
size_t mismatches(const char* what, const std::vector<float>& got, const std::vector<float>& ref,
                  const std::function<double(size_t)>& tol) {
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(double(got[i]) - double(ref[i]));
        if (!(err <= tol(i)) && bad++ < 3)
            ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", reference " << ref[i];
    }
    return bad;
}

TEST_F(ExamplesOnEmu, RmsNormMatchesReference) {
    for (kx::RmsNormShape s : {kx::RmsNormShape{3, 576, 1e-5f}, kx::RmsNormShape{2, 640, 1e-6f}}) {
        const auto x = randv(size_t(s.rows) * s.cols), w = randv(s.cols);
        const auto g = kx::rmsnorm_kernel(s);
        auto dx = upload(x), dw = upload(w), dy = upload(std::vector<float>(x.size()));
        run(g, g.params.pack({DevPtr{dx.ptr()}, DevPtr{dw.ptr()}, DevPtr{dy.ptr()}}));
        std::vector<float> ref(x.size());
        kx::rmsnorm_ref(s, x.data(), w.data(), ref.data());
        EXPECT_EQ(mismatches("rmsnorm", download(dy, x.size()), ref,
                             [&](size_t i) { return 1e-5 * std::fabs(ref[i]) + 1e-6; }), 0u);
    }
}

TEST_F(ExamplesOnEmu, NegativeControlWrongEpsFailsTheComparison) {
    // Same kernel generated with eps 1e-2 instead of 1e-5, on inputs small
    // enough that eps matters: the stated tolerance must reject it.
    const kx::RmsNormShape s{2, 576, 1e-5f}, wrong{2, 576, 1e-2f};
    const auto x = randv(size_t(s.rows) * s.cols, 0.05f), w = randv(s.cols);
    const auto g = kx::rmsnorm_kernel(wrong);
    auto dx = upload(x), dw = upload(w), dy = upload(std::vector<float>(x.size()));
    run(g, g.params.pack({DevPtr{dx.ptr()}, DevPtr{dw.ptr()}, DevPtr{dy.ptr()}}));
    std::vector<float> ref(x.size());
    kx::rmsnorm_ref(s, x.data(), w.data(), ref.data());
    const auto got = download(dy, x.size());
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
        bad += !(std::fabs(double(got[i]) - ref[i]) <= 1e-5 * std::fabs(ref[i]) + 1e-6);
    EXPECT_GT(bad, got.size() / 2) << "a kernel with the wrong eps passed the rmsnorm tolerance";
}

TEST_F(ExamplesOnEmu, SoftmaxMatchesReference) {
    const kx::SoftmaxShape s{9, 1000};
    const auto x = randv(size_t(s.rows) * s.cols);
    const auto g = kx::softmax_kernel(s);
    auto dx = upload(x), dy = upload(std::vector<float>(x.size()));
    run(g, g.params.pack({DevPtr{dx.ptr()}, DevPtr{dy.ptr()}}));
    std::vector<float> ref(x.size());
    kx::softmax_ref(s, x.data(), ref.data());
    EXPECT_EQ(mismatches("softmax", download(dy, x.size()), ref, [&](size_t i) { return 2e-5 * ref[i] + 1e-7; }), 0u);
}

TEST_F(ExamplesOnEmu, CrossBlockArgmaxFindsTheLowestMaximalIndex) {
    for (kx::ArgmaxShape s : {kx::ArgmaxShape{100000}, kx::ArgmaxShape{49152, 128, 4}}) {
        auto x = randv(s.n);
        x[777] = 50.0f;
        x[s.n - 5] = 50.0f;   // a tie in another block: the lower index wins
        const auto g = kx::argmax_kernel(s);
        auto dx = upload(x);
        cuda::DeviceBuffer out(*ctx_, 8);
        out.fill_bytes(0);
        run(g, g.params.pack({DevPtr{dx.ptr()}, DevPtr{out.ptr()}}));
        uint64_t key = 0;
        out.download(&key, 8);
        EXPECT_EQ(key, kx::argmax_ref(s, x.data()));
        EXPECT_EQ(kx::argmax_index(key), 777u);
    }
}

TEST_F(ExamplesOnEmu, ActivationBackwardMatchesReference) {
    for (auto act : {kx::Activation::relu, kx::Activation::gelu_tanh, kx::Activation::silu}) {
        const kx::ActBackwardShape s{5000, act};
        const auto x = randv(s.n), dy = randv(s.n);
        const auto g = kx::act_backward_kernel(s);
        auto bx = upload(x), bdy = upload(dy), bdx = upload(std::vector<float>(s.n));
        run(g, g.params.pack({DevPtr{bx.ptr()}, DevPtr{bdy.ptr()}, DevPtr{bdx.ptr()}}));
        std::vector<float> ref(s.n);
        kx::act_backward_ref(s, x.data(), dy.data(), ref.data());
        EXPECT_EQ(mismatches(g.name.c_str(), download(bdx, s.n), ref,
                             [&](size_t i) {
                                 switch (act) {
                                     case kx::Activation::relu: return 0.0;
                                     case kx::Activation::silu: return 1e-5 * (std::fabs(dy[i]) + std::fabs(ref[i]));
                                     default: {
                                         // tanh.approx's 2^-11 relative error on t, through
                                         // f' = (1+t)/2 + (x c/2)(1-t^2)(1+3a x^2): |d f'/dt| <= 1/2 + |x| c (1+3a x^2)
                                         const double ax = std::fabs(x[i]);
                                         const double gain = 0.5 + ax * 0.7978845608 * (1 + 3 * 0.044715 * ax * ax);
                                         return std::fabs(dy[i]) * (std::ldexp(1.0, -11) * gain + 1e-5) + 1e-6;
                                     }
                                 }
                             }),
                  0u);
    }
}

TEST_F(ExamplesOnEmu, NormReduceClipPipelineWithoutHostRoundTrip) {
    // sumsq partials -> clip scale (written to device memory) -> clip reading
    // the scale from device memory: three launches, no host read in between.
    const kx::SumSqShape ss{100000};
    const auto x = randv(ss.n);
    const auto g1 = kx::sumsq_partials_kernel(ss);
    const uint32_t nb = g1.geometry.grid.x;
    const kx::ClipScaleShape cs{nb, 10.0f};
    const kx::ClipApplyShape ca{ss.n};
    const auto g2 = kx::clip_scale_kernel(cs);
    const auto g3 = kx::clip_apply_kernel(ca);
    auto dx = upload(x), dp = upload(std::vector<float>(nb)), dout = upload(std::vector<float>(2));
    run(g1, g1.params.pack({DevPtr{dx.ptr()}, DevPtr{dp.ptr()}}));
    run(g2, g2.params.pack({DevPtr{dp.ptr()}, DevPtr{dout.ptr()}}));
    run(g3, g3.params.pack({DevPtr{dx.ptr()}, DevPtr{dout.ptr()}}));

    std::vector<float> ref_p(nb), ref_out(2);
    kx::sumsq_partials_ref(ss, x.data(), ref_p.data());
    const auto p = download(dp, nb);
    EXPECT_EQ(mismatches("sumsq_partials", p, ref_p, [&](size_t i) { return 1e-5 * ref_p[i]; }), 0u);
    kx::clip_scale_ref(cs, p.data(), ref_out.data());
    const auto out = download(dout, 2);
    EXPECT_EQ(mismatches("clip_scale", out, ref_out, [&](size_t i) { return 1e-5 * std::fabs(ref_out[i]); }), 0u);
    EXPECT_LT(out[0], 1.0f) << "the test data should need clipping (norm " << out[1] << ")";
    std::vector<float> ref_g = x;
    kx::clip_apply_ref(ca, ref_g.data(), out[0]);
    EXPECT_EQ(mismatches("clip_apply", download(dx, ss.n), ref_g, [](size_t) { return 0.0; }), 0u);
}

TEST_F(ExamplesOnEmu, ReadStreamReadsEveryChunkOnce) {
    // 3 blocks of 128 threads over 10003 chunks: a partial last step, and
    // threads with one chunk fewer than others. XOR is exact, so the warps'
    // words equal the reference bit for bit; a reference that skips one
    // chunk (the negative control) does not.
    const kx::ReadStreamShape s{10003, 3, 128};
    std::vector<uint32_t> x(4 * s.chunks);
    std::mt19937 rng(7);
    for (uint32_t& w : x) w = rng();
    const auto g = kx::read_stream_kernel(s);
    const size_t warps = size_t(s.blocks) * s.block / 32;
    cuda::DeviceBuffer dx(*ctx_, x.size() * 4), dout(*ctx_, warps * 4);
    dx.upload(x.data(), x.size() * 4);
    run(g, g.params.pack({DevPtr{dx.ptr()}, DevPtr{dout.ptr()}}));
    std::vector<uint32_t> got(warps), ref(warps);
    dout.download(got.data(), warps * 4);
    kx::read_stream_ref(s, x.data(), ref.data());
    EXPECT_EQ(got, ref);
    kx::ReadStreamShape short_by_one = s;
    --short_by_one.chunks;
    kx::read_stream_ref(short_by_one, x.data(), ref.data());
    EXPECT_NE(got, ref) << "the reference without the last chunk matches too";
}

TEST_F(ExamplesOnEmu, EveryBuilderCoverageKernelLoads) {
    // emu must accept every instruction family the builder emits (sm_80 and
    // the sm_90 extras) — loading runs its parser and pre-decoder.
    for (const char* arch : {"sm_80", "sm_90"})
        for (const auto& g : kx::builder_coverage_kernels(ptx::Target::parse(arch))) {
            try {
                cuda::Module m(*ctx_, g.ptx);
                (void)m.function(g.name);
            } catch (const std::exception& e) {
                ADD_FAILURE() << g.name << " (" << arch << "): " << e.what();
            }
        }
}

}  // namespace
