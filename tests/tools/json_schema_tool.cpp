// Test tool: a JSON Schema (a file, or stdin with "-" or no argument) to its
// GBNF grammar (engine/json_schema.h).
//   json_schema_tool [SCHEMA.json | -]   prints the grammar (exit 0), or
//                                        {"error": MSG} (exit 2)
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/json_schema.h"

int main(int argc, char** argv) {
    std::string text;
    if (argc > 1 && std::string(argv[1]) != "-") {
        std::ifstream f(argv[1], std::ios::binary);
        if (!f) {
            std::fprintf(stderr, "cannot read %s\n", argv[1]);
            return 1;
        }
        text.assign(std::istreambuf_iterator<char>(f), {});
    } else {
        text.assign(std::istreambuf_iterator<char>(std::cin), {});
    }
    try {
        std::cout << ptxlm::json_schema_to_gbnf(nlohmann::ordered_json::parse(text));
        return 0;
    } catch (const std::exception& e) {  // SchemaError, or the schema is not JSON
        std::cout << nlohmann::ordered_json{{"error", e.what()}}.dump() << "\n";
        return 2;
    }
}
