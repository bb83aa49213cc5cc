// libFuzzer entry for the server's request parser (server/request.h):
// arbitrary bytes as the body of both completion endpoints. ApiError (status
// 400) is the accepted answer; anything else escaping is a finding, and so
// is a parsed request the engine would refuse (sampling out of range, more
// than 4 stop strings, an empty conversation).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz/finding.h"
#include "server/request.h"

namespace {

using ptxlm::fuzz::finding;

}  // namespace

std::string ptxlm_fuzz_one(const uint8_t* data, size_t size) {
    using namespace ptxlm::server;
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    std::string out;
    for (Endpoint ep : {Endpoint::Chat, Endpoint::Completion}) {
        out += ep == Endpoint::Chat ? "chat " : "; completion ";
        try {
            const CompletionRequest r = parse_request(ep, body, RequestDefaults{});
            try {
                ptxlm::validate(r.gen.sampling);
            } catch (const std::invalid_argument& e) {
                finding(std::string("parsed, but the sampler refuses it: ") + e.what());
            }
            if (r.gen.stop.size() > 4) finding("more than 4 stop strings parsed");
            if (ep == Endpoint::Chat && r.messages.empty()) finding("an empty conversation parsed");
            if (r.logprobs > 20) finding("top_logprobs above 20 parsed");
            out += "ok";
        } catch (const ApiError& e) {
            if (e.status() != 400) finding("status " + std::to_string(e.status()) + " for a body");
            out += "400 " + (e.param().empty() ? std::string("-") : e.param());
        }
    }
    return out;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    (void)ptxlm_fuzz_one(data, size);
    return 0;
}
