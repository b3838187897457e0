// llama.cpp's slot routes (docs/slots.md), over kvlm's slots
// (slots.h) and prefix cache:
//   GET  /slots                        one object per slot, in llama.cpp's shape
//   POST /slots/{id}?action=save       {"filename"}: the slot's tokens and the KV of
//                                      their cached blocks into --slot-save-path
//   POST /slots/{id}?action=restore    {"filename"}: those blocks back into the
//                                      prefix cache, the tokens into the slot
//   POST /slots/{id}?action=erase      the slot forgets its tokens, the prefix cache
//                                      the blocks of theirs no request holds
// The engine's part runs on its thread between steps (engine_slots.cpp).
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/engine.h"
#include "kvstore/disk_files.h"
#include "kvstore/slot_file.h"
#include "server/routes.h"
#include "wire/openai/json_text.h"

namespace kvlm {

using openai::Json;

namespace {

// How long a handler waits for the engine thread (a step in progress first).
constexpr auto kEngineWait = std::chrono::seconds(60);

template <typename T>
T wait_for_engine(std::future<T> f) {
  if (f.wait_for(kEngineWait) != std::future_status::ready)
    throw_error(ErrorCode::kUnavailable, "the engine did not get to the slot within {} s; try again",
                std::chrono::duration_cast<std::chrono::seconds>(kEngineWait).count());
  return f.get();  // rethrows the engine's Error
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The slot named by the path, or nullopt after answering 400.
std::optional<int32_t> slot_id(const ServerContext& ctx, const http::Request& req, http::Response& res) {
  const std::string& digits = req.matches.at(1);
  const int32_t n = ctx.slots->size();
  if (digits.size() > 9 || std::stol(digits) >= n) {
    send_error(res, {400, fmt::format("Invalid slot ID {}: this server has slots 0 to {} (--max-seqs)", digits, n - 1),
                     std::string("id_slot")});
    return std::nullopt;
  }
  return static_cast<int32_t>(std::stol(digits));
}

// A plain file name inside --slot-save-path: no folder, no way out of it.
bool plain_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name.find("..") != std::string::npos) return false;
  for (char c : name)
    if (c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return false;
  return true;
}

// The body's "filename" under --slot-save-path, or nullopt after answering 400.
std::optional<std::string> slot_file_path(const ServerContext& ctx, const http::Request& req, http::Response& res) {
  if (ctx.slot_save_path.empty()) {
    send_error(res, {400, "saving and restoring slots needs a folder for their files: start the server with "
                          "--slot-save-path DIR", std::nullopt});
    return std::nullopt;
  }
  const std::optional<Json> body = parse_body(req, res);
  if (!body) return std::nullopt;
  if (!body->is_object() || !body->contains("filename") || !(*body)["filename"].is_string()) {
    send_error(res, {400, "'filename' must be a string", std::string("filename")});
    return std::nullopt;
  }
  const std::string name = (*body)["filename"].get<std::string>();
  if (!plain_file_name(name)) {
    send_error(res, {400, "'filename' must be a plain file name (no '/', no '..'), at most 255 bytes",
                     std::string("filename")});
    return std::nullopt;
  }
  return name;
}

// `bytes` into `path`, whole or not at all: a temporary file renamed over it.
void write_file(const std::string& path, const std::string& bytes) {
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, kPrivateFileMode);
  if (fd < 0) throw_error(ErrorCode::kInternal, "cannot write {}: {}", temp, std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      throw_error(ErrorCode::kInternal, "cannot write {}: {}", temp, std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw_error(ErrorCode::kInternal, "cannot write {}: {}", path, std::strerror(err));
  }
}

std::string read_file(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorCode::kNotFound, "no slot file '{}' in --slot-save-path", name);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw_error(ErrorCode::kInternal, "cannot read {}: {}", path, std::strerror(errno));
  return bytes;
}

void save_slot(ServerContext& ctx, int32_t id, const std::string& name, http::Response& res) {
  const auto start = std::chrono::steady_clock::now();
  const SlotTable::Held held = ctx.slots->get(id).held;
  SlotFile file;
  file.block_size = ctx.engine.config().block_size;
  file.tokens = held.tokens;
  file.extra_key = held.extra_key;
  file.records = wait_for_engine(ctx.engine.export_prefix(held.tokens, held.extra_key));
  const std::string bytes = encode_slot_file(ctx.slot_namespace, file);
  write_file(ctx.slot_save_path + "/" + name, bytes);
  const auto num_kv_tokens = static_cast<int64_t>(file.records.size()) * file.block_size;
  log_info("server: slot {} saved to {}: {} tokens, KV of {} ({} bytes)", id, name, file.tokens.size(), num_kv_tokens,
           bytes.size());
  const Json answer = {{"id_slot", id},
                       {"filename", name},
                       {"n_saved", file.tokens.size()},
                       {"n_written", bytes.size()},
                       {"n_saved_kv_tokens", num_kv_tokens},
                       {"timings", {{"save_ms", ms_since(start)}}}};
  res.set_content(openai::dump_json(answer), "application/json");
}

void restore_slot(ServerContext& ctx, int32_t id, const std::string& name, http::Response& res) {
  const auto start = std::chrono::steady_clock::now();
  const std::string bytes = read_file(ctx.slot_save_path + "/" + name, name);
  SlotFile file = decode_slot_file(bytes, ctx.slot_namespace);
  const auto num_kv_tokens = static_cast<int64_t>(file.records.size()) * file.block_size;
  wait_for_engine(ctx.engine.import_prefix(std::move(file.records)));
  const auto num_tokens = static_cast<int64_t>(file.tokens.size());
  ctx.slots->hold(id, {std::move(file.tokens), file.extra_key});
  log_info("server: slot {} restored from {}: {} tokens, KV of {}", id, name, num_tokens, num_kv_tokens);
  const Json answer = {{"id_slot", id},
                       {"filename", name},
                       {"n_restored", num_tokens},
                       {"n_read", bytes.size()},
                       {"n_restored_kv_tokens", num_kv_tokens},
                       {"timings", {{"restore_ms", ms_since(start)}}}};
  res.set_content(openai::dump_json(answer), "application/json");
}

void erase_slot(ServerContext& ctx, int32_t id, http::Response& res) {
  const SlotTable::Held held = ctx.slots->forget(id);
  const int32_t num_blocks = wait_for_engine(ctx.engine.forget_prefix(held.tokens, held.extra_key));
  log_info("server: slot {} erased: {} tokens, {} cached blocks dropped", id, held.tokens.size(), num_blocks);
  const Json answer = {{"id_slot", id}, {"n_erased", held.tokens.size()}, {"n_erased_blocks", num_blocks}};
  res.set_content(openai::dump_json(answer), "application/json");
}

}  // namespace

void handle_slots(ServerContext& ctx, const http::Request& req, http::Response& res) {
  const std::vector<SlotTable::View> slots = ctx.slots->snapshot();
  std::vector<Engine::PrefixKey> prefixes;
  for (const SlotTable::View& v : slots) prefixes.push_back({v.held.tokens, v.held.extra_key});
  const std::vector<int32_t> cached = wait_for_engine(ctx.engine.cached_prefix_tokens(std::move(prefixes)));
  const bool speculative = ctx.engine.config().speculative.mode != SpeculateMode::kOff;
  Json out = Json::array();
  bool any_idle = false;
  for (size_t i = 0; i < slots.size(); ++i) {
    const SlotTable::View& v = slots[i];
    any_idle = any_idle || !v.task;
    out.push_back({{"id", v.id},
                   {"id_task", v.task ? static_cast<int64_t>(v.task->value()) : -1},
                   {"n_ctx", ctx.engine.max_model_len()},
                   {"speculative", speculative},
                   {"is_processing", v.task.has_value()},
                   {"n_tokens", v.held.tokens.size()},
                   {"n_cached_tokens", cached[i]}});
  }
  // llama.cpp's ?fail_on_no_slot: 503 when every slot is busy.
  if (req.has_param("fail_on_no_slot") && !any_idle)
    return send_error(res, {503, "no slot available", std::nullopt, "unavailable_error"});
  res.set_content(openai::dump_json(out), "application/json");
}

void handle_slot_action(ServerContext& ctx, const http::Request& req, http::Response& res) {
  const std::optional<int32_t> id = slot_id(ctx, req, res);
  if (!id) return;
  const std::string action = req.get_param_value("action");
  if (action == "erase") return erase_slot(ctx, *id, res);
  if (action != "save" && action != "restore")
    return send_error(res, {400, fmt::format("unknown action '{}': save, restore or erase", action),
                            std::string("action")});
  const std::optional<std::string> name = slot_file_path(ctx, req, res);
  if (!name) return;
  if (action == "save") return save_slot(ctx, *id, *name, res);
  restore_slot(ctx, *id, *name, res);
}

}  // namespace kvlm
