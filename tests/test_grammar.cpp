// GBNF grammars (engine/grammar.h): accept/reject tables per construct,
// UTF-8 split across calls, every error message, hostile inputs, and the
// token filter against a brute force (copy the matcher, accept the token).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/grammar.h"

using namespace ptxlm::grammar;

namespace {

// Whole-text verdicts.
enum Verdict { No, Prefix, Full };

Verdict match(const std::shared_ptr<const Grammar>& g, std::string_view text) {
    Matcher m(g);
    if (!m.accept(text)) return No;
    return m.can_end() ? Full : Prefix;
}

struct Case {
    std::string text;
    Verdict want;
};

void check_table(std::string_view gbnf, const std::vector<Case>& cases) {
    auto g = Grammar::parse(gbnf);
    for (const Case& c : cases) {
        EXPECT_EQ(match(g, c.text), c.want) << "grammar: " << gbnf << "\ntext: '" << c.text << "'";
        // The same verdict byte by byte.
        Matcher m(g);
        bool ok = true;
        for (char ch : c.text) ok = ok && m.accept(std::string_view(&ch, 1));
        EXPECT_EQ(ok ? (m.can_end() ? Full : Prefix) : No, c.want) << "bytewise, text: '" << c.text << "'";
    }
}

std::string error_of(std::string_view gbnf, std::string_view root = "root") {
    try {
        Grammar::parse(gbnf, root);
    } catch (const GrammarError& e) {
        return e.what();
    }
    return "(parsed)";
}

}  // namespace

TEST(Grammar, Literals) {
    check_table(R"(root ::= "ab" "c")", {{"abc", Full}, {"ab", Prefix}, {"", Prefix}, {"abd", No}, {"abcd", No}});
    check_table(R"(root ::= "a\n\t\r\\\"\[\]")", {{"a\n\t\r\\\"[]", Full}, {"a\\n", No}});
    check_table(R"(root ::= "\x41\u00e9\U0001F600")", {{"A\xC3\xA9\xF0\x9F\x98\x80", Full}, {"A\xC3\xA8", No}});
    check_table("root ::= \"h\xC3\xA9\"", {{"h\xC3\xA9", Full}, {"he", No}});
}

TEST(Grammar, Alternatives) {
    check_table(R"(root ::= "cat" | "car" | "dog")",
                {{"cat", Full}, {"car", Full}, {"dog", Full}, {"ca", Prefix}, {"cab", No}, {"do", Prefix}});
    // The empty alternative.
    check_table(R"(root ::= "a" | )", {{"", Full}, {"a", Full}, {"b", No}});
    check_table("root ::= \"a\"\n   | \"b\"  # continuation line\n", {{"a", Full}, {"b", Full}, {"c", No}});
}

TEST(Grammar, ClassesAndDot) {
    check_table("root ::= [a-c0-9_]", {{"a", Full}, {"c", Full}, {"5", Full}, {"_", Full}, {"d", No}, {"A", No}});
    check_table(R"(root ::= [^"\\] )", {{"x", Full}, {"\"", No}, {"\\", No}, {"\xC3\xA9", Full}});
    check_table(R"(root ::= [\]\[\-x] )", {{"]", Full}, {"[", Full}, {"-", Full}, {"x", Full}, {"y", No}});
    check_table("root ::= [a-]", {{"a", Full}, {"-", Full}, {"b", No}});
    check_table(R"(root ::= [\x00-\x1F] )", {{std::string(1, '\0'), Full}, {"\x1F", Full}, {" ", No}});
    check_table("root ::= . .", {{"ab", Full}, {"\xF0\x9F\x98\x80z", Full}, {"a", Prefix}, {"abc", No}});
    check_table("root ::= [\xCE\xB1-\xCF\x89]", {{"\xCE\xB2", Full}, {"a", No}, {"\xCE\x91", No}});  // α-ω, not Α
    check_table("root ::= [^a-z]", {{"A", Full}, {"q", No}, {"\xE2\x82\xAC", Full}});
}

TEST(Grammar, Repetition) {
    check_table(R"(root ::= "a"* "b")", {{"b", Full}, {"aaab", Full}, {"aaa", Prefix}, {"ba", No}});
    check_table(R"(root ::= "a"+ )", {{"", Prefix}, {"a", Full}, {"aaaa", Full}, {"ab", No}});
    check_table(R"(root ::= "a"? "b")", {{"b", Full}, {"ab", Full}, {"aab", No}});
    check_table(R"(root ::= "ab"{3})", {{"ababab", Full}, {"abab", Prefix}, {"abababab", No}});
    check_table(R"(root ::= [0-9]{2,})", {{"1", Prefix}, {"12", Full}, {"123456", Full}, {"12a", No}});
    check_table(R"(root ::= [0-9]{2,4} "x")",
                {{"1x", No}, {"12x", Full}, {"1234x", Full}, {"12345", No}, {"123", Prefix}});
    check_table(R"(root ::= "a"{0,2})", {{"", Full}, {"aa", Full}, {"aaa", No}});
    check_table(R"(root ::= "a"{ 1 , 2 } "b"{0})", {{"a", Full}, {"aa", Full}, {"ab", No}});
    check_table(R"(root ::= ("x" | "yz")+ ".")", {{"xyzx.", Full}, {"yy", No}, {".", No}});
    check_table(R"(root ::= ("a"?)* "b")", {{"b", Full}, {"aab", Full}, {"c", No}});   // a nullable item repeated
}

TEST(Grammar, RulesCommentsAndGroups) {
    check_table(R"(
# a comment line
root  ::= greet ws name   # trailing comment
greet ::= "hi" | "hello"
ws    ::= [ \t]+
name  ::= (
    [A-Z]
    [a-z]*
)
)",
                {{"hi Bob", Full}, {"hello  \tX", Full}, {"hi", Prefix}, {"hibob", No}, {"hi bob", No}});
    // Recursion, not left recursion.
    check_table(R"g(root ::= "(" root ")" | "x")g", {{"x", Full}, {"((x))", Full}, {"((x)", Prefix}, {"(x))", No}});
}

TEST(Grammar, Ambiguous) {
    // Both alternatives share prefixes; all are tracked.
    check_table(R"(root ::= "a" "b"* | "a"+ "c" | ("ab")* "d")",
                {{"abbb", Full}, {"aaac", Full}, {"ababd", Full}, {"abd", Full}, {"ac", Full}, {"abc", No}});
    check_table(R"(root ::= x x x x x x x x
x ::= "a"? | "a"? | "")",
                {{"", Full}, {"aaaaaaaa", Full}, {"aaaaaaaaa", No}});
    auto g = Grammar::parse(R"(root ::= ([a-z] | [a-m] | "a")* )");
    Matcher m(g);
    ASSERT_TRUE(m.accept(std::string(500, 'a')));
    EXPECT_LE(m.n_stacks(), 8u);   // deduplicated, not 3^500
    EXPECT_TRUE(m.can_end());
}

TEST(Grammar, AcceptIsAllOrNothing) {
    auto g = Grammar::parse(R"(root ::= "abc" "d"*)");
    Matcher m(g);
    ASSERT_TRUE(m.accept("ab"));
    const std::vector<uint32_t> before(m.state().begin(), m.state().end());
    EXPECT_FALSE(m.accept("cx"));   // 'c' is fine, 'x' is not: nothing is taken
    EXPECT_EQ(std::vector<uint32_t>(m.state().begin(), m.state().end()), before);
    EXPECT_TRUE(m.accept("c"));
    EXPECT_TRUE(m.can_end());
    EXPECT_TRUE(m.can_continue());
    auto g2 = Grammar::parse(R"(root ::= "x")");
    Matcher m2(g2);
    EXPECT_TRUE(m2.can_continue());
    EXPECT_FALSE(m2.can_end());
    ASSERT_TRUE(m2.accept("x"));
    EXPECT_TRUE(m2.can_end());
    EXPECT_FALSE(m2.can_continue());
}

TEST(Grammar, Utf8SplitAcrossCalls) {
    auto g = Grammar::parse(R"(root ::= "caf" [\u00e0-\u00ff] "!" | "\U0001F600")");
    {
        Matcher m(g);
        ASSERT_TRUE(m.accept("caf\xC3"));   // é = C3 A9, first byte only
        EXPECT_FALSE(m.can_end());
        EXPECT_FALSE(m.accept("x"));        // not a continuation byte
        ASSERT_TRUE(m.accept("\xA9"));
        ASSERT_TRUE(m.accept("!"));
        EXPECT_TRUE(m.can_end());
    }
    {
        Matcher m(g);
        ASSERT_TRUE(m.accept("caf\xC3"));
        EXPECT_FALSE(m.accept("\x80\x80"));   // C3 80 = U+00C0: outside the class... and a stray byte after
        EXPECT_TRUE(m.accept("\xBF"));        // C3 BF = U+00FF
    }
    {
        Matcher m(g);
        EXPECT_FALSE(m.accept("caf\xC2"));    // C2 xx is U+0080..U+00BF: no code point in the class
    }
    {
        Matcher m(g);   // 😀 = F0 9F 98 80, split 1 + 3
        ASSERT_TRUE(m.accept("\xF0"));
        EXPECT_FALSE(m.can_end());
        ASSERT_TRUE(m.accept("\x9F\x98\x80"));
        EXPECT_TRUE(m.can_end());
    }
    {
        Matcher m(g);
        ASSERT_TRUE(m.accept("\xF0\x9F"));
        EXPECT_FALSE(m.accept("\x98\x81"));   // 😁: a different emoji
        EXPECT_TRUE(m.accept("\x98"));
    }
    // Invalid UTF-8 is rejected even by "any".
    auto any = Grammar::parse("root ::= .*");
    for (std::string bad : {"\x80", "\xC0\x80", "\xE0\x80\x80", "\xF4\x90\x80\x80", "\xF8", "\xFF", "\xC3\xC3",
                            "\xED\xA0\x80", "\xED\xAE\xAE", "\xED\xBF\xBF", "\xED\xA0"})   // surrogates too
        EXPECT_FALSE(Matcher(any).accept(bad)) << bad;
    // Around the surrogates: U+D7FF and U+E000 are characters, also under a negated class.
    auto not_quote = Grammar::parse(R"(root ::= [^"]+)");
    for (std::string ok : {"\xED\x9F\xBF", "\xEE\x80\x80", "\xED\x80\x80"}) {
        EXPECT_TRUE(Matcher(any).accept(ok)) << ok;
        EXPECT_TRUE(Matcher(not_quote).accept(ok)) << ok;
    }
    EXPECT_FALSE(Matcher(not_quote).accept("\xED\xAE\x8F"));
    Matcher split(not_quote);
    ASSERT_TRUE(split.accept("\xED"));      // U+D000..U+D7FF may still follow
    EXPECT_FALSE(split.accept("\xA0"));     // but not a surrogate
    Matcher m(any);
    EXPECT_TRUE(m.accept("\xE2\x82"));
    EXPECT_FALSE(m.can_end());   // a code point is pending
    EXPECT_TRUE(m.accept("\xAC"));
    EXPECT_TRUE(m.can_end());
}

TEST(Grammar, Errors) {
    struct E {
        const char* gbnf;
        const char* want;
    } cases[] = {
        {"root ::= value\n", "grammar: rule 'value' is used but never defined (line 1, column 10)"},
        {"start ::= \"a\"\n", "grammar: no rule named 'root' (the start rule)"},
        {"", "grammar: no rule named 'root' (the start rule)"},
        {"root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]\n",
         "grammar: left recursion through 'expr' (expr -> expr)"},
        {"root ::= a\na ::= b \"x\"\nb ::= \"\"? a\n", "grammar: left recursion through 'a' (a -> b -> a)"},
        {"root ::= (root \"x\")?\n", "grammar: left recursion through 'root'"},
        {"root \"a\"\n", "grammar: line 1, column 6: expected '::='"},
        {"root ::= \"a\"\n  ::= \"b\"\n", "grammar: line 2, column 3: expected a rule name"},
        {"root ::= \"abc\n", "grammar: line 1, column 10: unterminated string literal"},
        {"root ::= [abc\n", "grammar: line 1, column 10: unterminated character class"},
        {"root ::= \"\\q\"", "grammar: line 1, column 11: unknown escape '\\q'"},
        {"root ::= \"\\x4\"", "grammar: line 1, column 11: expected 2 hex digits after '\\x'"},
        {"root ::= \"\\U00110000\"", "grammar: line 1, column 11: escape beyond U+10FFFF"},
        {"root ::= [z-a]", "grammar: line 1, column 11: bad range in character class: 'z-a'"},
        {"root ::= \"a\"{3,2}", "grammar: line 1, column 13: bad repetition bounds {3,2}: the minimum is above the maximum"},
        {"root ::= \"a\"{1,10001}", "grammar: line 1, column 13: repetition bound 10001 is over the limit of 10000"},
        {"root ::= \"a\"{99999999999}", "grammar: line 1, column 13: repetition bound over the limit of 10000"},
        {"root ::= \"a\"{x}", "grammar: line 1, column 14: expected a number in the repetition bounds"},
        {"root ::= \"a\"{1", "grammar: line 1, column 15: expected ',' or '}' in the repetition bounds"},
        {"root ::= * \"a\"", "grammar: line 1, column 10: '*' with nothing before it to repeat"},
        {"root ::= (\"a\"", "grammar: line 1, column 10: expected ')' to close this '('"},
        {"root ::= \"a\")", "grammar: line 1, column 13: unbalanced ')'"},
        {"root ::= \"a\" ; ", "grammar: line 1, column 14: unexpected ';'"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "grammar: line 2, column 1: rule 'root' is defined twice"},
        {"root ::= \"a\" x ::= \"b\"\n", "grammar: line 1, column 14: expected a newline before rule 'x'"},
        {"root ::= \"\xC3\"", "grammar: line 1, column 11: invalid UTF-8 in the grammar"},
        {"root ::= \"a\\", "grammar: line 1, column 12: a '\\' at the end of the grammar"},
    };
    for (const E& c : cases) {
        const std::string got = error_of(c.gbnf);
        EXPECT_EQ(got.substr(0, std::string(c.want).size()), c.want) << "grammar: " << c.gbnf;
    }
    EXPECT_EQ(error_of("main ::= \"a\"", "start"), "grammar: no rule named 'start' (the start rule)");
    EXPECT_EQ(error_of("main ::= \"a\"", "main"), "(parsed)");   // negative control
    // A cycle through generated rules only names the rule they came from.
    EXPECT_EQ(error_of("root ::= (\"\" | \"a\")+ | x\nx ::= (x \"b\")*\n").substr(0, 43),
              "grammar: left recursion through 'x' (x -> (");
    // The GrammarError type is an invalid_argument.
    EXPECT_THROW(Grammar::parse("root ::= ["), std::invalid_argument);
}

TEST(Grammar, HostileInputsStopQuickly) {
    // Each must fail with GrammarError (bounded work) or parse; never crash or hang.
    std::string big = "root ::=";
    for (int i = 0; i < 6; ++i) big += " (\"a\"{10000}){10000}";
    EXPECT_NE(error_of(big).find("over the limit of 100000 elements"), std::string::npos) << error_of(big);
    std::string deep = "root ::= ";
    deep.append(5000, '(').append("\"a\"").append(5000, ')');
    EXPECT_NE(error_of(deep).find("nested over 1000"), std::string::npos);
    std::string many = "root ::= ";
    for (int i = 0; i < 200000; ++i) many += "\"a\" ";
    EXPECT_NE(error_of(many).find("elements"), std::string::npos);
    // A long chain of rules (deep but legal) parses and matches.
    std::string chain = "root ::= r0\n";
    for (int i = 0; i < 20000; ++i) {   // appended piece by piece: GCC 12 warns falsely on "r" + to_string(i)
        chain += 'r';
        chain += std::to_string(i);
        chain += " ::= r";
        chain += std::to_string(i + 1);
        chain += '\n';
    }
    chain += "r20000 ::= \"z\"\n";
    auto g = Grammar::parse(chain);
    EXPECT_EQ(match(g, "z"), Full);
    // Exponentially ambiguous: 2^40 parses of the empty prefix, deduplicated.
    std::string amb = "root ::= ";
    for (int i = 0; i < 40; ++i) amb += "x ";
    amb += "\"!\"\nx ::= \"\" | \"\" | \"a\"?\n";
    auto ga = Grammar::parse(amb);
    EXPECT_EQ(match(ga, "aaa!"), Full);
    // Nesting beyond the depth cap is refused, not followed.
    auto gp = Grammar::parse(R"g(root ::= "(" root ")" | "x")g");
    Matcher m(gp);
    EXPECT_TRUE(m.accept(std::string(5000, '(')));
    EXPECT_FALSE(m.accept(std::string(kMaxDepth, '(')));
    // Garbage bytes as a grammar.
    std::mt19937 rng(7);
    for (int i = 0; i < 300; ++i) {
        std::string s(static_cast<size_t>(rng() % 64), ' ');
        const char alphabet[] = "root::=\"ab\\x[]^-(|)*+?{1,2}.#\n ";
        for (char& ch : s) ch = alphabet[rng() % (sizeof alphabet - 1)];
        try {
            auto gr = Grammar::parse("root ::= " + s);
            Matcher mm(gr);
            mm.accept("ab[x");
        } catch (const GrammarError&) {
        }
    }
}

// ---- The token filter against a brute force ----

namespace {

std::vector<std::string> small_vocab() {
    std::vector<std::string> v = {
        "",  // a control token: never allowed
        "{", "}", "{\"", "\"", "\":", "\",", ", ", ",", ":", " ", "  ", "\n", "[", "]", "[{", "}]", "}}",
        "name", "\"name\"", "age", "\"age\":", "true", "false", "null", "tr", "ue", "0", "1", "12", "123", "-",
        "-1", ".", "5", "e", "abc", "hello", " world", "\\", "\\n", "\\u", "00e9", "\xC3", "\xA9", "\xC3\xA9",
        "\xE2\x82", "\xAC", "\xE2\x82\xAC", "\xF0\x9F", "\x98\x80", "\xF0\x9F\x98\x80", "(", ")", "+", "*", "x",
        "1+", "(1", "2)", ")*", "</s>",  // the last: the end token (its bytes are ignored)
    };
    return v;
}

std::vector<uint64_t> brute(const Matcher& m, const std::vector<std::string>& vocab, int32_t end_id,
                            bool wrong = false) {
    std::vector<uint64_t> bits((vocab.size() + 63) / 64, 0);
    for (size_t i = 0; i < vocab.size(); ++i) {
        bool ok;
        if (static_cast<int32_t>(i) == end_id) ok = m.can_end();
        else if (vocab[i].empty()) ok = false;
        else {
            Matcher c = m;
            ok = c.accept(vocab[i]);
            // The deliberately wrong variant: a token must leave a complete code point.
            if (wrong && ok) ok = (static_cast<uint8_t>(vocab[i].back()) & 0xC0) != 0xC0 && static_cast<uint8_t>(vocab[i].back()) < 0x80;
        }
        if (ok) bits[i >> 6] |= uint64_t(1) << (i & 63);
    }
    return bits;
}

const char* kJsonish = R"(root ::= "{" ws "\"name\"" ws ":" ws str ws "," ws "\"age\"" ws ":" ws num ws "}"
str ::= "\"" ([^"\\] | "\\" (["\\nt] | "u" [0-9a-f]{4}))* "\""
num ::= "-"? [0-9]+ ("." [0-9]+)?
ws ::= [ \n]*
)";
const char* kArith = R"g(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor ("*" factor)*
factor ::= [0-9]+ | "(" expr ")"
)g";
const char* kUnicode = R"(root ::= ([a-z ] | [\u00e9] | "\u20ac" | "\U0001F600")* "!"?)";
// Bounded repetitions (Grammar::clamp's chains) of a class, a group with
// escapes and a rule, with lower bounds, nested.
const char* kBounded = R"(root ::= "{" (str ("," " "? str){0,3})? "}" [0-9]{2,9}
str ::= "\"" ([^"\\] | "\\" ["\\nt]){0,12} "\""
)";

}  // namespace

TEST(TokenFilter, MatchesBruteForce) {
    const auto vocab = small_vocab();
    const int32_t end_id = static_cast<int32_t>(vocab.size() - 1);
    std::mt19937 rng(1234);
    int states = 0, partial_states = 0, end_states = 0;
    // The split chosen from the vocabulary, and one that sends most tokens
    // to the long trie and clamps bounded repetitions at 4.
    for (uint32_t split : {0u, 3u})
    for (const char* src : {kJsonish, kArith, kUnicode, kBounded}) {
        TokenFilter f(vocab, {end_id}, split);
        if (split) {
            ASSERT_EQ(f.split(), split);
        }
        auto g = Grammar::parse(src);
        for (int gen = 0; gen < 30; ++gen) {
            Matcher m(g);
            for (int step = 0; step < 40; ++step) {
                std::vector<uint64_t> got, want = brute(m, vocab, end_id);
                f.allowed(m, got);
                ASSERT_EQ(got, want) << "grammar " << src << " gen " << gen << " step " << step;
                f.allowed(m, got);   // again: from the cache
                ASSERT_EQ(got, want);
                ++states;
                end_states += m.can_end();
                if ((m.state().size() > 1) && m.state()[1] != 0) ++partial_states;
                // Pick a random allowed non-end token.
                std::vector<size_t> ok;
                for (size_t i = 0; i + 1 < vocab.size(); ++i)
                    if ((want[i >> 6] >> (i & 63)) & 1) ok.push_back(i);
                if (ok.empty() || (m.can_end() && rng() % 4 == 0)) break;
                ASSERT_TRUE(m.accept(vocab[ok[rng() % ok.size()]]));
            }
        }
    }
    EXPECT_GT(states, 200);
    EXPECT_GT(partial_states, 3);   // states in the middle of a code point were checked
    EXPECT_GT(end_states, 10);
}

// A bounded-repetition state clamped to c accepts what the exact state
// accepts for every string of up to c - 1 bytes (what the token filter's
// short trie relies on), and the clamp has teeth: a longer string tells them apart.
TEST(Grammar, ClampKeepsShortStrings) {
    auto g = Grammar::parse(R"(root ::= "a" ([b-c] | "\\" "c"){0,20} "!")");
    auto accepts = [&](std::span<const uint32_t> from, const std::string& s) {
        std::vector<uint32_t> cur(from.begin(), from.end()), next;
        for (char ch : s) {
            if (!Matcher::step(*g, cur, static_cast<uint8_t>(ch), next)) return false;
            cur.swap(next);
        }
        return true;
    };
    Matcher m(g);
    ASSERT_TRUE(m.accept("ab\\"));   // inside the group: the escape's second half is pending
    for (uint32_t c : {2u, 4u}) {
        Matcher at = m;
        std::vector<uint32_t> clamped, again;
        ASSERT_TRUE(g->clamp(at.state(), c, clamped)) << c;
        EXPECT_NE(std::vector<uint32_t>(at.state().begin(), at.state().end()), clamped);
        EXPECT_FALSE(g->clamp(clamped, c, again));   // already canonical
        std::vector<std::string> strs = {""};
        bool differs = false;
        for (size_t len = 1; len <= c + 3; ++len) {
            std::vector<std::string> longer;
            for (const std::string& p : strs)
                for (char ch : {'b', 'c', '\\', '!'}) longer.push_back(p + ch);
            strs.swap(longer);
            for (const std::string& s : strs) {
                const bool exact = accepts(at.state(), s), cl = accepts(clamped, s);
                if (len <= c - 1) {
                    ASSERT_EQ(exact, cl) << "c " << c << " string " << s;
                }
                differs = differs || exact != cl;
            }
        }
        EXPECT_TRUE(differs) << c;
    }
    // Nothing to clamp: positions at k <= c, and grammars without bounds.
    std::vector<uint32_t> out;
    EXPECT_FALSE(g->clamp(m.state(), 40, out));
    EXPECT_FALSE(Grammar::parse(kArith)->clamp(Matcher(Grammar::parse(kArith)).state(), 2, out));
}

TEST(TokenFilter, NegativeControlAndApply) {
    const auto vocab = small_vocab();
    const int32_t end_id = static_cast<int32_t>(vocab.size() - 1);
    TokenFilter f(vocab, {end_id});
    auto g = Grammar::parse(kUnicode);
    Matcher m(g);
    std::vector<uint64_t> got;
    f.allowed(m, got);
    // A brute force that refuses tokens ending mid-code-point must differ.
    EXPECT_NE(got, brute(m, vocab, end_id, /*wrong=*/true));
    EXPECT_EQ(got, brute(m, vocab, end_id));
    auto bit = [&](size_t i) { return (got[i >> 6] >> (i & 63)) & 1; };
    EXPECT_TRUE(bit(43));    // "\xC3": the start of é
    EXPECT_FALSE(bit(44));   // "\xA9": a stray continuation byte
    EXPECT_FALSE(bit(0));    // the control token
    EXPECT_TRUE(bit(static_cast<size_t>(end_id)));   // root matches ""
    // apply(): -inf exactly where not allowed, including logits past the vocabulary.
    std::vector<float> logits(vocab.size() + 3, 1.0f);
    f.apply(m, logits);
    for (size_t i = 0; i < logits.size(); ++i)
        EXPECT_EQ(logits[i] == 1.0f, i < vocab.size() && bit(i)) << i;
    // Cache off: the same answer.
    f.set_cache_limit(0);
    std::vector<uint64_t> again;
    f.allowed(m, again);
    EXPECT_EQ(again, got);
    EXPECT_EQ(f.cache_stats().entries, 0u);
    EXPECT_THROW(TokenFilter(vocab, {static_cast<int32_t>(vocab.size())}), std::invalid_argument);
}

TEST(TokenFilter, SharedBetweenGrammars) {
    // Two grammars whose states serialise alike must not share cache entries.
    const auto vocab = small_vocab();
    TokenFilter f(vocab, {});
    auto a = Grammar::parse(R"(root ::= "x")");
    auto b = Grammar::parse(R"(root ::= "1")");
    std::vector<uint64_t> ba, bb;
    f.allowed(Matcher(a), ba);
    f.allowed(Matcher(b), bb);
    EXPECT_NE(ba, bb);
    EXPECT_EQ(bb, brute(Matcher(b), vocab, -1));
}
