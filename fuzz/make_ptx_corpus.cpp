// Writes the PTX fuzz seeds: every kernel the builder generates (the examples
// and the instruction-coverage kernels, for sm_80 and sm_90), one file each.
//
//   make_ptx_corpus OUT_DIR
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "kernels/examples/examples.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    const std::filesystem::path out = argv[1];
    std::filesystem::create_directories(out);
    int n = 0;
    for (const char* arch : {"sm_80", "sm_90"}) {
        const auto t = ptxlm::ptx::Target::parse(arch);
        for (const auto& list : {ptxlm::kernels::example_kernels(t), ptxlm::kernels::builder_coverage_kernels(t)})
            for (const auto& g : list) {
                std::ofstream(out / (g.name + "." + arch + ".ptx")) << g.ptx;
                ++n;
            }
    }
    std::printf("wrote %d PTX files to %s\n", n, out.c_str());
    return 0;
}
