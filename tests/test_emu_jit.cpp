// emu's cuModuleLoadDataEx asks the toolkit's ptxas for the real JIT's
// verdict (emu/jit_check.h): a module ptxas rejects fails with ptxas's log,
// NUM_REGS is ptxas's register count, and verdicts are cached by content so
// a suite pays ptxas once per module. Counting goes through a wrapper script
// given as PTXLM_PTXAS (emu reads it, and its cache folder, on every load).
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/module.h"

namespace {

namespace fs = std::filesystem;
using namespace ptxlm::cuda;
using ::testing::HasSubstr;

const char* kKernel = R"(.version 7.8
.target sm_90
.address_size 64
.visible .entry twice(.param .u64 px)
{
    .reg .b32 %r<3>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [px];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.f32 %f1, [%rd3];
    add.rn.f32 %f2, %f1, %f1;
    st.global.f32 [%rd3], %f2;
    ret;
}
)";

class EmuJit : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ptxlm-emu-jit-test-" + std::to_string(getpid()) + "-" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_ / "cache");
        counter_ = dir_ / "count";
        // Appends a line per run, then runs the real ptxas with the same arguments.
        wrapper_ = dir_ / "ptxas";
        std::ofstream(wrapper_) << "#!/bin/sh\necho run >> '" << counter_.string() << "'\nexec '" << PTXLM_PTXAS
                                << "' \"$@\"\n";
        fs::permissions(wrapper_, fs::perms::owner_all);
        setenv("PTXLM_PTXAS", wrapper_.c_str(), 1);
        setenv("PTXLM_EMU_JIT_CACHE", (dir_ / "cache").c_str(), 1);
        unsetenv("PTXLM_EMU_PTXAS");
    }
    void TearDown() override {
        unsetenv("PTXLM_PTXAS");
        unsetenv("PTXLM_EMU_JIT_CACHE");
        unsetenv("PTXLM_EMU_PTXAS");
        fs::remove_all(dir_);
    }
    int runs() const {
        std::ifstream in(counter_);
        int n = 0;
        for (std::string line; std::getline(in, line);) ++n;
        return n;
    }
    static Context& ctx() {
        static Context c(Driver::load());   // PTXLM_LIBCUDA: emu (set by ctest)
        return c;
    }
    fs::path dir_, counter_, wrapper_;
};

// "Used N registers" for `kernel` from the real ptxas.
int ptxas_registers(const fs::path& dir) {
    const fs::path src = dir / "k.ptx", log = dir / "k.log";
    std::ofstream(src) << kKernel;
    const std::string cmd = std::string("'") + PTXLM_PTXAS + "' -arch=sm_90 -v -o /dev/null '" + src.string() +
                            "' > '" + log.string() + "' 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    std::smatch m;
    EXPECT_TRUE(std::regex_search(text, m, std::regex("Used ([0-9]+) registers"))) << text;
    return m.empty() ? -1 : std::stoi(m[1]);
}

TEST_F(EmuJit, RegisterCountIsPtxasAndTheVerdictIsCached) {
    {
        Module m(ctx(), kKernel);
        EXPECT_EQ(m.function("twice").num_regs(), ptxas_registers(dir_));
        EXPECT_THAT(m.info_log(), HasSubstr("Used"));
    }
    EXPECT_EQ(runs(), 1);
    Module again(ctx(), kKernel);
    EXPECT_EQ(runs(), 1) << "the second load of the same PTX ran ptxas again";
    EXPECT_EQ(again.function("twice").num_regs(), ptxas_registers(dir_));
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "cache"), fs::directory_iterator{}), 1);
}

TEST_F(EmuJit, CorruptCacheEntryIsRecomputed) {
    { Module m(ctx(), kKernel); }
    ASSERT_EQ(runs(), 1);
    for (const auto& e : fs::directory_iterator(dir_ / "cache")) std::ofstream(e.path()) << "garbage";
    Module m(ctx(), kKernel);
    EXPECT_EQ(runs(), 2);
    EXPECT_EQ(m.function("twice").num_regs(), ptxas_registers(dir_));
}

TEST_F(EmuJit, PtxasRejectionIsTheJitError) {
    // A script standing in for ptxas that rejects everything: its words must
    // reach the caller as the JIT error log, whatever emu's parser thinks.
    std::ofstream(wrapper_) << "#!/bin/sh\necho 'ptxas fatal   : rejected by the test stand-in'\nexit 1\n";
    try {
        Module m(ctx(), kKernel);
        FAIL() << "a module ptxas rejects was loaded";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_PTX);
        EXPECT_THAT(e.what(), HasSubstr("rejected by the test stand-in"));
    }
}

TEST_F(EmuJit, RealPtxasDiagnosticsNameTheLine) {
    std::string bad = kKernel;
    bad.replace(bad.find("add.rn.f32"), 10, "add.rn.q32");   // no such type
    try {
        Module m(ctx(), bad);
        FAIL() << "bad PTX loaded";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_PTX);
        EXPECT_THAT(e.what(), HasSubstr("application ptx input, line 15"));
    }
}

TEST_F(EmuJit, OptOutSkipsPtxas) {
    setenv("PTXLM_EMU_PTXAS", "0", 1);
    Module m(ctx(), kKernel);
    EXPECT_EQ(runs(), 0);
    EXPECT_GT(m.function("twice").num_regs(), 0);   // emu's own estimate
}

}  // namespace
