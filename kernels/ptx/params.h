// A kernel's interface, described once: its parameters (which generate both
// the PTX `.param` list and the host-side argument pack for cuLaunchKernel)
// and its launch geometry (which the generator and the launcher share).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ptx/types.h"

namespace ptxlm::ptx {

enum class ParamType : uint8_t { u32, s32, u64, s64, f32, f64, ptr };

const char* param_type_name(ParamType t);  // "ptr" for pointers
Type param_reg_type(ParamType t);          // ptr -> u64
uint32_t param_size(ParamType t);          // also its alignment

struct Param {
  std::string name;
  ParamType type;
  uint32_t offset;  // in the packed argument buffer, naturally aligned
};

// A device address as the kernel sees it (CUdeviceptr's value).
struct DevPtr {
  uint64_t addr = 0;
};

// One host-side argument. Exactly one constructor per parameter type, so an
// argument of the wrong C++ type is a compile error or a pack() error, never
// a silent conversion. Write 5u for a u32, 5 for an s32.
class ParamValue {
 public:
  ParamValue(uint32_t v) : type_(ParamType::u32), bits_(v) {}
  ParamValue(int32_t v) : type_(ParamType::s32), bits_(uint32_t(v)) {}
  ParamValue(uint64_t v) : type_(ParamType::u64), bits_(v) {}
  ParamValue(int64_t v) : type_(ParamType::s64), bits_(uint64_t(v)) {}
  ParamValue(float v);
  ParamValue(double v);
  ParamValue(DevPtr p) : type_(ParamType::ptr), bits_(p.addr) {}

  ParamType type() const { return type_; }
  uint64_t bits() const { return bits_; }  // little-endian payload

 private:
  ParamType type_;
  uint64_t bits_;
};

// The packed arguments: a byte buffer laid out like the `.param` space and
// the `void*[]` that cuLaunchKernel's kernelParams wants, pointing into it.
class ParamPack {
 public:
  ParamPack() = default;
  ParamPack(const ParamPack& o);
  ParamPack& operator=(const ParamPack& o);
  ParamPack(ParamPack&&) noexcept = default;
  ParamPack& operator=(ParamPack&&) noexcept = default;

  void** args() { return ptrs_.data(); }      // kernelParams
  const std::byte* data() const { return reinterpret_cast<const std::byte*>(words_.data()); }
  size_t size() const { return size_; }         // bytes, for CU_LAUNCH_PARAM_BUFFER_SIZE
  size_t count() const { return ptrs_.size(); }

 private:
  friend class ParamList;
  void repoint();
  std::vector<uint64_t> words_;    // 8-byte aligned storage
  std::vector<uint32_t> offsets_;  // one per parameter
  std::vector<void*> ptrs_;
  size_t size_ = 0;
};

class ParamList {
 public:
  ParamList& add(std::string name, ParamType type);
  ParamList& add_ptr(std::string name) { return add(std::move(name), ParamType::ptr); }
  ParamList& add_u32(std::string name) { return add(std::move(name), ParamType::u32); }
  ParamList& add_s32(std::string name) { return add(std::move(name), ParamType::s32); }
  ParamList& add_u64(std::string name) { return add(std::move(name), ParamType::u64); }
  ParamList& add_f32(std::string name) { return add(std::move(name), ParamType::f32); }
  ParamList& add_f64(std::string name) { return add(std::move(name), ParamType::f64); }
  ParamList& add_s64(std::string name) { return add(std::move(name), ParamType::s64); }

  const std::vector<Param>& params() const { return params_; }
  const Param& find(std::string_view name) const;  // throws Error naming it
  uint32_t size_bytes() const { return size_; }   // padded to 8

  // Checks count and each type (the error names the parameter).
  ParamPack pack(std::initializer_list<ParamValue> values) const;
  ParamPack pack(const std::vector<ParamValue>& values) const;

 private:
  std::vector<Param> params_;
  uint32_t size_ = 0;
};

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t(x) * y * z; }
  bool operator==(const Dim3&) const = default;
};

// Launch geometry from ONE function per kernel (`<kernel>_geometry(shape)`),
// used by the generator (.maxntid, shared sizing) and by the launcher.
struct LaunchGeometry {
  Dim3 grid, block;
  uint32_t shared_bytes = 0;  // dynamic shared memory
};

// Throws Error naming the kernel when a geometry cannot launch on any
// supported GPU: empty grid/block, more than 1024 threads per block, grid
// y/z over 65535, more than 227 KiB of dynamic shared memory.
void validate_geometry(std::string_view kernel, const LaunchGeometry& g);

// What a kernel generator returns: a pure function of its shape.
struct GeneratedKernel {
  std::string name;  // the .entry name
  std::string ptx;   // a complete module
  ParamList params;
  LaunchGeometry geometry;
  bool hot = false;  // ptxas spills are a test failure
};

}  // namespace ptxlm::ptx
