// libFuzzer entry for the tool-call parsers (engine/tool_calls.h): the bytes as a model's reply, for
// every format and reasoning kind, parsed whole and streamed in chunks whose sizes come from the input.
// A stream that differs from parse(), a call whose arguments are not a JSON object, or a call without a
// name is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/tool_calls.h"
#include "fuzz/finding.h"

namespace {

using ptxlm::fuzz::finding;

}  // namespace

std::string ptxlm_fuzz_one(const uint8_t* data, size_t size) {
    using namespace ptxlm::tools;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const uint32_t seed = size > 0 ? data[0] : 0;
    std::string out;
    for (Format tf : {Format::None, Format::Generic, Format::Hermes, Format::Llama3, Format::MistralJson,
                      Format::MistralArgs}) {
        for (int r = 0; r < 4; ++r) {
            const Formats f{tf, r == 0 ? Reasoning::None : r == 3 ? Reasoning::MistralThink : Reasoning::ThinkTags,
                            r == 2};
            const Parsed whole = parse(f, text, id_source(tf, 7));
            for (const ToolCall& c : whole.calls) {
                if (c.name.empty() || c.id.empty()) finding("a call without a name or an id");
                if (!nlohmann::json::accept(c.arguments) || !nlohmann::json::parse(c.arguments).is_object())
                    finding("arguments that are not a JSON object: " + c.arguments);
            }
            StreamParser sp(f, id_source(tf, 7));
            Parsed streamed;
            uint32_t x = seed * 2654435761u + uint32_t(r) + 1;
            for (size_t p = 0; p < text.size();) {
                x = x * 1664525u + 1013904223u;
                const size_t n = std::min<size_t>(text.size() - p, 1 + (x >> 28));   // 1..16 bytes
                accumulate(streamed, sp.feed(text.substr(p, n)));
                p += n;
            }
            accumulate(streamed, sp.finish());
            if (!(streamed == whole))
                finding("stream differs from parse for " + format_name(tf) + "/" + reasoning_name(f.reasoning));
            if (r == 0)
                out += format_name(tf) + ":" + std::to_string(whole.calls.size()) + "/" +
                       std::to_string(whole.content.size()) + " ";
        }
    }
    return out;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    (void)ptxlm_fuzz_one(data, size);
    return 0;
}
