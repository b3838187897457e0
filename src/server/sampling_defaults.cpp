#include "server/sampling_defaults.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"

namespace kvlm {
namespace {

// The key's value when it lies in [lo, hi]; a value outside is a warning.
std::optional<double> in_range(const Metadata& m, const std::string& key, double lo, double hi) {
  std::optional<double> v;
  try {
    v = m.get_float(key);  // integers too
  } catch (const Error& e) {
    log_warn("{}: not used as a default", e.what());
    return std::nullopt;
  }
  if (!v || (*v >= lo && *v <= hi)) return v;
  log_warn("the model's {} = {} is outside [{}, {}]: not used as a default", key, *v, lo, hi);
  return std::nullopt;
}

}  // namespace

SamplingDefaults SamplingDefaults::from_metadata(const Metadata& m) {
  SamplingDefaults d;
  if (auto v = in_range(m, "general.sampling.temp", 0, 2)) d.temperature = static_cast<float>(*v);
  if (auto v = in_range(m, "general.sampling.top_p", 1e-6, 1)) d.top_p = static_cast<float>(*v);
  if (auto v = in_range(m, "general.sampling.min_p", 0, 1)) d.min_p = static_cast<float>(*v);
  if (auto v = in_range(m, "general.sampling.penalty_repeat", 0.01, 10)) d.repetition_penalty = static_cast<float>(*v);
  if (auto v = in_range(m, "general.sampling.top_k", 0, 1 << 20)) d.top_k = static_cast<int32_t>(*v);
  return d;
}

std::string SamplingDefaults::describe() const {
  std::string s;
  auto add = [&s](const char* name, const auto& v) {
    if (v) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", name, *v);
  };
  add("temperature", temperature);
  add("top_p", top_p);
  add("top_k", top_k);
  add("min_p", min_p);
  add("repetition_penalty", repetition_penalty);
  return s;
}

void SamplingDefaults::apply(const openai::GenerationOptions::Given& given, SamplingParams& s) const {
  if (temperature && !given.temperature) s.temperature = *temperature;
  if (top_p && !given.top_p) s.top_p = *top_p;
  if (top_k && !given.top_k) s.top_k = *top_k;
  if (min_p && !given.min_p) s.min_p = *min_p;
  if (repetition_penalty && !given.repetition_penalty) s.repetition_penalty = *repetition_penalty;
}

}  // namespace kvlm
