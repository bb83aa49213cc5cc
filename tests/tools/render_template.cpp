// Test tool: renders a conversation with ptxlm's chat templates.
// stdin: {"template": TEXT or "name": NAME, "messages": [{"role", "content"}],
//         "add_generation_prompt": bool, "bos": str, "eos": str}
// stdout: {"family": NAME, "starts_with_bos": bool, "text": RENDERED} or
//         {"error": MESSAGE} (exit 2).
#include <cstdio>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "engine/chat_template.h"

int main() {
    using nlohmann::json;
    try {
        const json in = json::parse(std::string(std::istreambuf_iterator<char>(std::cin), {}));
        const ptxlm::ChatTemplate t = in.contains("name") ? ptxlm::ChatTemplate::by_name(in["name"].get<std::string>())
                                                          : ptxlm::ChatTemplate::from_text(in["template"].get<std::string>());
        std::vector<ptxlm::ChatMessage> msgs;
        for (const json& m : in["messages"]) msgs.push_back({m["role"], m["content"]});
        const std::string text = t.render(msgs, in.value("add_generation_prompt", true), in.value("bos", ""),
                                          in.value("eos", ""));
        std::printf("%s\n", json({{"family", t.name()}, {"starts_with_bos", t.starts_with_bos()}, {"text", text}}).dump().c_str());
        return 0;
    } catch (const std::exception& e) {
        std::printf("%s\n", json({{"error", e.what()}}).dump().c_str());
        return 2;
    }
}
