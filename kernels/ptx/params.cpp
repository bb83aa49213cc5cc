#include "kernels/ptx/params.h"

#include <cctype>
#include <cstring>

namespace ptxlm::ptx {

const char* param_type_name(ParamType t) {
  switch (t) {
    case ParamType::u32: return "u32";
    case ParamType::s32: return "s32";
    case ParamType::u64: return "u64";
    case ParamType::s64: return "s64";
    case ParamType::f32: return "f32";
    case ParamType::f64: return "f64";
    case ParamType::ptr: return "ptr";
  }
  return "?";
}

Type param_reg_type(ParamType t) {
  switch (t) {
    case ParamType::u32: return Type::u32;
    case ParamType::s32: return Type::s32;
    case ParamType::u64: return Type::u64;
    case ParamType::s64: return Type::s64;
    case ParamType::f32: return Type::f32;
    case ParamType::f64: return Type::f64;
    case ParamType::ptr: return Type::u64;
  }
  return Type::u64;
}

uint32_t param_size(ParamType t) { return type_bytes(param_reg_type(t)); }

ParamValue::ParamValue(float v) : type_(ParamType::f32) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  bits_ = u;
}

ParamValue::ParamValue(double v) : type_(ParamType::f64) { std::memcpy(&bits_, &v, 8); }

ParamPack::ParamPack(const ParamPack& o) : words_(o.words_), offsets_(o.offsets_), size_(o.size_) { repoint(); }

ParamPack& ParamPack::operator=(const ParamPack& o) {
  if (this != &o) {
    words_ = o.words_;
    offsets_ = o.offsets_;
    size_ = o.size_;
    repoint();
  }
  return *this;
}

void ParamPack::repoint() {
  ptrs_.clear();
  auto* base = reinterpret_cast<std::byte*>(words_.data());
  for (uint32_t off : offsets_) ptrs_.push_back(base + off);
}

static bool valid_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

ParamList& ParamList::add(std::string name, ParamType type) {
  if (!valid_identifier(name)) throw Error("param '" + name + "': not an identifier");
  for (const Param& p : params_)
    if (p.name == name) throw Error("param '" + name + "' declared twice");
  uint32_t sz = param_size(type);
  uint32_t off = 0;
  if (!params_.empty()) {
    const Param& last = params_.back();
    off = last.offset + param_size(last.type);
  }
  off = (off + sz - 1) / sz * sz;  // natural alignment, as in the .param space
  params_.push_back(Param{std::move(name), type, off});
  size_ = (off + sz + 7) / 8 * 8;
  return *this;
}

const Param& ParamList::find(std::string_view name) const {
  for (const Param& p : params_)
    if (p.name == name) return p;
  throw Error("no param named '" + std::string(name) + "'");
}

ParamPack ParamList::pack(std::initializer_list<ParamValue> values) const {
  return pack(std::vector<ParamValue>(values));
}

ParamPack ParamList::pack(const std::vector<ParamValue>& values) const {
  if (values.size() != params_.size())
    throw Error("pack: " + std::to_string(values.size()) + " arguments for " +
                std::to_string(params_.size()) + " params");
  ParamPack pk;
  pk.words_.assign(size_ / 8, 0);
  pk.size_ = size_;
  auto* base = reinterpret_cast<std::byte*>(pk.words_.data());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    if (values[i].type() != p.type)
      throw Error("pack: param '" + p.name + "' is " + param_type_name(p.type) + ", got " +
                  param_type_name(values[i].type()));
    uint64_t bits = values[i].bits();
    std::memcpy(base + p.offset, &bits, param_size(p.type));  // little-endian host
    pk.offsets_.push_back(p.offset);
  }
  pk.repoint();
  return pk;
}

void validate_geometry(std::string_view kernel, const LaunchGeometry& g) {
  auto fail = [&](const std::string& why) { throw Error(std::string(kernel) + ": launch geometry " + why); };
  if (g.grid.count() == 0 || g.block.count() == 0) fail("has an empty grid or block");
  if (g.block.count() > 1024) fail("has " + std::to_string(g.block.count()) + " threads per block (max 1024)");
  if (g.block.z > 64) fail("has block.z " + std::to_string(g.block.z) + " (max 64)");
  if (g.grid.y > 65535 || g.grid.z > 65535) fail("has grid.y/z over 65535");
  if (g.shared_bytes > 227 * 1024) fail("asks for " + std::to_string(g.shared_bytes) + " B dynamic shared (max 227 KiB)");
}

}  // namespace ptxlm::ptx
