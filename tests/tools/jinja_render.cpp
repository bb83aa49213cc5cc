// Test tool: renders Jinja chat templates with ptxlm's interpreter.
//   jinja_render TEMPLATE CONTEXT.json   prints the rendering (exit 0), or
//                                        {"error": MSG, "raised": bool} (exit 2)
//   jinja_render --batch                 stdin: {"now": [Y, M, D, h, m, s],
//       "jobs": [{"template": TEXT or "template_path": PATH, "context": {...}, "chat": bool}]}
//       stdout: {"results": [{"text": RENDERED} or {"error": MSG, "raised": bool}]}
//       With "chat": true the context's messages, tools, add_generation_prompt,
//       bos_token and eos_token go through ptxlm::chat_context (the caller's
//       strings are data, roles and BOS/EOS template text; the other keys are
//       added as they are), and the result has "code": [[begin, end], ...],
//       the byte ranges the template wrote.
// strftime_now uses "now" when given (the single mode: PTXLM_JINJA_NOW=Y-M-D h:m:s).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/chat_template.h"
#include "engine/jinja.h"

namespace {

using ojson = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read " + path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// The context as chat_template.cpp builds it, with any other keys added.
ptxlm::jinja::Value chat_context(const ojson& c) {
    ptxlm::jinja::Value v = ptxlm::chat_context(c.value("messages", ojson::array()), c.value("tools", ojson()),
                                                c.value("add_generation_prompt", false), c.value("bos_token", ""),
                                                c.value("eos_token", ""));
    for (const auto& [k, x] : c.items())
        if (!v.as_dict().find(k)) v.as_dict().set(ptxlm::jinja::Value(k), ptxlm::jinja::from_json(x));
    return v;
}

ojson render_one(const std::string& source, const ojson& context, bool chat, const ptxlm::jinja::RenderOptions& opt) {
    try {
        const auto t = ptxlm::jinja::Template::parse(source);
        if (!chat) return ojson{{"text", t.render(ptxlm::jinja::from_json(context), opt)}};
        ptxlm::jinja::Rendered r = t.render_marked(chat_context(context), opt);
        return ojson{{"text", std::move(r.text)}, {"code", r.code}};
    } catch (const ptxlm::jinja::RaisedError& e) {
        return ojson{{"error", e.what()}, {"raised", true}};
    } catch (const ptxlm::jinja::Error& e) {
        return ojson{{"error", e.what()}, {"raised", false}};
    }
}

std::tm tm_from(int y, int mo, int d, int h, int mi, int s) {
    std::tm tm{};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    timegm(&tm);   // fills in the weekday and day of the year
    return tm;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        ptxlm::jinja::RenderOptions opt;
        if (argc == 2 && std::string(argv[1]) == "--batch") {
            const ojson in = ojson::parse(std::string(std::istreambuf_iterator<char>(std::cin), {}));
            if (in.contains("now")) {
                const auto& n = in["now"];
                opt.now = tm_from(n[0], n[1], n[2], n[3], n[4], n[5]);
            }
            ojson results = ojson::array();
            for (const ojson& job : in["jobs"]) {
                const std::string src = job.contains("template") ? job["template"].get<std::string>()
                                                                  : read_file(job["template_path"].get<std::string>());
                results.push_back(render_one(src, job.value("context", ojson::object()), job.value("chat", false), opt));
            }
            std::printf("%s\n", ojson{{"results", results}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
            return 0;
        }
        if (argc != 3) {
            std::fprintf(stderr, "usage: jinja_render TEMPLATE CONTEXT.json | --batch\n");
            return 1;
        }
        if (const char* now = std::getenv("PTXLM_JINJA_NOW")) {
            int y, mo, d, h, mi, s;
            if (std::sscanf(now, "%d-%d-%d %d:%d:%d", &y, &mo, &d, &h, &mi, &s) == 6) opt.now = tm_from(y, mo, d, h, mi, s);
        }
        const ojson r = render_one(read_file(argv[1]), ojson::parse(read_file(argv[2])), false, opt);
        if (r.contains("text")) {
            const std::string& t = r["text"].get_ref<const std::string&>();
            std::fwrite(t.data(), 1, t.size(), stdout);
            return 0;
        }
        std::printf("%s\n", r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return 2;
    } catch (const std::exception& e) {
        std::printf("%s\n", ojson{{"error", e.what()}, {"raised", false}}.dump().c_str());
        return 2;
    }
}
