// kvlm serve's flags for KV events over ZMQ in vLLM's format
// (server/kv_events_zmq.h, docs/router.md "KV events over ZMQ").
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/engine.h"
#include "server/kv_events_zmq.h"

namespace kvlm::apps {

struct ZmqEventFlags {
  std::string bind, connect, replay;
  std::string model;  // the topic's model name ("": the first served model name)
  std::string medium = "CPU";
  bool on() const { return !bind.empty() || !connect.empty(); }
};

void add_zmq_event_options(CLI::App& app, ZmqEventFlags& f);

// Before the model loads: a mistake (or a kvlm without libzmq) costs no wait.
void check_zmq_event_flags(const ZmqEventFlags& f);

// The publisher, when the flags ask for one (else null). `address` is the
// host:port pickers send requests to, `model` the served model name.
std::unique_ptr<ZmqEventPublisher> start_zmq_events(const ZmqEventFlags& f, const Engine& engine,
                                                    const std::string& address, const std::string& model);

}  // namespace kvlm::apps
