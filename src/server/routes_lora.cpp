// LoRA adapters over HTTP (docs/lora.md): their entries in /v1/models, and
// vLLM's POST /v1/load_lora_adapter and /v1/unload_lora_adapter, which load
// and unload an adapter by name at run time (with --allow-runtime-lora).
#include <ctime>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/engine.h"
#include "model/lora.h"
#include "server/routes.h"
#include "wire/openai/json_text.h"

namespace kvlm {

using openai::Json;

namespace {

// A string field of the body, or nullopt after answering 400 naming it.
std::optional<std::string> name_field(const Json& body, const char* field, http::Response& res) {
  if (!body.is_object() || !body.contains(field) || !body[field].is_string() || body[field].get<std::string>().empty()) {
    send_error(res, {400, fmt::format("'{}' must be a non-empty string", field), std::string(field)});
    return std::nullopt;
  }
  return body[field].get<std::string>();
}

bool refuse_unless_runtime_loading(const ServerContext& ctx, http::Response& res) {
  if (ctx.load_lora) return false;
  send_error(res, {403, "loading and unloading LoRA adapters at run time is off; start the server with "
                        "--allow-runtime-lora", std::nullopt});
  return true;
}

}  // namespace

Json lora_model_json(const ServerContext& ctx, const LoraInfo& lora) {
  return Json{{"id", lora.name},           {"object", "model"},
              {"created", lora.created},   {"owned_by", "kvlm"},
              {"root", lora.path},         {"parent", ctx.model_names[0]},
              {"max_model_len", ctx.engine.max_model_len()}};
}

void handle_load_lora(ServerContext& ctx, const http::Request& req, http::Response& res) {
  if (refuse_unless_runtime_loading(ctx, res)) return;
  auto body = parse_body(req, res);
  if (!body) return;
  const std::optional<std::string> name = name_field(*body, "lora_name", res);
  if (!name) return;
  const std::optional<std::string> path = name_field(*body, "lora_path", res);
  if (!path) return;
  for (const std::string& base : ctx.model_names)
    if (base == *name)
      return send_error(res, {400, fmt::format("'{}' is the base model's name", *name), std::string("lora_name")});
  try {
    if (ctx.loras->find(*name))
      throw_error(ErrorCode::kInvalidArgument, "a LoRA adapter named '{}' is loaded already", *name);
    std::shared_ptr<const LoraAdapter> adapter = ctx.load_lora(*path);
    ctx.loras->add({*name, *path, adapter, static_cast<int64_t>(std::time(nullptr))});
    log_info("server: LoRA adapter '{}' loaded from {} ({:.1f} MiB, rank {})", *name, *path,
             adapter->num_bytes / 1048576.0, adapter->max_rank);
  } catch (const Error& e) {
    const int status = e.code() == ErrorCode::kNotFound ? 404 : 400;
    return send_error(res, {status, e.what(), std::string("lora_path")});
  }
  res.set_content(fmt::format("Success: LoRA adapter '{}' added successfully.", *name), "text/plain");
}

void handle_unload_lora(ServerContext& ctx, const http::Request& req, http::Response& res) {
  if (refuse_unless_runtime_loading(ctx, res)) return;
  auto body = parse_body(req, res);
  if (!body) return;
  const std::optional<std::string> name = name_field(*body, "lora_name", res);
  if (!name) return;
  switch (ctx.loras->remove(*name)) {
    case LoraRegistry::Removal::kUnknown:
      return send_error(res, {404, fmt::format("The lora adapter '{}' cannot be found.", *name),
                              std::string("lora_name")});
    case LoraRegistry::Removal::kInUse:
      return send_error(res, {409, fmt::format("LoRA adapter '{}' is in use by running requests; unload it when "
                                               "they are done", *name), std::string("lora_name")});
    case LoraRegistry::Removal::kRemoved:
      break;
  }
  log_info("server: LoRA adapter '{}' unloaded", *name);
  res.set_content(fmt::format("Success: LoRA adapter '{}' removed successfully.", *name), "text/plain");
}

}  // namespace kvlm
