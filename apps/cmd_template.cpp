// kvlm template (-m MODEL | --template-file F) --messages FILE.json [--tools TOOLS.json]
//               [--add-generation-prompt] [--bos-token S] [--eos-token S]
//
// Renders a chat template over a conversation and prints the prompt exactly
// as the model would receive it (no trailing newline added). The template
// comes from the model's `tokenizer.chat_template` metadata unless
// --template-file is given; BOS/EOS default to the model's own tokens.
// FILE.json is an OpenAI-style messages array, or a request-like object
// {"messages": [...], "tools": [...], ...} whose other keys become template
// variables. With tools (--tools, an OpenAI `tools` array, or "tools" in
// FILE.json) the messages are prepared as the server prepares a request's
// (chat/tool_prompt.h): tool-call arguments as objects, and for a template
// that renders no tools, their description in a system prompt.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "chat/chat_template.h"
#include "chat/tool_prompt.h"
#include "common/error.h"
#include "model/gguf.h"
#include "model/hf_checkpoint.h"
#include "wire/openai/json_text.h"

namespace kvlm::apps {

namespace {

std::string read_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorCode::kNotFound, "cannot read {} '{}': {}", what, path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text of token `key` (an id in the metadata) from the model's vocabulary, or "" if unset.
std::string special_token(const Metadata& meta, const std::vector<std::string>& tokens, std::string_view key) {
  std::optional<int64_t> id = meta.get_int(key);
  if (!id) return "";
  if (*id < 0 || static_cast<size_t>(*id) >= tokens.size()) {
    throw_error(ErrorCode::kCorrupt, "metadata '{}' = {} is outside the vocabulary of {} tokens", key, *id,
                tokens.size());
  }
  return tokens[static_cast<size_t>(*id)];
}

// The template's source (--template-file, else the model's) and BOS/EOS
// texts (the flags, else the model's tokens) into `in`.
std::string read_template_source(const std::string& model_path, const std::string& template_path,
                                 const std::optional<std::string>& bos_token,
                                 const std::optional<std::string>& eos_token, ChatTemplateInputs& in) {
  if (model_path.empty() && template_path.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "give a model (-m) or a template file (--template-file)");
  }
  std::string source;
  if (!template_path.empty()) source = read_file(template_path, "template file");
  if (!model_path.empty()) {
    auto gguf = open_model_file(model_path);
    const Metadata& meta = gguf->metadata();
    if (template_path.empty()) {
      std::optional<std::string> tmpl = meta.get_string("tokenizer.chat_template");
      if (!tmpl) {
        throw_error(ErrorCode::kNotFound,
                    "model '{}' has no tokenizer.chat_template in its metadata; pass --template-file", model_path);
      }
      source = std::move(*tmpl);
    }
    std::vector<std::string> tokens = meta.get_string_array("tokenizer.ggml.tokens").value_or(std::vector<std::string>{});
    in.bos_token = special_token(meta, tokens, "tokenizer.ggml.bos_token_id");
    in.eos_token = special_token(meta, tokens, "tokenizer.ggml.eos_token_id");
  }
  if (bos_token) in.bos_token = *bos_token;
  if (eos_token) in.eos_token = *eos_token;
  return source;
}

// The messages file: a messages array, or an object whose "messages" are
// the messages and whose other keys become template variables.
void read_messages(const std::string& messages_path, ChatTemplateInputs& in) {
  nlohmann::ordered_json doc;
  try {
    // The server's parser: the same nesting limit and number checks as a request body.
    doc = openai::parse_json(read_file(messages_path, "messages file"));
  } catch (const Error& e) {
    throw_error(ErrorCode::kInvalidArgument, "messages file '{}': {}", messages_path, e.what());
  }
  if (doc.is_object() && doc.contains("messages")) {
    in.messages = doc["messages"];
    doc.erase("messages");
    in.extra = std::move(doc);
  } else {
    in.messages = std::move(doc);
  }
  if (!in.messages.is_array()) {
    throw_error(ErrorCode::kInvalidArgument, "messages file '{}' must hold a JSON array of messages", messages_path);
  }
}

// --tools replaces any "tools" the messages file gave.
void read_tools(const std::string& tools_path, ChatTemplateInputs& in) {
  try {
    in.extra["tools"] = openai::parse_json(read_file(tools_path, "tools file"));
  } catch (const Error& e) {
    throw_error(ErrorCode::kInvalidArgument, "tools file '{}': {}", tools_path, e.what());
  }
  if (!in.extra["tools"].is_array())
    throw_error(ErrorCode::kInvalidArgument, "tools file '{}' must hold a JSON array of tools", tools_path);
}

// The prompt as the server renders it: with tools, the messages prepared
// as a request's (chat/tool_prompt.h).
std::string render_prompt(const std::string& source, ChatTemplateInputs& in) {
  const auto tmpl = ChatTemplate::parse(source);
  if (in.extra.contains("tools") && in.extra["tools"].is_array()) {
    ToolPromptMessages m = tool_prompt_messages(source, in.messages, in.extra["tools"], /*describe_tools=*/true);
    in.messages = std::move(m.messages);
    if (m.without_system) {
      // A template that refuses a system role gets the description in the first user message.
      try {
        return tmpl->render(in);
      } catch (const Error&) {
        in.messages = std::move(*m.without_system);
      }
    }
  }
  return tmpl->render(in);
}

}  // namespace

int cmd_template(int argc, char** argv) {
  CLI::App app{"Render a chat template over a messages file", "kvlm template"};
  std::string model_path, template_path, messages_path, tools_path;
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token, eos_token;
  app.add_option("-m,--model", model_path, "GGUF model whose tokenizer.chat_template and BOS/EOS are used");
  app.add_option("--template-file", template_path, "Jinja chat template file (overrides the model's)");
  app.add_option("--messages", messages_path, "JSON file: an OpenAI-style messages array")->required();
  app.add_option("--tools", tools_path, "JSON file: an OpenAI-style tools array, rendered as the server does");
  app.add_flag("--add-generation-prompt", add_generation_prompt, "end with the assistant turn's opening");
  app.add_option("--bos-token", bos_token, "BOS text (default: the model's BOS token, or empty)");
  app.add_option("--eos-token", eos_token, "EOS text (default: the model's EOS token, or empty)");
  KVLM_PARSE(app, argc, argv);

  ChatTemplateInputs in;
  in.add_generation_prompt = add_generation_prompt;
  const std::string source = read_template_source(model_path, template_path, bos_token, eos_token, in);
  read_messages(messages_path, in);
  if (!tools_path.empty()) read_tools(tools_path, in);
  const std::string prompt = render_prompt(source, in);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace kvlm::apps
