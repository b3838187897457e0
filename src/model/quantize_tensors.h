// A model's matrices converted to another weight type while loading
// (`--quantize`, `kvlm convert --type`). Every converted matrix gets the one
// type asked for: llama.cpp's quantizer mixes types instead (output.weight
// and some FFN matrices in Q6_K for its Q4 types), so a file from here is a
// "pure" quantization, as llama-quantize --pure writes.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/dtype.h"
#include "model/gguf.h"

namespace kvlm {

// Whether `t` is converted to `type`: a 2-D or 3-D ".weight" (matrices,
// embeddings, expert stacks) whose rows hold whole blocks of `type`, except
// the MoE router (ffn_gate_inp), which llama.cpp keeps as it is.
bool converts_to(const GgufTensor& t, DType type);

// A file whose matrices (converts_to) are in `type` when it is set, whose
// F16/BF16 vectors (norms, biases) are F32 as llama.cpp's converter writes
// them, and whose other tensors point into `in` (kept alive by the result).
// general.file_type is not written: kvlm reads each tensor's own type.
// Precondition: `type` is a weight type (not Q8_K).
std::unique_ptr<GgufFile> convert_tensors(std::unique_ptr<GgufFile> in, std::optional<DType> type);

// "q8_0" -> kQ8_0 for --quantize / --type; throws Error(kInvalidArgument)
// listing the accepted names.
DType parse_weight_type(const std::string& name, bool floats_too);

}  // namespace kvlm
