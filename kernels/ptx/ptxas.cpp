#include "kernels/ptx/ptxas.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/ptx/types.h"

extern char** environ;

namespace ptxlm::ptx {

const PtxasFunctionReport* PtxasResult::find(std::string_view name) const {
  for (const auto& f : functions)
    if (f.name == name) return &f;
  return nullptr;
}

namespace {

// The number immediately before `unit` in `item` ("16 registers" -> 16).
bool leading_number(std::string_view item, uint64_t& out) {
  size_t i = 0;
  while (i < item.size() && item[i] == ' ') ++i;
  size_t j = i;
  while (j < item.size() && item[j] >= '0' && item[j] <= '9') ++j;
  if (j == i) return false;
  out = std::stoull(std::string(item.substr(i, j - i)));
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::vector<PtxasFunctionReport> parse_ptxas_report(std::string_view log) {
  std::vector<PtxasFunctionReport> out;
  std::istringstream in{std::string(log)};
  std::string line;
  PtxasFunctionReport* cur = nullptr;
  while (std::getline(in, line)) {
    std::string_view l = line;
    size_t p;
    if ((p = l.find("Compiling entry function '")) != std::string_view::npos) {
      std::string_view rest = l.substr(p + 26);
      size_t q = rest.find('\'');
      PtxasFunctionReport r;
      r.name = std::string(rest.substr(0, q));
      size_t a = rest.find("for '");
      if (a != std::string_view::npos) {
        std::string_view arch = rest.substr(a + 5);
        r.arch = std::string(arch.substr(0, arch.find('\'')));
      }
      out.push_back(r);
      cur = &out.back();
      continue;
    }
    if (!cur) continue;
    if ((p = l.find("Used ")) != std::string_view::npos && l.find("registers") != std::string_view::npos) {
      std::string_view items = l.substr(p + 5);
      while (!items.empty()) {
        size_t comma = items.find(',');
        std::string_view item = trim(items.substr(0, comma));
        if (item.rfind("used ", 0) == 0) item.remove_prefix(5);
        uint64_t n = 0;
        if (leading_number(item, n)) {
          if (item.find("registers") != std::string_view::npos) cur->registers = int(n);
          else if (item.find("barriers") != std::string_view::npos) cur->barriers = int(n);
          else if (item.find("smem") != std::string_view::npos) cur->smem_bytes = n;
          else if (item.find("cmem[0]") != std::string_view::npos) cur->cmem0_bytes = n;
        }
        if (comma == std::string_view::npos) break;
        items.remove_prefix(comma + 1);
      }
    } else if (l.find("bytes stack frame") != std::string_view::npos) {
      std::string_view items = l;
      while (!items.empty()) {
        size_t comma = items.find(',');
        std::string_view item = trim(items.substr(0, comma));
        uint64_t n = 0;
        if (leading_number(item, n)) {
          if (item.find("stack frame") != std::string_view::npos) cur->stack_frame_bytes = n;
          else if (item.find("spill stores") != std::string_view::npos) cur->spill_store_bytes = n;
          else if (item.find("spill loads") != std::string_view::npos) cur->spill_load_bytes = n;
        }
        if (comma == std::string_view::npos) break;
        items.remove_prefix(comma + 1);
      }
    }
  }
  return out;
}

PtxasResult run_ptxas(const std::string& ptxas_path, std::string_view ptx, std::string_view arch,
                      const std::vector<std::string>& extra_args) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "ptxlm-ptxas-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw Error("run_ptxas: cannot create a temp dir: " + std::string(std::strerror(errno)));
  const fs::path dir = tmpl;
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  const std::string src = (dir / "kernel.ptx").string(), cubin = (dir / "kernel.cubin").string(),
                    logf = (dir / "ptxas.log").string();
  {
    std::ofstream f(src, std::ios::binary);
    f.write(ptx.data(), std::streamsize(ptx.size()));
    if (!f) throw Error("run_ptxas: cannot write " + src);
  }
  std::vector<std::string> args = {ptxas_path, "-arch=" + std::string(arch), "-v"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  args.insert(args.end(), {src, "-o", cubin});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, logf.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, ptxas_path.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw Error("run_ptxas: cannot run " + ptxas_path + ": " + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error("run_ptxas: waitpid failed");

  PtxasResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream lf(logf, std::ios::binary);
  std::stringstream ss;
  ss << lf.rdbuf();
  r.log = ss.str();
  r.functions = parse_ptxas_report(r.log);
  return r;
}

std::string find_ptxas() {
  auto executable = [](const std::string& p) { return !p.empty() && access(p.c_str(), X_OK) == 0; };
  if (const char* env = std::getenv("PTXLM_PTXAS"); env && executable(env)) return env;
  if (executable("/usr/local/cuda/bin/ptxas")) return "/usr/local/cuda/bin/ptxas";
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest = path;
    while (!rest.empty()) {
      size_t c = rest.find(':');
      std::string cand = std::string(rest.substr(0, c)) + "/ptxas";
      if (executable(cand)) return cand;
      if (c == std::string_view::npos) break;
      rest.remove_prefix(c + 1);
    }
  }
  return "";
}

}  // namespace ptxlm::ptx
