// kvlm serve --kv-events-zmq: the prefix cache's changes published over ZMQ
// in vLLM's format (wire/kv_events/vllm_kv_events.h), for llm-d's precise
// prefix-cache scorer, Dynamo's KV router and whatever else reads vLLM's
// KV events (docs/router.md "KV events over ZMQ").
//
// One thread reads the engine's KvEventLog (made with keep_events) and
// sends each step's events as one message [topic, seq, payload] on a PUB
// socket, seq counting from 0; the first message is AllBlocksCleared. The
// last kReplayBatches messages stay for a ROUTER replay socket, where a
// client sends [empty, start seq (u64 big-endian)] and gets [empty, seq,
// payload] for each kept message from start on, then [empty, -1 (eight 0xff
// bytes), empty], as vLLM answers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "engine/kv_event_log.h"

namespace kvlm {

struct ZmqEventsConfig {
  std::string bind;     // a PUB endpoint to bind (tcp://HOST:PORT), or ""
  std::string connect;  // a PUB endpoint to connect to (a picker's bound SUB), or ""
  std::string replay;   // a ROUTER endpoint to bind for replays, or ""
  std::string topic;    // vllm_events::topic(ADDRESS, MODEL)
  std::string medium = "CPU";
  int32_t block_size = 16;
  size_t replay_batches = 4096;
};

// Whether this kvlm was built with libzmq (else start_zmq_publisher throws).
bool zmq_publisher_available();
inline constexpr const char* kNoZmqMessage =
    "this kvlm was built without libzmq; install libzmq3-dev and rebuild";

class ZmqEventPublisher {
 public:
  virtual ~ZmqEventPublisher() = default;
  // The number of messages sent so far (the next seq).
  virtual uint64_t num_sent() const = 0;
};

// Binds and connects the sockets (a kvlm::Error naming the endpoint if one
// fails) and starts publishing. `log` must outlive the publisher.
std::unique_ptr<ZmqEventPublisher> start_zmq_publisher(const KvEventLog& log, ZmqEventsConfig config);

}  // namespace kvlm
