// Watching one worker, on two threads of its own:
//  - health: GET /v1/status every HealthConfig::interval, with its timeout.
//    An answer says up or draining (and the load, when no KV events come);
//    none, or an error status, says down, and the requests in flight there
//    are aborted (retried, or their streams continued, elsewhere).
//  - KV events: GET /v1/kv/events, kept open; its snapshot and batches keep
//    the worker's KvIndex, its load lines the worker's load. A gap in the
//    batch numbers, or a restarted worker (another instance), starts again
//    from a snapshot.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "router/context.h"

namespace kvlm::router {

class WorkerMonitor {
 public:
  WorkerMonitor(RouterContext& ctx, std::shared_ptr<Worker> worker);
  ~WorkerMonitor();  // stops both threads (within a health timeout)
  WorkerMonitor(const WorkerMonitor&) = delete;
  WorkerMonitor& operator=(const WorkerMonitor&) = delete;

 private:
  void health_loop();
  void check_health();
  void events_loop();
  // One connection to the events stream, read until it ends or fails.
  void read_events();
  // Applies one line of the stream; false: the stream must start again.
  bool apply_event(const Json& line);
  // Waits up to `d` or until stopped; false when stopped.
  bool pause(std::chrono::milliseconds d);

  RouterContext& ctx_;
  std::shared_ptr<Worker> worker_;
  // Connections of their own: aborting the worker's requests leaves the
  // health checks and the event stream alone.
  UpstreamLink health_link_;
  UpstreamLink events_link_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool need_snapshot_ = true;     // events thread only
  bool warned_events_off_ = false;
  std::thread health_thread_;
  std::thread events_thread_;
};

}  // namespace kvlm::router
