// Shared scaffolding of the Jinja interpreter tests: a table row, rendering a
// source over a JSON context, the error a render fails with, and one
// parameterized suite per table.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "chat/chat_template.h"

namespace kvlm::jinja_test {

struct Case {
  const char* name;
  const char* source;
  const char* context;  // JSON object of template variables
  const char* expected;
};

inline std::string render(const char* source, const char* context) {
  ChatTemplateInputs in;
  in.extra = nlohmann::ordered_json::parse(context);
  return ChatTemplate::parse(source)->render(in);
}

// The message of the kInvalidArgument error rendering fails with; a render
// that succeeds fails the calling test.
inline std::string error_of(const char* source, const char* context = "{}") {
  try {
    std::string out = render(source, context);
    ADD_FAILURE() << "rendered: " << out;
    return "";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
}

template <typename T>
std::string case_name(const ::testing::TestParamInfo<T>& info) {
  return info.param.name;
}

}  // namespace kvlm::jinja_test

// A suite whose every row of `table` (Case[]) renders to its expected text.
#define KVLM_JINJA_RENDER_SUITE(Suite, table)                                                       \
  class Suite : public ::testing::TestWithParam<::kvlm::jinja_test::Case> {};                     \
  TEST_P(Suite, Renders) {                                                                        \
    EXPECT_EQ(::kvlm::jinja_test::render(GetParam().source, GetParam().context), GetParam().expected); \
  }                                                                                               \
  INSTANTIATE_TEST_SUITE_P(Jinja, Suite, ::testing::ValuesIn(table),                              \
                           ::kvlm::jinja_test::case_name<::kvlm::jinja_test::Case>)
