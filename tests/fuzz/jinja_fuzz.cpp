// libFuzzer target: chat templates, parsed and rendered. Input: template
// source, optionally followed by a NUL byte and the JSON of `messages` (read
// with the server's parse_json, as a request's messages are); without one the
// template renders a fixed four-message chat. Any template must parse and
// render or throw kvlm::Error, never crash, overflow the stack or leak.
//
//   scripts/fuzz.sh 60
//   build-fuzz/fuzz/kvlm_fuzz_jinja -dict=tests/fuzz/jinja.dict CORPUS_DIR
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string_view>

#include "common/error.h"
#include "wire/openai/json_text.h"
// The Jinja interpreter's public face; the only include to change when it moves.
#include "chat/chat_template.h"

namespace {

nlohmann::ordered_json default_messages() {
  return nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "Bye"}])");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  kvlm::ChatTemplateInputs in;
  if (nul == std::string_view::npos) {
    in.messages = default_messages();
  } else {
    try {
      in.messages = kvlm::openai::parse_json(input.substr(nul + 1));
    } catch (const kvlm::Error&) {
      return 0;
    }
  }
  in.add_generation_prompt = size & 1;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra = nlohmann::ordered_json{{"enable_thinking", (size & 2) != 0}};
  std::tm now{};
  now.tm_year = 124;
  now.tm_mon = 6;
  now.tm_mday = 26;
  in.now = now;
  try {
    auto tmpl = kvlm::ChatTemplate::parse(input.substr(0, nul));
    (void)tmpl->render(in);
  } catch (const kvlm::Error&) {
  }
  return 0;
}
