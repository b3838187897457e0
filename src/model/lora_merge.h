// One adapter merged into its base (`kvlm convert --merge-lora`): for a
// deployment that serves a single adapter, a plain model whose adapted
// matrices are W + scale * B A, run without any LoRA cost.
#pragma once

#include <memory>

#include "model/gguf.h"
#include "model/lora.h"

namespace kvlm {

// A file built in memory with `base`'s metadata (less general.file_type:
// the merged matrices change type) and tensors, where every matrix an
// adapter pair adapts is W + scale * B A in F32 (W dequantized, in the
// base's own layout: load_lora puts the pairs in it), and every other
// tensor points into `base`, which the result keeps alive. Precondition:
// `adapter` was loaded against `base` (load_lora checked the shapes).
std::unique_ptr<GgufFile> merge_lora(std::unique_ptr<GgufFile> base, const LoraAdapter& adapter);

}  // namespace kvlm
