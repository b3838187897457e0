#include "common/sampling_params.h"

#include <cmath>

#include "common/error.h"

namespace kvlm {

void SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.f || temperature > 100.f)
    throw_error(ErrorCode::kInvalidArgument, "temperature {} must be in [0, 100]", temperature);
  if (!(top_p > 0.f && top_p <= 1.f))
    throw_error(ErrorCode::kInvalidArgument, "top_p {} must be in (0, 1]", top_p);
  if (!(min_p >= 0.f && min_p <= 1.f))
    throw_error(ErrorCode::kInvalidArgument, "min_p {} must be in [0, 1]", min_p);
  if (!(repetition_penalty > 0.f && repetition_penalty <= 10.f))
    throw_error(ErrorCode::kInvalidArgument, "repetition penalty {} must be in (0, 10]", repetition_penalty);
  if (repeat_last_n < 0)
    throw_error(ErrorCode::kInvalidArgument, "repeat_last_n {} must be >= 0", repeat_last_n);
  if (!(frequency_penalty >= -2.f && frequency_penalty <= 2.f))
    throw_error(ErrorCode::kInvalidArgument, "frequency_penalty {} must be in [-2, 2]", frequency_penalty);
  if (!(presence_penalty >= -2.f && presence_penalty <= 2.f))
    throw_error(ErrorCode::kInvalidArgument, "presence_penalty {} must be in [-2, 2]", presence_penalty);
  for (const auto& [id, bias] : logit_bias)
    if (!std::isfinite(bias) || bias < -100.f || bias > 100.f)
      throw_error(ErrorCode::kInvalidArgument, "logit_bias {} for token {} must be in [-100, 100]", bias, id);
}

}  // namespace kvlm
