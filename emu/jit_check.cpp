#include "emu/jit_check.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

extern char** environ;

namespace ptxlm::emu {
namespace {

constexpr const char* kCacheMagic = "ptxlm-emu-jit 1";

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

std::string find_ptxas() {
    std::string p = env("PTXLM_PTXAS");
#ifdef PTXLM_EMU_PTXAS_DEFAULT
    if (p.empty()) p = PTXLM_EMU_PTXAS_DEFAULT;
#endif
    return !p.empty() && access(p.c_str(), X_OK) == 0 ? p : "";
}

std::string cache_dir() {
    std::string d = env("PTXLM_EMU_JIT_CACHE");
    if (!d.empty()) return d;
    std::string xdg = env("XDG_CACHE_HOME");
    if (!xdg.empty()) return xdg + "/ptxlm/emu-jit";
    std::string home = env("HOME");
    return home.empty() ? "" : home + "/.cache/ptxlm/emu-jit";
}

void mkdirs(const std::string& path) {
    for (size_t i = 1; i <= path.size(); ++i)
        if (i == path.size() || path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
}

// FNV-1a, 64 bits, over the arch and the text (a cache key, not security:
// the entry also stores the text's length, checked on reading).
std::string cache_key(std::string_view ptx, const std::string& arch) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](std::string_view s) {
        for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    };
    mix(arch);
    mix("\n");
    mix(ptx);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx-%zx", static_cast<unsigned long long>(h), ptx.size());
    return buf;
}

// Entry: magic line, "ok" or "fail", then ptxas's output.
bool read_cache(const std::string& path, JitVerdict* v) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::string magic, verdict;
    if (!std::getline(in, magic) || magic != kCacheMagic || !std::getline(in, verdict)) return false;
    if (verdict != "ok" && verdict != "fail") return false;
    std::stringstream rest;
    rest << in.rdbuf();
    v->checked = true;
    v->ok = verdict == "ok";
    v->log = rest.str();
    return true;
}

void write_cache(const std::string& path, const JitVerdict& v) {
    const std::string tmp = path + ".tmp" + std::to_string(getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) return;
        out << kCacheMagic << '\n' << (v.ok ? "ok" : "fail") << '\n' << v.log;
        if (!out) {
            std::remove(tmp.c_str());
            return;
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

// ptxas -v names each entry ("Compiling entry function 'k' for 'sm_90'") and
// then reports "Used N registers, ...".
void parse_registers(JitVerdict* v) {
    std::istringstream in(v->log);
    std::string line, current;
    while (std::getline(in, line)) {
        const std::string tag = "Compiling entry function '";
        size_t p = line.find(tag);
        if (p != std::string::npos) {
            size_t q = line.find('\'', p + tag.size());
            current = q == std::string::npos ? "" : line.substr(p + tag.size(), q - p - tag.size());
            continue;
        }
        p = line.find("Used ");
        if (p != std::string::npos && !current.empty() && line.find(" registers", p) != std::string::npos)
            v->regs[current] = unsigned(std::strtoul(line.c_str() + p + 5, nullptr, 10));
    }
}

bool run_ptxas(const std::string& ptxas, std::string_view ptx, const std::string& arch, JitVerdict* v) {
    char dir[] = "/tmp/ptxlm-emu-jit-XXXXXX";
    if (!mkdtemp(dir)) return false;
    const std::string src = std::string(dir) + "/module.ptx", out = std::string(dir) + "/ptxas.log",
                      bin = std::string(dir) + "/module.cubin";
    bool ran = false;
    {
        std::ofstream f(src, std::ios::binary);
        f.write(ptx.data(), std::streamsize(ptx.size()));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    const std::string arch_flag = "-arch=" + arch;
    std::vector<char*> argv = {const_cast<char*>(ptxas.c_str()), const_cast<char*>(arch_flag.c_str()),
                               const_cast<char*>("-v"), const_cast<char*>("-o"), const_cast<char*>(bin.c_str()),
                               const_cast<char*>(src.c_str()), nullptr};
    pid_t pid;
    if (posix_spawn(&pid, ptxas.c_str(), &fa, nullptr, argv.data(), environ) == 0) {
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        std::ifstream in(out, std::ios::binary);
        std::stringstream log;
        log << in.rdbuf();
        v->checked = true;
        v->ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        v->log = log.str();
        // Name the input as the driver's JIT does, not by our temporary path.
        for (size_t at; (at = v->log.find(src)) != std::string::npos;) v->log.replace(at, src.size(), "application ptx input");
        ran = true;
    }
    posix_spawn_file_actions_destroy(&fa);
    std::remove(src.c_str());
    std::remove(out.c_str());
    std::remove(bin.c_str());
    rmdir(dir);
    return ran;
}

}  // namespace

JitVerdict jit_check(std::string_view ptx, const std::string& arch) {
    JitVerdict v;
    if (env("PTXLM_EMU_PTXAS") == "0") {
        v.log = "PTXLM_EMU_PTXAS=0: ptxas check off; PTX is checked by emu's own parser only";
        return v;
    }
    const std::string ptxas = find_ptxas();
    if (ptxas.empty()) {
        v.log = "ptxas not found (set PTXLM_PTXAS); PTX is checked by emu's own parser only";
        return v;
    }
    const std::string dir = cache_dir();
    const std::string entry = dir.empty() ? "" : dir + "/" + cache_key(ptx, arch);
    if (!entry.empty() && read_cache(entry, &v)) {
        parse_registers(&v);
        return v;
    }
    if (!run_ptxas(ptxas, ptx, arch, &v)) {
        v.log = "could not run " + ptxas + ": " + std::strerror(errno) + "; PTX is checked by emu's own parser only";
        return v;
    }
    if (!entry.empty()) {
        mkdirs(dir);
        write_cache(entry, v);
    }
    parse_registers(&v);
    return v;
}

}  // namespace ptxlm::emu
