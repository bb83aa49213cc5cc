// gguf_replay / ptx_replay: run a fuzz entry (ptxlm_fuzz_one) over files without libFuzzer, one line per
// file with the outcome (the reader's error message, or "ok: ..."), so a
// reviewer sees how each malformed file is rejected. It caps its address
// space first (--rlimit-mb, default 1024) so a claimed count that slipped past
// validation shows up as a failed allocation instead of a swapping machine.
//
//   gguf_replay [--rlimit-mb N] FILE_OR_DIR...
//
// Exit status: 0 when every input was processed (whatever the parse said);
// non-zero for bad usage, an unreadable input, or an exception other than
// gguf::Error escaping (a crash ends the process anyway).
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

// The entry of the fuzz target this replay is linked with.
std::string ptxlm_fuzz_one(const uint8_t* data, size_t size);

namespace {

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PTXLM_REPLAY_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PTXLM_REPLAY_ASAN 1
#endif

void limit_address_space(uint64_t mb) {
#ifdef PTXLM_REPLAY_ASAN
    // ASan reserves terabytes of shadow address space; RLIMIT_AS would kill it.
    std::printf("note: built with AddressSanitizer; not setting RLIMIT_AS (%llu MiB asked)\n",
                static_cast<unsigned long long>(mb));
#else
    if (mb == 0) return;
    const rlimit lim{mb << 20, mb << 20};
    if (setrlimit(RLIMIT_AS, &lim) != 0) {
        std::perror("setrlimit(RLIMIT_AS)");
        std::exit(2);
    }
#endif
}

bool read_file(const std::filesystem::path& p, std::vector<uint8_t>& out) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return false;
    out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t rlimit_mb = 1024;
    std::vector<std::filesystem::path> inputs;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--rlimit-mb" && i + 1 < argc) {
            rlimit_mb = std::strtoull(argv[++i], nullptr, 10);
        } else if (a.rfind("--rlimit-mb=", 0) == 0) {
            rlimit_mb = std::strtoull(a.c_str() + 12, nullptr, 10);
        } else if (a == "-h" || a == "--help" || (a.size() > 1 && a[0] == '-')) {
            std::fprintf(stderr, "usage: %s [--rlimit-mb N (0 = no limit)] FILE_OR_DIR...\n", argv[0]);
            return 2;
        } else {
            inputs.emplace_back(a);
        }
    }
    if (inputs.empty()) {
        std::fprintf(stderr, "usage: %s [--rlimit-mb N] FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    limit_address_space(rlimit_mb);

    // Expand directories (one level, sorted) so the output order is stable.
    std::vector<std::filesystem::path> files;
    for (const auto& in : inputs) {
        std::error_code ec;
        if (std::filesystem::is_directory(in, ec)) {
            std::vector<std::filesystem::path> here;
            for (const auto& e : std::filesystem::directory_iterator(in, ec))
                if (e.is_regular_file()) here.push_back(e.path());
            std::sort(here.begin(), here.end());
            files.insert(files.end(), here.begin(), here.end());
        } else {
            files.push_back(in);
        }
    }

    int unreadable = 0;
    std::vector<uint8_t> bytes;
    for (const auto& p : files) {
        if (!read_file(p, bytes)) {
            std::printf("%s: cannot read\n", p.c_str());
            ++unreadable;
            continue;
        }
        try {
            std::printf("%s: %s\n", p.c_str(), ptxlm_fuzz_one(bytes.data(), bytes.size()).c_str());
        } catch (const std::exception& e) {
            // Only gguf::Error is an answer; anything else is a reader bug.
            std::printf("%s: CRASH: uncaught %s\n", p.c_str(), e.what());
            std::fflush(stdout);
            std::abort();
        }
        std::fflush(stdout);
    }
    std::printf("%zu files replayed\n", files.size() - size_t(unreadable));
    return unreadable == 0 ? 0 : 1;
}
