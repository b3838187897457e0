#include "engine/fault_injection.h"

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"

namespace kvlm {
namespace {

int64_t parse_int(std::string_view key, std::string_view value, int64_t min) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < min)
    throw_error(ErrorCode::kInvalidArgument, "KVLM_FAULT: {}={} must be an integer of at least {}", key, value, min);
  return v;
}

FaultKind parse_kind(std::string_view value) {
  if (value == "bad_alloc") return FaultKind::kBadAlloc;
  if (value == "error") return FaultKind::kError;
  if (value == "delay") return FaultKind::kDelay;
  throw_error(ErrorCode::kInvalidArgument, "KVLM_FAULT: unknown kind '{}' (bad_alloc, error, delay)", value);
}

}  // namespace

FaultSpec parse_fault_spec(std::string_view text) {
  FaultSpec spec;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos)
      throw_error(ErrorCode::kInvalidArgument, "KVLM_FAULT: '{}' is not key=value", part);
    const std::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "kind") {
      spec.kind = parse_kind(value);
    } else if (key == "request") {
      spec.request = parse_int(key, value, 1);
    } else if (key == "every") {
      spec.every = parse_int(key, value, 1);
    } else if (key == "at") {
      spec.at = static_cast<int32_t>(parse_int(key, value, 0));
    } else if (key == "ms") {
      spec.delay_ms = static_cast<int32_t>(parse_int(key, value, 0));
    } else {
      throw_error(ErrorCode::kInvalidArgument, "KVLM_FAULT: unknown key '{}' (kind, request, every, at, ms)", key);
    }
  }
  return spec;
}

std::function<void(RequestId, int32_t)> fault_hook(const FaultSpec& spec) {
  return [spec](RequestId id, int32_t num_generated) {
    if (spec.kind == FaultKind::kDelay) {
      std::this_thread::sleep_for(std::chrono::milliseconds(spec.delay_ms));
      return;
    }
    const bool chosen = spec.request ? id.value() == *spec.request : id.value() % spec.every == 0;
    if (!chosen || num_generated != spec.at) return;
    if (spec.kind == FaultKind::kBadAlloc) throw std::bad_alloc();
    throw std::runtime_error(fmt::format("injected fault (KVLM_FAULT) in request {}", id.value()));
  };
}

std::function<void(RequestId, int32_t)> fault_hook_from_env() {
  const char* text = std::getenv("KVLM_FAULT");
  if (!text || !*text) return {};
  log_warn("KVLM_FAULT={}: faults will be injected into requests (a test setting)", text);
  return fault_hook(parse_fault_spec(text));
}

}  // namespace kvlm
