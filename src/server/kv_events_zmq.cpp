#include "server/kv_events_zmq.h"

#include "common/error.h"

#ifndef KVLM_HAVE_ZMQ

namespace kvlm {

bool zmq_publisher_available() { return false; }

std::unique_ptr<ZmqEventPublisher> start_zmq_publisher(const KvEventLog&, ZmqEventsConfig) {
  throw_error(ErrorCode::kUnsupported, "{}", kNoZmqMessage);
}

}  // namespace kvlm

#else

#include <atomic>
#include <chrono>
#include <deque>
#include <thread>

#include <zmq.h>

#include "common/log.h"
#include "wire/kv_events/vllm_kv_events.h"

namespace kvlm {
namespace {

constexpr auto kZmqReadWait = std::chrono::milliseconds(10);  // how late a replay request may be served
constexpr int kZmqPubHighWater = 100000;                        // messages queued per subscriber (vLLM's)
constexpr int kZmqLingerMs = 200;                               // what a closing socket still flushes

std::string zmq_seq_bytes(uint64_t seq) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((seq >> (8 * (7 - i))) & 0xff);
  return out;
}

// One ZMQ socket, closed on destruction.
class ZmqSocket {
 public:
  ZmqSocket(void* ctx, int type) : s_(zmq_socket(ctx, type)) {
    if (!s_) throw_error(ErrorCode::kInternal, "zmq_socket: {}", zmq_strerror(zmq_errno()));
    set(ZMQ_LINGER, kZmqLingerMs);
  }
  ~ZmqSocket() { zmq_close(s_); }
  ZmqSocket(const ZmqSocket&) = delete;
  ZmqSocket& operator=(const ZmqSocket&) = delete;
  void* get() const { return s_; }
  void set(int option, int value) { zmq_setsockopt(s_, option, &value, sizeof value); }
  void bind(const std::string& endpoint, const char* flag) {
    if (zmq_bind(s_, endpoint.c_str()) != 0)
      throw_error(ErrorCode::kInvalidArgument, "{} {}: cannot bind: {}", flag, endpoint, zmq_strerror(zmq_errno()));
  }
  void connect(const std::string& endpoint, const char* flag) {
    if (zmq_connect(s_, endpoint.c_str()) != 0)
      throw_error(ErrorCode::kInvalidArgument, "{} {}: cannot connect: {}", flag, endpoint,
                  zmq_strerror(zmq_errno()));
  }
  // Sends `frames` as one message; false if the socket would block (a PUB
  // past its high-water mark drops instead, so this is a ROUTER's full peer).
  bool send(std::initializer_list<std::string_view> frames) {
    size_t i = 0;
    for (std::string_view f : frames) {
      const int more = ++i < frames.size() ? ZMQ_SNDMORE : 0;
      if (zmq_send(s_, f.data(), f.size(), more | ZMQ_DONTWAIT) < 0) return false;
    }
    return true;
  }
  // The frames of one waiting message; empty when none waits.
  std::vector<std::string> receive() {
    std::vector<std::string> frames;
    int more = 1;
    while (more) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, s_, frames.empty() ? ZMQ_DONTWAIT : 0) < 0) {
        zmq_msg_close(&msg);
        return frames;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    return frames;
  }

 private:
  void* s_;
};

// A ZMQ context, terminated on destruction (after its sockets close).
struct ZmqContext {
  void* ctx = zmq_ctx_new();
  ZmqContext() {
    if (!ctx) throw_error(ErrorCode::kInternal, "zmq_ctx_new: {}", zmq_strerror(zmq_errno()));
  }
  ~ZmqContext() { zmq_ctx_term(ctx); }
  ZmqContext(const ZmqContext&) = delete;
  ZmqContext& operator=(const ZmqContext&) = delete;
};

class ZmqPublisherImpl final : public ZmqEventPublisher {
 public:
  ZmqPublisherImpl(const KvEventLog& log, ZmqEventsConfig config);
  ~ZmqPublisherImpl() override {
    stop_ = true;
    thread_.join();
  }
  uint64_t num_sent() const override { return next_seq_.load(); }

 private:
  void run();
  void publish(std::span<const vllm_events::Event> events);
  void serve_replay();

  const KvEventLog& log_;
  const ZmqEventsConfig config_;
  vllm_events::Converter converter_;
  // Declared before the sockets, so it is terminated after they close.
  ZmqContext ctx_;
  ZmqSocket pub_;
  std::unique_ptr<ZmqSocket> replay_;
  std::deque<std::pair<uint64_t, std::string>> sent_;  // (seq, payload), the newest replay_batches
  std::atomic<uint64_t> next_seq_{0};
  uint64_t read_seq_ = 0;  // the log's last batch read
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

ZmqPublisherImpl::ZmqPublisherImpl(const KvEventLog& log, ZmqEventsConfig config)
    : log_(log), config_(std::move(config)), converter_(config_.block_size, config_.medium),
      pub_(ctx_.ctx, ZMQ_PUB) {
  pub_.set(ZMQ_SNDHWM, kZmqPubHighWater);
  if (!config_.bind.empty()) pub_.bind(config_.bind, "--kv-events-zmq");
  if (!config_.connect.empty()) pub_.connect(config_.connect, "--kv-events-zmq-connect");
  if (!config_.replay.empty()) {
    replay_ = std::make_unique<ZmqSocket>(ctx_.ctx, ZMQ_ROUTER);
    replay_->set(ZMQ_SNDHWM, 0);  // a replay of every kept batch must not be cut
    replay_->bind(config_.replay, "--kv-events-zmq-replay");
  }
  // Readers start from nothing: what the cache held before is not theirs
  // to know (at start-up it is empty).
  read_seq_ = log_.snapshot().seq;
  thread_ = std::thread([this] { run(); });
}

void ZmqPublisherImpl::run() {
  const vllm_events::Event cleared = converter_.clear();
  publish(std::span(&cleared, 1));
  while (!stop_) {
    if (replay_) serve_replay();
    auto batches = log_.read_after(read_seq_, kZmqReadWait);
    if (!batches) {
      // Fell behind the log (it keeps 4,096 steps): start the readers over.
      log_warn("kv events zmq: fell behind the event log; publishing AllBlocksCleared");
      const vllm_events::Event again = converter_.clear();
      publish(std::span(&again, 1));
      read_seq_ = log_.snapshot().seq;
      continue;
    }
    for (const KvEventBatch& b : *batches) {
      const std::vector<vllm_events::Event> events = converter_.convert(b.events);
      if (!events.empty()) publish(events);
      read_seq_ = b.seq;
    }
    if (batches->empty() && log_.closed()) std::this_thread::sleep_for(kZmqReadWait);  // read_after no longer waits
  }
}

void ZmqPublisherImpl::publish(std::span<const vllm_events::Event> events) {
  const double ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string payload = vllm_events::encode_batch(ts, events);
  const uint64_t seq = next_seq_.load();
  // A PUB socket never blocks: past the high-water mark a subscriber's
  // messages are dropped, which it sees as a gap in seq (and replays).
  pub_.send({config_.topic, zmq_seq_bytes(seq), payload});
  sent_.emplace_back(seq, std::move(payload));
  if (sent_.size() > config_.replay_batches) sent_.pop_front();
  next_seq_ = seq + 1;
}

void ZmqPublisherImpl::serve_replay() {
  for (std::vector<std::string> req = replay_->receive(); !req.empty(); req = replay_->receive()) {
    // [client id, empty, start seq]: a REQ or DEALER client's request as ROUTER sees it.
    if (req.size() != 3 || req[2].size() != 8) {
      log_warn("kv events zmq: a replay request of {} frames, not [empty, 8-byte seq]; ignored", req.size());
      continue;
    }
    uint64_t start = 0;
    for (unsigned char c : req[2]) start = start << 8 | c;
    const std::string& client = req[0];
    for (const auto& [seq, payload] : sent_) {
      if (seq >= start && !replay_->send({client, "", zmq_seq_bytes(seq), payload})) break;
    }
    replay_->send({client, "", std::string(8, '\xff'), ""});
  }
}

}  // namespace

bool zmq_publisher_available() { return true; }

std::unique_ptr<ZmqEventPublisher> start_zmq_publisher(const KvEventLog& log, ZmqEventsConfig config) {
  return std::make_unique<ZmqPublisherImpl>(log, std::move(config));
}

}  // namespace kvlm

#endif
