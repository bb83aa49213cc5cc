// Running ptxas on generated PTX and reading its -v report (registers,
// barriers, shared/constant memory, stack and spills per entry function).
// Free of any CUDA library: it spawns the ptxas binary in a temp dir.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ptxlm::ptx {

struct PtxasFunctionReport {
  std::string name;  // the entry function
  std::string arch;  // "sm_80"
  int registers = -1;
  int barriers = 0;
  uint64_t smem_bytes = 0;
  uint64_t cmem0_bytes = 0;  // absent on sm_90+ (stays 0)
  uint64_t stack_frame_bytes = 0;
  uint64_t spill_store_bytes = 0;
  uint64_t spill_load_bytes = 0;
  bool spills() const { return spill_store_bytes || spill_load_bytes; }
};

struct PtxasResult {
  int exit_code = -1;
  std::string log;  // stdout + stderr
  std::vector<PtxasFunctionReport> functions;
  bool ok() const { return exit_code == 0; }
  const PtxasFunctionReport* find(std::string_view name) const;
};

// Parses `ptxas -v` output. Items of the "Used ..." line are read as an
// optional comma-separated list, so a missing cmem item (sm_90+) is fine.
std::vector<PtxasFunctionReport> parse_ptxas_report(std::string_view log);

// Writes the PTX to a fresh temp dir and runs `ptxas -arch=<arch> -v
// <file> -o <file>.cubin` (no shell: arguments cannot be misquoted).
// Throws ptx::Error when ptxas cannot be started at all.
PtxasResult run_ptxas(const std::string& ptxas_path, std::string_view ptx, std::string_view arch,
                      const std::vector<std::string>& extra_args = {});

// $PTXLM_PTXAS, else /usr/local/cuda/bin/ptxas, else ptxas on PATH; empty
// when none is found.
std::string find_ptxas();

}  // namespace ptxlm::ptx
