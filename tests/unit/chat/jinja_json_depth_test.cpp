// Converting JSON into template values is bounded: a value nested thousands
// of levels deep (a chat request's messages, tools or chat_template_kwargs)
// is refused with an error instead of overflowing the stack.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "chat/chat_template.h"
#include "chat/jinja/error.h"
#include "chat/jinja/json.h"

namespace kvlm {
namespace {

nlohmann::ordered_json nested(int depth) {
  nlohmann::ordered_json j = 1;
  for (int i = 0; i < depth; ++i) {
    nlohmann::ordered_json outer = nlohmann::ordered_json::array();
    outer.push_back(std::move(j));  // moved, not copied: building stays linear and flat
    j = std::move(outer);
  }
  return j;
}

TEST(JinjaJsonDepth, DeepValuesAreRefused) {
  EXPECT_NO_THROW(jinja::from_json(nested(100)));
  EXPECT_THROW(jinja::from_json(nested(20000)), jinja::RuntimeError);
}

TEST(JinjaJsonDepth, ChatTemplateInputsSayWhatIsTooDeep) {
  auto tmpl = ChatTemplate::parse("{{ messages[0].content }}");
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}, {"x", nested(5000)}}});
  try {
    tmpl->render(in);
    ADD_FAILURE() << "a 5000-level message rendered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("nested deeper than 128"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvlm
