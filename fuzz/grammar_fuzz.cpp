// libFuzzer entry for the GBNF parser and recognizer (engine/grammar.h): the
// input is a grammar; when it parses, a few strings are matched against it
// byte by byte and as a whole, and each step's invariants are checked.
// GrammarError is the accepted answer for bad text; anything else escaping
// is a finding, and so is a matcher that breaks all-or-nothing accept().
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/grammar.h"
#include "fuzz/finding.h"

namespace {

using ptxlm::fuzz::finding;

}  // namespace

std::string ptxlm_fuzz_one(const uint8_t* data, size_t size) {
    using namespace ptxlm::grammar;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    std::shared_ptr<const Grammar> g;
    try {
        g = Grammar::parse(text);
    } catch (const GrammarError& e) {
        return std::string("error: ") + e.what();
    }
    // Probes: the grammar's own bytes (its literals are in there), JSON-ish
    // text, and multi-byte UTF-8.
    const std::string probes[] = {std::string(text.substr(0, 64)), "{\"a\": [1, 2.5, \"x\"]}", "abc123 ",
                                  "\xC3\xA9\xF0\x9F\x98\x80", ""};
    std::string out = "ok:";
    for (const std::string& p : probes) {
        Matcher whole(g), bytewise(g);
        const bool all = whole.accept(p);
        size_t taken = 0;
        for (char c : p) {
            const auto before = std::vector<uint32_t>(bytewise.state().begin(), bytewise.state().end());
            if (!bytewise.accept(std::string_view(&c, 1))) {
                if (!std::equal(before.begin(), before.end(), bytewise.state().begin(), bytewise.state().end()))
                    finding("a rejected byte changed the state");
                break;
            }
            ++taken;
        }
        if (all != (taken == p.size())) finding("accepting at once and byte by byte disagree");
        if (all && whole.can_end() != bytewise.can_end()) finding("can_end differs between the two ways");
        if (whole.can_end() && whole.n_stacks() == 0) finding("can_end with no stacks");
        out += all ? (whole.can_end() ? " complete" : " prefix") : " no";
    }
    return out;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    (void)ptxlm_fuzz_one(data, size);
    return 0;
}
