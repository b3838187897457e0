// The model's default sampling (general.sampling.*): read in range, and
// given to exactly the fields a request left unset.
#include <gtest/gtest.h>

#include "common/metadata.h"
#include "server/sampling_defaults.h"
#include "wire/openai/protocol.h"

namespace kvlm {
namespace {

TEST(SamplingDefaults, FillOnlyWhatTheRequestLeftUnset) {
  Metadata m;
  m.set("general.sampling.temp", meta_f32(0.6f));
  m.set("general.sampling.top_p", meta_f32(0.95f));
  m.set("general.sampling.top_k", meta_i32(20));
  const SamplingDefaults d = SamplingDefaults::from_metadata(m);
  EXPECT_EQ(d.describe(), "temperature 0.6, top_p 0.95, top_k 20");

  auto parsed = openai::parse_completion_request(openai::Json{{"prompt", "x"}, {"temperature", 1.2}, {"min_p", 0.1}});
  auto& r = std::get<openai::CompletionRequest>(parsed);
  d.apply(r.options.given, r.options.sampling);
  EXPECT_FLOAT_EQ(r.options.sampling.temperature, 1.2f);  // the request's
  EXPECT_FLOAT_EQ(r.options.sampling.top_p, 0.95f);       // the model's
  EXPECT_EQ(r.options.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(r.options.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.options.sampling.repetition_penalty, 1.f);  // neither: OpenAI's
}

TEST(SamplingDefaults, ValuesOutOfRangeOrOfAnotherTypeAreLeftOut) {
  Metadata m;
  m.set("general.sampling.temp", meta_f32(7.f));
  m.set("general.sampling.top_p", meta_string("high"));
  m.set("general.sampling.min_p", meta_f32(0.05f));
  const SamplingDefaults d = SamplingDefaults::from_metadata(m);
  EXPECT_FALSE(d.temperature);
  EXPECT_FALSE(d.top_p);
  EXPECT_EQ(d.min_p, 0.05f);
  EXPECT_TRUE(SamplingDefaults::from_metadata(Metadata{}).empty());
}

}  // namespace
}  // namespace kvlm
