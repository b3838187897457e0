// Inside model/: what both adapter readers (lora_load.cpp: GGUF, lora_peft.cpp:
// PEFT) share. Each reader turns its file into F32 pairs in GGUF's layout and
// hands them to one LoraBuilder, which checks them against the base and
// builds the LoraAdapter.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/lora.h"

namespace kvlm {

// A matrix of an adapter file as F32, row-major: [rows, cols].
struct LoraMatrix {
  std::vector<float> values;
  int64_t rows = 0;
  int64_t cols = 0;
};

class LoraBuilder {
 public:
  // `source` names the adapter in messages.
  LoraBuilder(std::string source, const GgufFile& base, const ModelConfig& config);

  // The pair adapting base tensor "blk.<layer>.<target>.weight"; `what` is the
  // adapter's own name for it (messages). Throws Error as load_lora lists:
  // a layer past the base's, a base tensor missing or of another shape,
  // A's rows (the rank) unlike B's columns, a pair given twice.
  void add(const std::string& what, int64_t layer, LoraTarget target, LoraMatrix a, LoraMatrix b, float scale);
  // A tensor or module kvlm cannot apply: finish() refuses them all at once.
  void refuse(std::string name) { refused_.push_back(std::move(name)); }

  // The adapter, A and B held in `dtype` and prepared by `backend`. Throws Error(kUnsupported)
  // naming the refused names, or when no pair was added.
  std::shared_ptr<const LoraAdapter> finish(const Backend& backend, DType dtype);

 private:
  struct Pending {
    int64_t layer;
    LoraTarget target;
    LoraMatrix a, b;
    float scale;
  };
  std::string source_;
  const GgufFile& base_;
  const ModelConfig& config_;
  std::vector<Pending> pairs_;
  std::vector<std::string> refused_;
};

// "blk.N.<target>.weight" -> (N, target) when kvlm applies adapters to that
// target on this base (lora_supported_targets); nullopt otherwise. The layer
// is not checked against the base here (LoraBuilder::add does).
std::optional<std::pair<int64_t, LoraTarget>> lora_base_tensor(const std::string& gguf_name,
                                                              const ModelConfig& config);

// lora_peft.cpp: a PEFT folder (load_lora's first form).
std::shared_ptr<const LoraAdapter> load_peft_lora(const std::string& dir, const GgufFile& base,
                                                  const ModelConfig& config, const Backend& backend, float user_scale,
                                                  DType dtype);

}  // namespace kvlm
