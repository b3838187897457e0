#include "apps/kv_events_options.h"

#include "common/error.h"
#include "wire/kv_events/vllm_kv_events.h"

namespace kvlm::apps {

void add_zmq_event_options(CLI::App& app, ZmqEventFlags& f) {
  app.add_option("--kv-events-zmq", f.bind,
                 "publish the prefix cache's changes in vLLM's KV-event format on a ZMQ PUB socket bound here "
                 "(tcp://HOST:PORT), for llm-d's precise prefix-cache scorer or Dynamo's KV router");
  app.add_option("--kv-events-zmq-connect", f.connect,
                 "the same events on a PUB socket connected to a reader's bound SUB socket (tcp://HOST:PORT)");
  app.add_option("--kv-events-zmq-replay", f.replay,
                 "a ZMQ ROUTER socket bound here (tcp://HOST:PORT) that resends the last 4,096 messages from a "
                 "sequence number on, as vLLM's replay endpoint does");
  app.add_option("--kv-events-zmq-model", f.model,
                 "the model name in the topic kv@ADDRESS@MODEL (default: the first served model name)");
  app.add_option("--kv-events-zmq-medium", f.medium,
                 "the events' medium: the tier the pool is to readers (Dynamo reads CPU as host memory, GPU as the "
                 "device tier)")
      ->capture_default_str();
}

void check_zmq_event_flags(const ZmqEventFlags& f) {
  if (!f.on() && f.replay.empty()) return;
  if (!zmq_publisher_available()) throw_error(ErrorCode::kUnsupported, "{}", kNoZmqMessage);
  if (!f.on())
    throw_error(ErrorCode::kInvalidArgument, "--kv-events-zmq-replay replays what --kv-events-zmq or "
                                             "--kv-events-zmq-connect publishes: give one of them");
}

std::unique_ptr<ZmqEventPublisher> start_zmq_events(const ZmqEventFlags& f, const Engine& engine,
                                                    const std::string& address, const std::string& model) {
  if (!f.on()) return nullptr;
  ZmqEventsConfig c;
  c.bind = f.bind;
  c.connect = f.connect;
  c.replay = f.replay;
  c.topic = vllm_events::topic(address, f.model.empty() ? model : f.model);
  c.medium = f.medium;
  c.block_size = engine.config().block_size;
  return start_zmq_publisher(*engine.kv_events(), std::move(c));
}

}  // namespace kvlm::apps
