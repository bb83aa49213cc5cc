// A StepBackend that forwards every call to another: tests derive from it
// to watch the steps and page copies a cpu::Batcher asks of a backend.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>

#include "engine/step_backend.h"

namespace ptxlm::test {

class ForwardingStep : public StepBackend {
public:
  explicit ForwardingStep(std::unique_ptr<StepBackend> b) : b_(std::move(b)) {}
  std::string description() const override { return b_->description(); }
  DeviceInfo device_info() const override { return b_->device_info(); }
  uint32_t n_ctx() const override { return b_->n_ctx(); }
  uint32_t n_vocab() const override { return b_->n_vocab(); }
  void eval_batch(std::span<const TokenId> t, uint32_t pos, float* l, uint32_t n) override { b_->eval_batch(t, pos, l, n); }
  uint32_t max_batch() const override { return b_->max_batch(); }
  void step(std::span<const SeqStep> batch) override { b_->step(batch); }
  void copy_page(uint32_t from, uint32_t to, uint32_t positions) override { b_->copy_page(from, to, positions); }
  KvPages kv_pages() const override { return b_->kv_pages(); }
  uint32_t max_step_tokens() const override { return b_->max_step_tokens(); }

private:
  std::unique_ptr<StepBackend> b_;
};

}  // namespace ptxlm::test
