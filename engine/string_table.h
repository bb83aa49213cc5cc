// Many short strings in one buffer, by index, with an optional hash index
// for lookup by text. A vocabulary of 262,144 tokens (gemma-3) held as
// std::string objects plus an unordered_map from text to id costs about
// 30 MiB of heap; as a StringTable, about 5 MiB.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ptxlm {

class StringTable {
public:
    void reserve(size_t n, size_t bytes) {
        offsets_.reserve(n + 1);
        blob_.reserve(bytes);
    }
    void push_back(std::string_view s) {
        if (blob_.size() + s.size() > UINT32_MAX) throw std::length_error("StringTable: more than 4 GiB of text");
        blob_.append(s);
        offsets_.push_back(static_cast<uint32_t>(blob_.size()));
    }
    size_t size() const { return offsets_.size() - 1; }
    bool empty() const { return size() == 0; }
    std::string_view operator[](size_t i) const {
        return std::string_view(blob_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
    }
    std::string_view at(size_t i) const {
        if (i >= size()) throw std::out_of_range("StringTable: index " + std::to_string(i) + " of " + std::to_string(size()));
        return (*this)[i];
    }

    // Builds the index find() uses; call after the last push_back. Of equal
    // strings the first is found.
    void build_index() {
        size_t cap = 16;
        while (cap < 2 * size()) cap *= 2;
        slots_.assign(cap, 0);
        for (size_t i = 0; i < size(); ++i) {
            const std::string_view s = (*this)[i];
            for (size_t h = hash(s) & (cap - 1);; h = (h + 1) & (cap - 1)) {
                if (slots_[h] == 0) {
                    slots_[h] = static_cast<uint32_t>(i + 1);
                    break;
                }
                if ((*this)[slots_[h] - 1] == s) break;   // a duplicate: the first stays
            }
        }
    }
    std::optional<uint32_t> find(std::string_view s) const {
        if (slots_.empty()) return std::nullopt;
        const size_t mask = slots_.size() - 1;
        for (size_t h = hash(s) & mask; slots_[h] != 0; h = (h + 1) & mask)
            if ((*this)[slots_[h] - 1] == s) return slots_[h] - 1;
        return std::nullopt;
    }

private:
    static size_t hash(std::string_view s) {   // FNV-1a, 64-bit
        uint64_t h = 14695981039346656037ull;
        for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
        return static_cast<size_t>(h ^ (h >> 29));
    }

    std::string blob_;
    std::vector<uint32_t> offsets_{0};
    std::vector<uint32_t> slots_;   // id + 1; 0 is empty
};

}  // namespace ptxlm
