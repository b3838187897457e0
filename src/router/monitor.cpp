#include "router/monitor.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "kv/block_hash.h"
#include "router/sse.h"

namespace kvlm::router {
namespace {

using Ms = std::chrono::milliseconds;

// Load lines come at least every second: this much silence is a broken stream.
constexpr Ms kEventsSilence{5000};
constexpr Ms kEventsRead{200};
constexpr Ms kEventsOffRetry{30000};

std::vector<BlockHash> parse_hashes(const Json& list) {
  std::vector<BlockHash> out;
  if (!list.is_array()) return out;
  out.reserve(list.size());
  for (const Json& h : list)
    if (h.is_string())
      if (auto b = block_hash_from_hex(h.get_ref<const std::string&>())) out.push_back(*b);
  return out;
}

WorkerLoad load_of(const Json& j, bool from_status) {
  WorkerLoad l;
  l.num_running = j.value(from_status ? "requests_running" : "running", 0);
  l.num_waiting = j.value(from_status ? "requests_waiting" : "waiting", 0);
  l.num_pending_tokens = j.value("pending_tokens", int64_t{0});
  l.num_kv_blocks_total = j.value("kv_blocks_total", 0);
  l.num_kv_blocks_free = from_status ? l.num_kv_blocks_total - j.value("kv_blocks_used", 0) : j.value("kv_blocks_free", 0);
  return l;
}

// A load line's adapters: name -> identity (32 hex digits; others are skipped).
std::map<std::string, Hash128> loras_of(const Json& j) {
  std::map<std::string, Hash128> out;
  for (const auto& [name, hex] : j.items())
    if (hex.is_string())
      if (const std::optional<BlockHash> h = block_hash_from_hex(hex.get<std::string>())) out[name] = h->value;
  return out;
}

// A status's model names (strings only).
std::set<std::string> models_of(const Json& list) {
  std::set<std::string> out;
  for (const Json& name : list)
    if (name.is_string()) out.insert(name.get<std::string>());
  return out;
}

}  // namespace

WorkerMonitor::WorkerMonitor(RouterContext& ctx, std::shared_ptr<Worker> worker)
    : ctx_(ctx), worker_(std::move(worker)), health_link_(worker_->link.address(), 2),
      events_link_(worker_->link.address(), 1) {
  health_thread_ = std::thread([this] { health_loop(); });
  events_thread_ = std::thread([this] { events_loop(); });
}

WorkerMonitor::~WorkerMonitor() {
  stop_ = true;
  cv_.notify_all();
  health_link_.abort_all();
  events_link_.abort_all();
  health_thread_.join();
  events_thread_.join();
}

bool WorkerMonitor::pause(Ms d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, d, [&] { return stop_.load(); });
  return !stop_;
}

void WorkerMonitor::health_loop() {
  while (!stop_) {
    check_health();
    if (!pause(ctx_.config.health.interval)) return;
  }
}

void WorkerMonitor::check_health() {
  const Ms timeout = ctx_.config.health.timeout;
  UpstreamTimeouts t;
  t.connect = t.send = t.head = timeout;
  try {
    UpstreamExchange x(health_link_, upstream_request(ctx_, "GET", "/v1/status", ""), t);
    const std::string body = x.read_all(timeout);
    if (x.status() == 401 || x.status() == 403)
      return ctx_.workers.set_health(*worker_, WorkerState::kDown,
                                     "it refuses the router's key to its /v1/status (set --worker-api-key)");
    if (x.status() != 200)
      return ctx_.workers.set_health(*worker_, WorkerState::kDown, fmt::format("/v1/status answered {}", x.status()));
    const Json status = Json::parse(body, nullptr, false);
    if (!status.is_object())
      return ctx_.workers.set_health(*worker_, WorkerState::kDown, "/v1/status is not JSON");
    const bool draining = status.value("draining", false);
    ctx_.workers.set_health(*worker_, draining ? WorkerState::kDraining : WorkerState::kUp, "");
    std::lock_guard lock(ctx_.workers.mu());
    worker_->status = status;
    if (!worker_->load_from_events) worker_->load = load_of(status, /*from_status=*/true);
    if (const auto it = status.find("models"); it != status.end() && it->is_array()) worker_->models = models_of(*it);
  } catch (const Error& e) {
    if (!stop_) ctx_.workers.set_health(*worker_, WorkerState::kDown, e.what());
  }
}

void WorkerMonitor::events_loop() {
  Ms backoff{100};
  while (!stop_) {
    bool up;
    {
      std::lock_guard lock(ctx_.workers.mu());
      up = worker_->state != WorkerState::kDown;
    }
    if (up) read_events();
    {
      std::lock_guard lock(ctx_.workers.mu());
      worker_->kv_events_live = false;
      worker_->load_from_events = false;
    }
    if (!pause(warned_events_off_ ? kEventsOffRetry : backoff)) return;
    backoff = std::min(backoff * 2, Ms(2000));
  }
}

void WorkerMonitor::read_events() {
  std::string target = "/v1/kv/events";
  {
    std::lock_guard lock(ctx_.workers.mu());
    const Worker& w = *worker_;
    // Back on the same process: go on after the last batch, no snapshot.
    if (!need_snapshot_ && !w.instance.empty() && w.kv.seq())
      target += fmt::format("?instance={}&since={}", w.instance, *w.kv.seq());
  }
  UpstreamTimeouts t;
  t.connect = t.head = ctx_.config.health.timeout;
  try {
    UpstreamExchange x(events_link_, upstream_request(ctx_, "GET", target, ""), t);
    if (x.status() == 404) {
      // A model host's workers route by model and load: nothing to warn of.
      if (!warned_events_off_ && !ctx_.config.model_host)
        log_warn("router: worker {} publishes no KV events (start it with --kv-events): routed by load only",
                 worker_->url());
      warned_events_off_ = true;
      return;
    }
    if (x.status() != 200) return;
    warned_events_off_ = false;
    SseReader sse;
    auto last = Clock::now();
    while (!stop_) {
      std::string bytes;
      const auto r = x.read_body(bytes, kEventsRead);
      if (r == UpstreamExchange::Read::kEnd) return;
      if (r == UpstreamExchange::Read::kIdle) {
        if (Clock::now() - last > kEventsSilence) return;
        continue;
      }
      last = Clock::now();
      for (const SseEvent& ev : sse.feed(bytes)) {
        if (ev.comment) continue;
        if (!apply_event(Json::parse(ev.data, nullptr, false))) return;
      }
    }
  } catch (const Error& e) {
    log_debug("router: KV events of {}: {}", worker_->url(), e.what());
  }
}

bool WorkerMonitor::apply_event(const Json& line) {
  if (!line.is_object()) return true;
  const std::string type = line.value("type", "");
  const auto now = Clock::now();
  std::unique_lock lock(ctx_.workers.mu());
  Worker& w = *worker_;
  if (type == "snapshot") {
    std::vector<BlockHash> hashes = parse_hashes(line.value("hashes", Json::array()));
    w.instance = line.value("instance", "");
    w.block_size = line.value("block_size", 0);
    const Json tier = line.value("shared_tier", Json());
    w.shared_tier.reset();
    if (tier.is_object()) {
      w.shared_tier = tier.value("namespace", "");
      w.shared_tier_ttl = std::chrono::seconds(std::max<int64_t>(tier.value("ttl_s", int64_t{3600}), 1));
      ctx_.workers.shared_tier().add(*w.shared_tier, hashes, w.shared_tier_ttl, now);
    }
    w.kv.reset(std::move(hashes), line.value("seq", uint64_t{0}));
    w.kv_events_live = true;
    need_snapshot_ = false;
  } else if (type == "events") {
    const std::vector<BlockHash> stored = parse_hashes(line.value("stored", Json::array()));
    const std::vector<BlockHash> removed = parse_hashes(line.value("removed", Json::array()));
    if (!w.kv.apply(line.value("seq", uint64_t{0}), stored, removed)) {
      need_snapshot_ = true;  // a gap: the set is no longer exact
      return false;
    }
    if (w.shared_tier) ctx_.workers.shared_tier().add(*w.shared_tier, stored, w.shared_tier_ttl, now);
  } else if (type == "load") {
    w.load = load_of(line, /*from_status=*/false);
    if (const auto it = line.find("loras"); it != line.end() && it->is_object()) w.loras = loras_of(*it);
    w.load_from_events = true;
    if (line.value("draining", false) && w.state == WorkerState::kUp) {
      lock.unlock();
      ctx_.workers.set_health(w, WorkerState::kDraining, "");
    }
  }
  return true;
}

}  // namespace kvlm::router
