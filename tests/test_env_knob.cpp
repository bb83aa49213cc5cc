// The CPU backend's diagnostic knobs (engine/cpu/env_knob.h): unset or
// empty gives the default, a well-formed value is taken, and a malformed one
// ends the process with exit code 2 and one message naming the variable
// (death tests, each in a child).
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/cpu/env_knob.h"

using namespace ptxlm::cpu;

namespace {

constexpr const char* kName = "PTXLM_TEST_KNOB";

TEST(EnvKnob, DefaultsWhenUnsetOrEmpty) {
    unsetenv(kName);
    EXPECT_EQ(env_count(kName, 4096, 1 << 20), 4096u);
    EXPECT_TRUE(env_switch(kName, true));
    EXPECT_FALSE(env_switch(kName, false));
    setenv(kName, "", 1);
    EXPECT_EQ(env_count(kName, 7, 100), 7u);
    EXPECT_TRUE(env_switch(kName, true));
}

TEST(EnvKnob, TakesWellFormedValues) {
    setenv(kName, "0", 1);
    EXPECT_EQ(env_count(kName, 4096, 1 << 20), 0u);
    EXPECT_FALSE(env_switch(kName, true));
    setenv(kName, "1", 1);
    EXPECT_TRUE(env_switch(kName, false));
    setenv(kName, "8192", 1);
    EXPECT_EQ(env_count(kName, 4096, 1 << 20), 8192u);
    setenv(kName, "1048576", 1);   // the maximum itself
    EXPECT_EQ(env_count(kName, 4096, 1 << 20), 1048576u);
    unsetenv(kName);
}

TEST(EnvKnobDeathTest, RefusesMalformedCounts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    for (const char* bad : {"abc", "12x", "-1", " 4096", "4096 ", "1048577", "99999999999999999999999"}) {
        setenv(kName, bad, 1);
        EXPECT_EXIT(env_count(kName, 4096, 1 << 20), ::testing::ExitedWithCode(2),
                    std::string("PTXLM_TEST_KNOB=") + bad + ": expected a whole number from 0 to 1048576")
            << bad;
    }
    unsetenv(kName);
}

TEST(EnvKnobDeathTest, RefusesMalformedSwitches) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    for (const char* bad : {"2", "yes", "true", "00", "1 "}) {
        setenv(kName, bad, 1);
        EXPECT_EXIT(env_switch(kName, true), ::testing::ExitedWithCode(2),
                    std::string("PTXLM_TEST_KNOB=") + bad + ": expected 0 or 1")
            << bad;
    }
    unsetenv(kName);
}

}  // namespace
