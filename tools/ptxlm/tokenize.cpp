// `ptxlm tokenize -m MODEL -p TEXT`: the token ids of a text (and their
// pieces), from the file's tokenizer alone (vocab-only files work).
#include <cstdio>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/tokenizer.h"
#include "tools/ptxlm/commands.h"
#include "tools/ptxlm/engine_args.h"

namespace ptxlm::cli {

namespace {

struct Args {
    std::string model, prompt, file;
    bool no_bos = false, special = false, json = false;
};

int run(const Args& a) {
    std::string text = a.prompt;
    if (!a.file.empty()) {
        std::ifstream in(a.file, std::ios::binary);
        if (!in) throw std::invalid_argument("-f " + a.file + ": cannot open the file");
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }
    const gguf::File f = gguf::File::open(a.model.empty() ? default_model_path() : a.model);
    const Tokenizer tok = Tokenizer::from_gguf(f);
    const std::vector<TokenId> ids = tok.encode(text, tok.add_bos() && !a.no_bos, a.special);
    if (a.json) {
        nlohmann::json pieces = nlohmann::json::array();
        for (TokenId id : ids) pieces.push_back(tok.piece(id, true));
        nlohmann::json j = {{"ids", ids}, {"pieces", pieces}};
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return 0;
    }
    for (TokenId id : ids) {
        std::string p = tok.piece(id, true);
        std::string shown;
        for (unsigned char c : p) {
            if (c == '\n') shown += "\\n";
            else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\x%02x", c); shown += b; }
            else shown += char(c);
        }
        std::printf("%6d  '%s'\n", id, shown.c_str());
    }
    return 0;
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("tokenize", "the token ids of a text, from the model's tokenizer");
    sub->add_option("-m,--model", a->model, "GGUF file (a vocab-only file is enough)");
    auto* p = sub->add_option("-p,--prompt", a->prompt, "text to tokenize");
    auto* f = sub->add_option("-f,--file", a->file, "read the text from a file");
    p->excludes(f);
    sub->add_flag("--no-bos", a->no_bos, "do not add BOS even where the vocabulary asks for it");
    sub->add_flag("--special", a->special, "recognise control tokens written in the text");
    sub->add_flag("--json", a->json, "print {\"ids\": [...], \"pieces\": [...]}");
    return [a] { return run(*a); };
}

}  // namespace ptxlm::cli
