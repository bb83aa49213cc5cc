// The request parsers' fuzz passes (test_server_request, test_server_anthropic):
// random JSON values from an endpoint's own words, and the loop that feeds a
// parser random bodies, mutations of a valid body and random bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace ptxlm::test {

// The words an endpoint's random values draw from: string values and object keys.
struct FuzzWords {
    std::span<const char* const> strings;
    std::span<const char* const> keys;
};

// Random values of every JSON type, nested a little.
inline nlohmann::json random_value(std::mt19937_64& rng, int depth, const FuzzWords& words) {
    auto pick = [&](size_t n) { return size_t(rng() % uint64_t(n)); };
    switch (pick(depth > 2 ? 7 : 9)) {
        case 0: return nullptr;
        case 1: return bool(pick(2));
        case 2: return int64_t(rng()) >> pick(64);
        case 3: return uint64_t(rng());
        case 4: {
            const double specials[] = {0.0, -0.0, 1.0, 2.0, 0.5, -1.0, 1e308, -1e308, 1e-300, 20.0, 5.0, 4096.0};
            return pick(2) ? specials[pick(12)] : double(rng() % 10000) / 1000.0 - 3.0;
        }
        case 5: return words.strings[pick(words.strings.size())];
        case 6: return std::string(pick(40), char('a' + pick(26)));
        case 7: {
            nlohmann::json a = nlohmann::json::array();
            for (size_t i = pick(5); i > 0; --i) a.push_back(random_value(rng, depth + 1, words));
            return a;
        }
        default: {
            nlohmann::json o = nlohmann::json::object();
            for (size_t i = pick(4); i > 0; --i)
                o[words.keys[pick(words.keys.size())]] = random_value(rng, depth + 1, words);
            return o;
        }
    }
}

// 4000 rounds of: a random body, a valid body with up to four byte flips,
// truncations or insertions, and up to 63 random bytes, each given to `run`.
inline void fuzz_bodies(std::mt19937_64& rng, const std::string& valid,
                        const std::function<nlohmann::json(std::mt19937_64&)>& random_body,
                        const std::function<void(const std::string&)>& run) {
    for (int i = 0; i < 4000; ++i) {
        run(random_body(rng).dump());
        std::string m = valid;
        for (int k = int(rng() % 4); k >= 0; --k) {
            const size_t at = rng() % m.size();
            switch (rng() % 3) {
                case 0: m[at] = char(rng()); break;
                case 1: m.resize(at); break;
                default: m.insert(at, 1, "{}[]\",:0e-\\"[rng() % 12]); break;
            }
            if (m.empty()) break;
        }
        run(m);
        std::string r(rng() % 64, '\0');
        for (char& c : r) c = char(rng());
        run(r);
    }
}

}  // namespace ptxlm::test
