// grammar_check: match texts against a GBNF grammar, for checks driven from
// Python (the JSON Schema converter's tests).
//
//   grammar_check [--root NAME] GRAMMAR_FILE < lines
//
// Each stdin line is a JSON object {"text": "..."}; each output line is
// {"accept": bool, "complete": bool}: accept = the matcher takes every byte
// of the text, complete = and the text is a whole match of the root rule.
// A grammar error prints {"error": "..."} and exits 2; bad usage exits 1.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/grammar.h"

int main(int argc, char** argv) {
    using namespace ptxlm::grammar;
    std::string root = "root", path;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--root" && i + 1 < argc) root = argv[++i];
        else if (path.empty() && a.rfind("--", 0) != 0) path = a;
        else {
            std::fprintf(stderr, "usage: grammar_check [--root NAME] GRAMMAR_FILE < jsonl\n");
            return 1;
        }
    }
    if (path.empty()) {
        std::fprintf(stderr, "usage: grammar_check [--root NAME] GRAMMAR_FILE < jsonl\n");
        return 1;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "grammar_check: cannot read %s\n", path.c_str());
        return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    std::shared_ptr<const Grammar> g;
    try {
        g = Grammar::parse(ss.str(), root);
    } catch (const GrammarError& e) {
        std::cout << nlohmann::json{{"error", e.what()}}.dump() << std::endl;
        return 2;
    }
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.empty()) continue;
        nlohmann::json out;
        try {
            const std::string text = nlohmann::json::parse(line).at("text").get<std::string>();
            Matcher m(g);
            const bool accept = m.accept(text);
            out = {{"accept", accept}, {"complete", accept && m.can_end()}};
        } catch (const nlohmann::json::exception& e) {
            out = {{"error", std::string("bad input line: ") + e.what()}};
        }
        std::cout << out.dump() << std::endl;
    }
    return 0;
}
