// The synthetic models' tokenizer: a byte-level BPE vocabulary (GPT-2 style)
// whose merges are learned, greedily and deterministically, from a few
// paragraphs of built-in English text, plus ChatML special tokens.
#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

#include "models/synth/synth.h"

namespace ptxlm::synth {

namespace {

// Written for this project. Plain ASCII; common English words repeat often
// enough that frequent-pair merges produce whole words (" the", " and").
constexpr std::string_view kText =
    "The old lighthouse stood at the end of the harbor wall, and every evening the keeper "
    "climbed the one hundred and twelve steps to light the lamp. He had done this for thirty "
    "years, in summer and in winter, in fair weather and in storms that shook the glass. "
    "The ships that passed in the night never saw him, but they saw the light, and that was "
    "enough for him. When the fog came in from the sea, he wound the horn and listened to "
    "its low voice roll across the water.\n\n"
    "In the morning he would walk down to the village to buy bread, milk and a newspaper. "
    "The baker knew him by name and always kept the best loaf for him. They talked about the "
    "weather, about the fishing boats and about the children who played on the beach. "
    "Sometimes the children followed him back along the wall and asked him questions about "
    "the lamp, the lens and the long nights. He told them that the light could be seen from "
    "twenty miles away, and that the lens was made of many pieces of glass that bent the "
    "light into a single bright beam.\n\n"
    "A computer is a machine that follows instructions. The instructions are written as a "
    "program, and the program is stored in memory as numbers. When the computer runs the "
    "program, it reads each instruction, does what it says, and moves on to the next one. "
    "Modern processors can do billions of these steps every second. A graphics processor "
    "works differently: it runs the same small program on thousands of values at once, "
    "which makes it very good at the large matrix products that language models need.\n\n"
    "A language model reads a sequence of tokens and predicts the next one. Each token is a "
    "piece of text, such as a word, a part of a word, or a single character. The model turns "
    "every token into a vector of numbers, mixes the vectors together with attention, and "
    "passes them through many layers. At the end it produces a score for every token in the "
    "vocabulary, and the highest score is the most likely next token. Generating text means "
    "choosing a token, adding it to the sequence, and running the model again.\n\n"
    "To make bread, mix four cups of flour with a spoon of salt and a little yeast. Add warm "
    "water slowly until the dough comes together, then knead it for ten minutes until it is "
    "smooth. Let it rest in a warm place for an hour, shape it into a loaf, and bake it in a "
    "hot oven for forty minutes. The bread is ready when the crust is brown and the bottom "
    "sounds hollow when you tap it. Let it cool before you cut it, or the inside will be "
    "heavy and wet.\n\n"
    "The river starts as a small stream high in the mountains, where the snow melts in the "
    "spring. It runs over rocks and under bridges, through forests and fields, past farms "
    "and towns. Along the way other streams join it, and by the time it reaches the coast it "
    "is wide and slow and deep. People have built their cities beside rivers for thousands of "
    "years, because the water brings life, trade and travel. In 1850 the town by the mouth "
    "of this river had 2400 people; today it has more than 90000.\n\n"
    "Questions are useful. What is the time? Where are we going? Why does the sky look blue "
    "during the day and red in the evening? How many stars can you count on a clear night? "
    "It's often better to ask a simple question than to guess, and we've all learned that "
    "the answer we didn't expect is the one that teaches us the most.\n";

// Pre-tokenization used only to learn merges: an ASCII rendering of GPT-2's
// pattern ('s|'t|'re|'ve|'m|'ll|'d| ?L+| ?N+| ?[^\sLN]+|\s+(?!\S)). A space
// directly before a word joins that word; other whitespace stays on its own.
std::vector<std::string> split_words(std::string_view t) {
    auto is_alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
    auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
    auto is_space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
    auto cls = [&](char c) { return is_alpha(c) ? 0 : is_digit(c) ? 1 : is_space(c) ? 2 : 3; };
    auto contraction = [&](size_t i) -> size_t {   // length of a contraction at i, or 0
        for (std::string_view c : {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"})
            if (t.substr(i, c.size()) == c) return c.size();
        return 0;
    };
    std::vector<std::string> out;
    size_t i = 0;
    while (i < t.size()) {
        size_t start = i;
        if (size_t n = contraction(i)) {
            i += n;
        } else {
            if (t[i] == ' ' && i + 1 < t.size() && !is_space(t[i + 1])) ++i;   // " ?"
            int k = cls(t[i]);
            if (k == 2) {   // a whitespace run, less a final space that joins the next word
                size_t j = i;
                while (j < t.size() && is_space(t[j])) ++j;
                if (j < t.size() && j - i > 1 && t[j - 1] == ' ') --j;
                i = j;
            } else {
                do ++i; while (i < t.size() && cls(t[i]) == k && !contraction(i));
            }
        }
        out.emplace_back(t.substr(start, i - start));
    }
    return out;
}

std::string utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += char(cp);
    } else if (cp < 0x800) {
        s += char(0xC0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3F));
    } else {
        s += char(0xE0 | (cp >> 12));
        s += char(0x80 | ((cp >> 6) & 0x3F));
        s += char(0x80 | (cp & 0x3F));
    }
    return s;
}

constexpr size_t kMaxMerges = 508;   // at most 256 + 508 + 4 = 768 tokens
constexpr int kMinPairCount = 1;     // keep merging while any pair is left

Vocab build_vocab() {
    Vocab v;
    std::vector<std::string> sym_of_byte(256);
    for (int b = 0; b < 256; ++b) {
        sym_of_byte[b] = byte_to_unicode(uint8_t(b));
        v.tokens.push_back(sym_of_byte[b]);
        v.token_type.push_back(1);
    }

    // Distinct words with their counts; std::map keeps the order deterministic.
    std::map<std::string, int> counts;
    for (const std::string& w : split_words(kText)) ++counts[w];
    std::vector<std::pair<std::vector<std::string>, int>> words;
    for (const auto& [w, n] : counts) {
        std::vector<std::string> syms;
        for (unsigned char c : w) syms.push_back(sym_of_byte[c]);
        words.emplace_back(std::move(syms), n);
    }

    std::map<std::string, bool> have;
    for (const auto& t : v.tokens) have[t] = true;
    while (v.merges.size() < kMaxMerges) {
        // Most frequent adjacent pair; ties go to the smallest pair (map order).
        std::map<std::pair<std::string, std::string>, int> pairs;
        for (const auto& [syms, n] : words)
            for (size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += n;
        const std::pair<std::string, std::string>* best = nullptr;
        int best_n = 0;
        for (const auto& [p, n] : pairs) {
            if (n > best_n) { best = &p; best_n = n; }
        }
        if (!best || best_n < kMinPairCount) break;
        const auto [a, b] = *best;   // copy: `pairs` is not touched below, but be explicit
        std::string merged = a + b;
        v.merges.push_back(a + " " + b);
        if (!have[merged]) {
            have[merged] = true;
            v.tokens.push_back(merged);
            v.token_type.push_back(1);
        }
        for (auto& [syms, n] : words) {
            std::vector<std::string> out;
            out.reserve(syms.size());
            for (size_t i = 0; i < syms.size(); ++i) {
                if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
                    out.push_back(merged);
                    ++i;
                } else {
                    out.push_back(syms[i]);
                }
            }
            syms = std::move(out);
        }
    }

    auto special = [&](const char* text) {
        v.tokens.emplace_back(text);
        v.token_type.push_back(3);   // control
        return uint32_t(v.tokens.size() - 1);
    };
    v.bos_id = special("<|bos|>");
    v.eos_id = special("<|eos|>");
    v.im_start_id = special("<|im_start|>");
    v.im_end_id = special("<|im_end|>");
    return v;
}

}  // namespace

std::string byte_to_unicode(uint8_t b) {
    // Printable Latin-1 bytes stand for themselves; the rest, in ascending
    // order, take U+0100, U+0101, ... (so ' ' = U+0120 'Ġ', '\n' = U+010A 'Ċ').
    auto printable = [](int c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
    if (printable(b)) return utf8(b);
    uint32_t n = 0;
    for (int c = 0; c < b; ++c) n += printable(c) ? 0 : 1;
    return utf8(0x100 + n);
}

std::string_view training_text() { return kText; }

const Vocab& vocab() {
    static const Vocab v = build_vocab();
    return v;
}

const std::string& chat_template() {
    // ChatML. No BOS here: tokenizer.ggml.add_bos_token adds it, and a second
    // one from the template would double it.
    static const std::string t =
        "{% for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    return t;
}

}  // namespace ptxlm::synth
