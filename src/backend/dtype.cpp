#include "backend/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace kvlm {
namespace {

constexpr std::array<DTypeInfo, 8> kInfos = {{
    {"F32", 1, 4, 0},
    {"F16", 1, 2, 1},
    {"BF16", 1, 2, 30},
    {"Q8_0", 32, 34, 8},
    {"Q4_0", 32, 18, 2},
    {"Q4_K", 256, 144, 12},
    {"Q6_K", 256, 210, 14},
    {"Q8_K", 256, 292, 15},
}};

}  // namespace

const DTypeInfo& dtype_info(DType t) { return kInfos[static_cast<size_t>(t)]; }

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) {
  for (size_t i = 0; i < kInfos.size(); ++i) {
    if (static_cast<DType>(i) == DType::kQ8_K) continue;  // never a weight type
    if (kInfos[i].ggml_type == ggml_type) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (size_t i = 0; i < kInfos.size(); ++i)
    if (kInfos[i].name == upper) return static_cast<DType>(i);
  return std::nullopt;
}

std::string_view ggml_type_name(uint32_t ggml_type) {
  // ggml's enum ggml_type, for naming types kvlm does not support.
  static constexpr std::array<std::string_view, 40> kNames = {
      "F32",  "F16",  "Q4_0", "Q4_1", "(4)",  "(5)",   "Q5_0",   "Q5_1",  "Q8_0",    "Q8_1",
      "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32",   "I64",   "F64",     "IQ1_M",
      "BF16", "(31)", "(32)", "(33)", "TQ1_0", "TQ2_0", "(36)", "(37)", "(38)", "MXFP4"};
  if (ggml_type < kNames.size()) return kNames[ggml_type];
  return "unknown";
}

}  // namespace kvlm
