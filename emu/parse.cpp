// PTX module parsing: comments, directives, kernel entries, parameter lists,
// register and shared declarations, labels. Each instruction statement is
// handed to decode.cpp; branch labels are resolved at the end of the kernel.
// Anything outside the supported subset fails the load with a diagnostic that
// names the line (never guessed).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>

#include "program.h"

namespace ptxlm::emu {

namespace {

// Strips // and /* */ comments (keeping newlines so line numbers stay right)
// and splits the text into tokens.
bool lex(std::string_view src, std::vector<Tok>* out, std::string* err) {
    uint32_t line = 1;
    size_t i = 0, n = src.size();
    auto ident_start = [](char c) { return std::isalpha((unsigned char)c) || c == '_' || c == '$' || c == '%' || c == '.'; };
    auto ident_char = [](char c) { return std::isalnum((unsigned char)c) || c == '_' || c == '$' || c == '.' || c == '%'; };
    while (i < n) {
        char c = src[i];
        if (c == '\n') { ++line; ++i; continue; }
        if (std::isspace((unsigned char)c)) { ++i; continue; }
        if (c == '/' && i + 1 < n && src[i + 1] == '/') {
            while (i < n && src[i] != '\n') ++i;
            continue;
        }
        if (c == '/' && i + 1 < n && src[i + 1] == '*') {
            size_t j = src.find("*/", i + 2);
            if (j == std::string_view::npos) { *err = "line " + std::to_string(line) + ": unterminated /* comment"; return false; }
            for (size_t k = i; k < j; ++k) line += src[k] == '\n';
            i = j + 2;
            continue;
        }
        Tok t;
        t.line = line;
        if (c == '"') {   // string (only in .pragma): kept whole
            size_t j = src.find('"', i + 1);
            if (j == std::string_view::npos) { *err = "line " + std::to_string(line) + ": unterminated string"; return false; }
            t.kind = Tok::Ident;
            t.text = std::string(src.substr(i, j + 1 - i));
            i = j + 1;
        } else if (std::isdigit((unsigned char)c)) {
            size_t j = i;
            while (j < n && (std::isalnum((unsigned char)src[j]) || src[j] == '.')) {
                ++j;
                bool hexlike = j - i >= 2 && src[i] == '0' && std::strchr("xXfFdD", src[i + 1]);
                if (!hexlike && j < n && (src[j - 1] == 'e' || src[j - 1] == 'E') && (src[j] == '+' || src[j] == '-')) ++j;
            }
            t.kind = Tok::Num;
            t.text = std::string(src.substr(i, j - i));
            i = j;
        } else if (ident_start(c)) {
            size_t j = i + 1;
            // "::" joins cache-hint modifiers (.L1::no_allocate) into the opcode.
            while (j < n && (ident_char(src[j]) || (src[j] == ':' && j + 2 < n && src[j + 1] == ':' && ident_char(src[j + 2]))))
                j += src[j] == ':' ? 2 : 1;
            t.kind = Tok::Ident;
            t.text = std::string(src.substr(i, j - i));
            i = j;
        } else if (std::strchr(",;:{}[]()+-@!|<>=", c)) {
            t.kind = Tok::Punct;
            t.text = std::string(1, c);
            ++i;
        } else {
            *err = "line " + std::to_string(line) + ": unexpected character '" + std::string(1, c) + "'";
            return false;
        }
        out->push_back(std::move(t));
    }
    Tok end;
    end.line = line;
    out->push_back(end);
    return true;
}

bool parse_uint(const std::string& s, uint64_t* v) {
    if (s.empty()) return false;
    char* e = nullptr;
    errno = 0;
    unsigned long long x = std::strtoull(s.c_str(), &e, 0);
    if (errno || *e) return false;
    *v = x;
    return true;
}

uint32_t type_bytes(std::string_view t) {
    if (t == ".b8" || t == ".u8" || t == ".s8") return 1;
    if (t == ".b16" || t == ".u16" || t == ".s16" || t == ".f16" || t == ".bf16") return 2;
    if (t == ".b32" || t == ".u32" || t == ".s32" || t == ".f32" || t == ".f16x2" || t == ".bf16x2") return 4;
    if (t == ".b64" || t == ".u64" || t == ".s64" || t == ".f64") return 8;
    if (t == ".pred") return 1;
    return 0;
}

struct SharedDecl { std::string name; uint32_t align, bytes; bool external; };

class Parser;

class KernelScope final : public DecodeScope {
public:
    Kernel* k = nullptr;
    std::unordered_map<std::string, uint32_t> regs;
    std::unordered_map<std::string, std::pair<Space, uint64_t>> symbols;
    std::unordered_map<uint64_t, uint32_t> consts;
    std::map<Special, uint32_t> specials;
    struct Pending { std::string label; uint32_t inst, line; };
    std::vector<Pending> pending;
    std::unordered_map<std::string, uint32_t> labels;

    std::vector<std::string> names;   // per slot, for diagnostics

    unsigned version = 0, sm = 0;
    unsigned ptx_version() const override { return version; }
    unsigned sm_target() const override { return sm; }

    uint32_t new_slot(uint8_t bits, std::string name = {}) {
        k->reg_bits.push_back(bits);
        names.push_back(std::move(name));
        return k->nregs++;
    }
    unsigned reg_width(uint32_t reg) const override { return reg < k->reg_bits.size() ? k->reg_bits[reg] : 0; }
    std::string reg_name(uint32_t reg) const override { return reg < names.size() ? names[reg] : std::string(); }
    uint32_t find_reg(std::string_view name) const override {
        auto it = regs.find(std::string(name));
        return it == regs.end() ? kNoReg : it->second;
    }
    bool find_symbol(std::string_view name, Space* space, uint64_t* addr) const override {
        auto it = symbols.find(std::string(name));
        if (it == symbols.end()) return false;
        *space = it->second.first;
        *addr = it->second.second;
        return true;
    }
    bool find_special(std::string_view name, Special* what) const override {
        static const std::pair<const char*, Special> table[] = {
            {"%tid.x", Special::TidX}, {"%tid.y", Special::TidY}, {"%tid.z", Special::TidZ},
            {"%ntid.x", Special::NtidX}, {"%ntid.y", Special::NtidY}, {"%ntid.z", Special::NtidZ},
            {"%ctaid.x", Special::CtaX}, {"%ctaid.y", Special::CtaY}, {"%ctaid.z", Special::CtaZ},
            {"%nctaid.x", Special::NctaX}, {"%nctaid.y", Special::NctaY}, {"%nctaid.z", Special::NctaZ},
            {"%laneid", Special::LaneId}, {"%warpid", Special::WarpId}, {"%nwarpid", Special::NWarpId},
            {"%smid", Special::SmId}, {"%nsmid", Special::NSmId}, {"%lanemask_lt", Special::LaneMaskLt},
            {"%lanemask_le", Special::LaneMaskLe}, {"%lanemask_eq", Special::LaneMaskEq},
            {"%lanemask_ge", Special::LaneMaskGe}, {"%lanemask_gt", Special::LaneMaskGt},
            {"%cluster_ctarank", Special::ClusterCtaRank}, {"%cluster_nctarank", Special::ClusterNCtaRank}};
        for (auto& [n, s] : table)
            if (name == n) { *what = s; return true; }
        return false;
    }
    uint32_t constant(uint64_t value) override {
        auto it = consts.find(value);
        if (it != consts.end()) return it->second;
        uint32_t r = new_slot(0, "constant");
        k->constants.push_back({r, value});
        consts.emplace(value, r);
        return r;
    }
    uint32_t special(Special what) override {
        auto it = specials.find(what);
        if (it != specials.end()) return it->second;
        uint32_t r = new_slot(32, "special register");
        k->specials.push_back({r, what});
        specials.emplace(what, r);
        return r;
    }
    void branch_to(std::string_view label, uint32_t inst, uint32_t line) override {
        pending.push_back({std::string(label), inst, line});
    }
};

class Parser {
public:
    Parser(std::vector<Tok> toks, Program* prog, std::string* log) : t_(std::move(toks)), prog_(prog), log_(log) {}

    bool run() {
        while (peek().kind != Tok::End) {
            const std::string& s = peek().text;
            if (s == ".version" || s == ".target" || s == ".address_size") {
                uint32_t line = peek().line;
                std::string d = next().text;
                if (d == ".address_size") {
                    if (next().text != "64") return fail(line, ".address_size must be 64");
                } else if (d == ".version") {
                    const std::string& v = next().text;
                    unsigned maj = 0, min = 0;
                    if (std::sscanf(v.c_str(), "%u.%u", &maj, &min) != 2 || min > 9) return fail(line, "bad .version '" + v + "'");
                    version_ = maj * 10 + min;
                    if (version_ > 90) return fail(line, ".version " + v + " is newer than 9.0");
                } else {
                    const std::string& t = next().text;
                    if (t.rfind("sm_", 0) != 0 || !std::isdigit((unsigned char)t[3 < t.size() ? 3 : 0]))
                        return fail(line, "unsupported .target '" + t + "'");
                    sm_ = unsigned(std::atoi(t.c_str() + 3));
                    while (is(",")) { next(); next(); }
                }
            } else if (s == ".visible" || s == ".entry") {
                if (s == ".visible") next();
                if (!parse_entry()) return false;
            } else if (s == ".shared") {
                SharedDecl d;
                if (!parse_shared(false, &d)) return false;
                module_shared_.push_back(d);
            } else if (s == ".extern" && peek(1).text == ".shared") {
                next();
                SharedDecl d;
                if (!parse_shared(true, &d)) return false;
                module_shared_.push_back(d);
            } else {
                return fail(peek().line, "unsupported module directive '" + s + "'");
            }
        }
        return true;
    }

private:
    std::vector<Tok> t_;
    size_t p_ = 0;
    Program* prog_;
    std::string* log_;
    std::vector<SharedDecl> module_shared_;
    unsigned version_ = 0, sm_ = 0;

    const Tok& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
    const Tok& next() { const Tok& t = t_[p_]; if (p_ + 1 < t_.size()) ++p_; return t; }
    bool is(const char* s) const { return peek().text == s && peek().kind != Tok::End; }
    bool fail(uint32_t line, const std::string& msg) {
        *log_ += "line " + std::to_string(line) + ": " + msg;
        std::string text = prog_->line_text(line);
        if (!text.empty()) *log_ += " in `" + text + "`";
        *log_ += "\n";
        return false;
    }
    bool expect(const char* s) {
        if (is(s)) { next(); return true; }
        return fail(peek().line, std::string("expected '") + s + "', found '" + peek().text + "'");
    }

    // [.extern] .shared [.align N] .type name[ [N] | [] ] ;   (".shared" not yet consumed)
    bool parse_shared(bool external, SharedDecl* d) {
        uint32_t line = peek().line;
        next();   // .shared
        d->external = external;
        d->align = 0;
        if (is(".align")) {
            next();
            uint64_t a;
            if (!parse_uint(next().text, &a) || a == 0 || (a & (a - 1))) return fail(line, "bad .align");
            d->align = uint32_t(a);
        }
        uint32_t elem = type_bytes(peek().text);
        if (!elem || peek().text == ".pred") return fail(line, "unsupported .shared type '" + peek().text + "'");
        next();
        if (peek().kind != Tok::Ident) return fail(line, "expected a .shared variable name");
        d->name = next().text;
        uint64_t count = 1;
        if (is("[")) {
            next();
            if (is("]")) {
                if (!external) return fail(line, "an unsized .shared array must be .extern");
                count = 0;
            } else if (!parse_uint(next().text, &count)) {
                return fail(line, "bad .shared array size");
            }
            if (!expect("]")) return false;
        } else if (external) {
            return fail(line, ".extern .shared must be an unsized array");
        }
        if (external && count) return fail(line, ".extern .shared must be an unsized array");
        if (!d->align) d->align = elem;
        if (count * elem > (1u << 30)) return fail(line, ".shared array too large");
        d->bytes = uint32_t(count * elem);
        return expect(";");
    }

    bool parse_entry() {
        uint32_t line = peek().line;
        if (!expect(".entry")) return false;
        if (peek().kind != Tok::Ident) return fail(line, "expected a kernel name");
        Kernel k;
        k.info.name = next().text;
        for (auto& other : prog_->kernels)
            if (other.info.name == k.info.name) return fail(line, "duplicate kernel '" + k.info.name + "'");
        KernelScope sc;
        sc.k = &k;
        sc.version = version_;
        sc.sm = sm_;
        if (!version_ || !sm_) return fail(line, ".version and .target must precede the first kernel");
        // Parameters.
        if (!expect("(")) return false;
        uint32_t off = 0;
        while (!is(")")) {
            if (!expect(".param")) return false;
            ParamInfo pi;
            uint32_t align = 0;
            if (is(".align")) {
                next();
                uint64_t a;
                if (!parse_uint(next().text, &a) || a == 0 || (a & (a - 1))) return fail(line, "bad parameter .align");
                align = uint32_t(a);
            }
            uint32_t elem = type_bytes(peek().text);
            if (!elem || peek().text == ".pred") return fail(peek().line, "unsupported parameter type '" + peek().text + "'");
            next();
            if (peek().kind != Tok::Ident || peek().text[0] == '.')
                return fail(peek().line, "unsupported parameter attribute or name '" + peek().text + "'");
            pi.name = next().text;
            uint64_t count = 1;
            if (is("[")) {
                next();
                if (!parse_uint(next().text, &count) || count == 0) return fail(line, "bad parameter array size");
                if (!expect("]")) return false;
            }
            pi.size = uint32_t(count * elem);
            pi.align = align ? align : elem;
            off = (off + pi.align - 1) / pi.align * pi.align;
            pi.offset = off;
            off += pi.size;
            sc.symbols[pi.name] = {Space::Param, pi.offset};
            k.info.params.push_back(pi);
            if (is(",")) next(); else break;
        }
        if (!expect(")")) return false;
        k.info.param_bytes = off;
        // Performance directives.
        while (!is("{")) {
            std::string d = next().text;
            if (d == ".maxntid" || d == ".reqntid") {
                uint64_t prod = 1, v;
                for (int i = 0; i < 3; ++i) {
                    if (!parse_uint(next().text, &v) || v == 0) return fail(line, "bad " + d);
                    prod *= v;
                    if (!is(",")) break;
                    next();
                }
                k.info.max_ntid = uint32_t(prod);
            } else if (d == ".minnctapersm" || d == ".maxnreg" || d == ".maxnctapersm") {
                next();
            } else {
                return fail(line, "unsupported kernel directive '" + d + "'");
            }
        }
        next();   // {
        // Body.
        std::vector<SharedDecl> shared = module_shared_;
        bool ok = true;
        // Shared symbols must be known before instructions use them; PTX allows
        // declarations anywhere in the body, so pre-scan them.
        {
            size_t save = p_;
            int depth = 0;
            while (peek().kind != Tok::End && !(depth == 0 && is("}"))) {
                if (is("{")) ++depth;
                if (is("}")) --depth;
                if (is(".extern")) return fail(peek().line, ".extern declarations belong at module scope");
                if (is(".shared")) {
                    SharedDecl d;
                    if (!parse_shared(false, &d)) return false;
                    shared.push_back(d);
                    continue;
                }
                next();
            }
            p_ = save;
        }
        uint32_t soff = 0, dyn_align = 1;
        for (auto& d : shared) {
            if (d.external) { dyn_align = std::max(dyn_align, d.align); continue; }
            soff = (soff + d.align - 1) / d.align * d.align;
            if (sc.symbols.count(d.name)) return fail(line, "duplicate symbol '" + d.name + "'");
            sc.symbols[d.name] = {Space::Shared, soff};
            soff += d.bytes;
        }
        k.info.static_shared_bytes = soff;
        k.dynamic_shared_offset = (soff + dyn_align - 1) / dyn_align * dyn_align;
        for (auto& d : shared)
            if (d.external) {
                k.has_dynamic_shared = true;
                sc.symbols[d.name] = {Space::Shared, k.dynamic_shared_offset};
            }

        while (ok) {
            const Tok& t = peek();
            if (t.kind == Tok::End) return fail(line, "kernel '" + k.info.name + "' has no closing '}'");
            if (is("}")) { next(); break; }
            if (is("{")) return fail(t.line, "nested { } scopes are not supported");
            if (t.text == ".reg") {
                if (!parse_reg(sc)) return false;
                continue;
            }
            if (t.text == ".shared" || t.text == ".extern") {   // already laid out
                while (!is(";")) next();
                next();
                continue;
            }
            if (t.text == ".pragma") {
                while (!is(";")) next();
                next();
                continue;
            }
            if (t.kind == Tok::Ident && peek(1).text == ":" && t.text[0] != '.' && t.text[0] != '%') {
                if (sc.labels.count(t.text)) return fail(t.line, "duplicate label '" + t.text + "'");
                sc.labels[t.text] = uint32_t(k.code.size());
                next();
                next();
                continue;
            }
            if (t.kind == Tok::Ident && t.text[0] == '.') return fail(t.line, "unsupported directive '" + t.text + "'");
            // An instruction statement up to ';'.
            size_t b = p_;
            int depth = 0;   // vector operands {..} nest inside a statement
            while (peek().kind != Tok::End && !(depth == 0 && (is(";") || is("}")))) {
                if (is("{")) ++depth;
                if (is("}")) --depth;
                next();
            }
            if (!is(";")) return fail(t.line, "missing ';'");
            size_t e = p_;
            next();
            Inst in;
            std::string err;
            if (!decode_inst(t_, b, e, uint32_t(k.code.size()), sc, &in, &err)) return fail(t_[b].line, err);
            k.code.push_back(in);
        }
        // Falling off the end of the kernel exits.
        Inst ex;
        ex.op = Op::Exit;
        ex.line = peek().line;
        k.code.push_back(ex);
        for (auto& pb : sc.pending) {
            auto it = sc.labels.find(pb.label);
            if (it == sc.labels.end()) return fail(pb.line, "unknown label '" + pb.label + "'");
            k.code[pb.inst].target = it->second;
        }
        if (variance_mode().on) {   // ptxas's mul+add fusion, which labels stop
            std::vector<uint32_t> at;
            for (auto& l : sc.labels) at.push_back(l.second);
            mark_fusions(k.code, at);
        }
        k.info.regs_per_thread = std::min<uint32_t>(255, uint32_t(sc.regs.size()));
        prog_->infos.push_back(k.info);
        prog_->kernels.push_back(std::move(k));
        return true;
    }

    // .reg .type %name<N>;   or   .reg .type %a, %b;
    bool parse_reg(KernelScope& sc) {
        uint32_t line = next().line;
        std::string ty = next().text;
        uint32_t bytes = type_bytes(ty);
        if (!bytes) return fail(line, "unsupported register type '" + ty + "'");
        uint8_t bits = ty == ".pred" ? 1 : uint8_t(bytes * 8);
        for (;;) {
            if (peek().kind != Tok::Ident || peek().text[0] == '.') return fail(line, "expected a register name");
            std::string name = next().text;
            if (is("<")) {
                next();
                uint64_t count;
                if (!parse_uint(next().text, &count) || count > (1u << 20)) return fail(line, "bad register count");
                if (!expect(">")) return false;
                for (uint64_t i = 0; i < count; ++i) {
                    std::string n = name + std::to_string(i);
                    if (sc.regs.count(n)) return fail(line, "duplicate register '" + n + "'");
                    sc.regs[n] = sc.new_slot(bits, n);
                }
            } else {
                if (sc.regs.count(name)) return fail(line, "duplicate register '" + name + "'");
                sc.regs[name] = sc.new_slot(bits, name);
            }
            if (is(",")) { next(); continue; }
            return expect(";");
        }
    }
};

}  // namespace

std::string Program::line_text(uint32_t line) const {
    if (line == 0 || line > lines.size()) return {};
    const std::string& s = lines[line - 1];
    size_t b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return {};
    size_t e = s.find_last_not_of(" \t\r");
    return s.substr(b, e + 1 - b);
}

std::shared_ptr<const Program> load_program(std::string_view ptx, std::string* log) {
    std::string scratch;
    if (!log) log = &scratch;
    auto prog = std::make_shared<Program>();
    size_t s = 0;
    while (s <= ptx.size()) {
        size_t e = ptx.find('\n', s);
        if (e == std::string_view::npos) e = ptx.size();
        prog->lines.emplace_back(ptx.substr(s, e - s));
        s = e + 1;
    }
    std::vector<Tok> toks;
    std::string err;
    if (!lex(ptx, &toks, &err)) {
        *log += err + "\n";
        return nullptr;
    }
    Parser parser(std::move(toks), prog.get(), log);
    if (!parser.run()) return nullptr;
    if (prog->kernels.empty()) {
        *log += "no .entry kernel in module\n";
        return nullptr;
    }
    return prog;
}

const std::vector<KernelInfo>& program_kernels(const Program& p) { return p.infos; }

}  // namespace ptxlm::emu
