// GET /v1/kv/events (kvlm serve --kv-events): the prefix cache's changes as
// an SSE stream, for a router that routes by the blocks this server really
// holds (docs/router.md has the wire format). Each data line is one JSON
// object:
//   {"type":"snapshot","instance":I,"seq":S,"block_size":B,"shared_tier":...,"hashes":[h,...]}
//   {"type":"events","seq":N,"stored":[h,...],"removed":[h,...]}     N = previous seq + 1
//   {"type":"load","running":R,"waiting":W,"pending_tokens":P,"kv_blocks_free":F,"kv_blocks_total":T,
//    "draining":D,"loras":{NAME:IDENTITY,...}}
// A reader starts with a snapshot (or, with ?instance=I&since=S from an
// earlier connection to this same process, right after batch S if the log
// still holds it) and gets a new snapshot whenever it falls behind the log.
// Load lines come at most every kLoadEvery, and at least every second.
#include <chrono>

#include <fmt/format.h>

#include "common/log.h"
#include "engine/engine.h"
#include "kv/block_hash.h"
#include "server/routes.h"

namespace kvlm {
namespace {

using openai::Json;
using Clock = std::chrono::steady_clock;

constexpr auto kLoadEvery = std::chrono::milliseconds(20);
constexpr auto kLoadAtLeast = std::chrono::seconds(1);
constexpr auto kPollEvery = std::chrono::milliseconds(20);

Json hashes_json(const std::vector<BlockHash>& hashes) {
  Json a = Json::array();
  for (const BlockHash& h : hashes) a.push_back(block_hash_hex(h));
  return a;
}

std::string sse_line(const Json& j) { return "data: " + j.dump() + "\n\n"; }

// What a router needs to know of this server's shared tier: blocks stored
// here will also be found there by other servers of the same namespace as
// stored (with a tier secret, only by servers that hold the same secret).
Json shared_tier_json(const Engine& engine) {
  const auto id = engine.shared_tier_id();
  if (!id) return nullptr;
  return Json{{"namespace", block_hash_hex(BlockHash{*id})}, {"ttl_s", engine.config().tiers->redis->ttl_s}};
}

struct EventsReader {
  std::optional<uint64_t> seq;  // the last batch sent; nullopt: a snapshot is due
  Json last_load;
  Clock::time_point last_load_sent{};
};

std::string snapshot_line(const ServerContext& ctx, EventsReader& r) {
  const KvEventLog::Snapshot s = ctx.engine.kv_events()->snapshot();
  r.seq = s.seq;
  return sse_line(Json{{"type", "snapshot"},
                       {"instance", ctx.instance_id},
                       {"seq", s.seq},
                       {"block_size", ctx.engine.config().block_size},
                       {"shared_tier", shared_tier_json(ctx.engine)},
                       {"hashes", hashes_json(s.hashes)}});
}

// The LoRA adapters served, by name: each one's identity, from which a
// router derives the key its blocks are hashed with (adapter_extra_key).
Json loras_json(const ServerContext& ctx) {
  Json out = Json::object();
  for (const LoraInfo& lora : ctx.loras->list()) out[lora.name] = lora.identity;
  return out;
}

// The load line when it changed (at most every kLoadEvery) or a second has passed.
std::string load_line(const ServerContext& ctx, EventsReader& r) {
  const auto now = Clock::now();
  if (now - r.last_load_sent < kLoadEvery) return {};
  const EngineMetrics m = ctx.engine.metrics();
  Json load = {{"type", "load"},
               {"running", m.num_running},
               {"waiting", m.num_waiting},
               {"pending_tokens", m.num_pending_tokens},
               {"kv_blocks_free", m.num_kv_blocks - m.num_kv_blocks_used},
               {"kv_blocks_total", m.num_kv_blocks},
               {"draining", ctx.in_flight.draining()},
               {"loras", loras_json(ctx)}};
  if (load == r.last_load && now - r.last_load_sent < kLoadAtLeast) return {};
  r.last_load = load;
  r.last_load_sent = now;
  return sse_line(load);
}

// The stream's producer: polled every kPollEvery (the log has no waker of
// its own), it writes the new batches and the load; it ends when the engine
// has stopped, so the reader hears it at once.
class EventsStream final : public http::Producer {
 public:
  EventsStream(const ServerContext& ctx, EventsReader reader) : ctx_(ctx), r_(std::move(reader)) {}
  void start(std::shared_ptr<http::Waker>) override {}
  void cancel() override {}
  Progress poll(http::Response& res, http::Clock::time_point& wake_at) override {
    const KvEventLog& log = *ctx_.engine.kv_events();
    std::string& out = res.body;
    if (!r_.seq) {
      out += snapshot_line(ctx_, r_);
    } else if (auto batches = log.read_after(*r_.seq, std::chrono::milliseconds(0))) {
      for (const KvEventBatch& b : *batches) {
        out += sse_line(Json{{"type", "events"}, {"seq", b.seq}, {"stored", hashes_json(b.stored)},
                             {"removed", hashes_json(b.removed)}});
        r_.seq = b.seq;
      }
    } else {
      out += snapshot_line(ctx_, r_);  // fell behind the log
    }
    out += load_line(ctx_, r_);
    if (log.closed()) return Progress::kDone;
    wake_at = Clock::now() + kPollEvery;
    return Progress::kPending;
  }

 private:
  const ServerContext& ctx_;
  EventsReader r_;
};

}  // namespace

void handle_kv_events(ServerContext& ctx, const http::Request& req, http::Response& res) {
  if (!ctx.engine.kv_events())
    return send_error(res, {404, "KV events are off on this server: start kvlm serve with --kv-events", std::nullopt});
  EventsReader reader;
  // A reader reconnecting to the same process may pick up where it was.
  if (req.get_param_value("instance") == ctx.instance_id && req.has_param("since")) {
    try {
      reader.seq = std::stoull(req.get_param_value("since"));
    } catch (const std::exception&) {
      return send_error(res, {400, "'since' must be a batch number", std::string("since")});
    }
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.stream("text/event-stream", std::make_unique<EventsStream>(ctx, std::move(reader)));
}

}  // namespace kvlm
