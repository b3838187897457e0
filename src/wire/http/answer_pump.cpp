// Driving a Producer (message.h): every wake schedules one poll (never two
// at once); a stream's output is framed and written while the next polls
// run, up to max_stream_buffer bytes behind the reader.
#include <unistd.h>

#include <fmt/format.h>

#include "common/log.h"
#include "wire/http/connection.h"

namespace kvlm::http::detail {

// What a producer holds to be polled again. It outlives the pump harmlessly:
// a wake after the answer has ended finds nothing to wake.
class PumpWaker : public Waker {
 public:
  PumpWaker(std::weak_ptr<AnswerPump> pump, Executor io) : pump_(std::move(pump)), io_(io) {}
  void wake() override {
    asio::post(io_, [pump = pump_] {
      if (auto p = pump.lock()) p->schedule_poll();
    });
  }
  // Called from within poll(), which runs before the pump looks at it.
  void wake_when_readable(int fd) override {
    if (auto p = pump_.lock()) p->pending_fd_ = fd;
  }

 private:
  std::weak_ptr<AnswerPump> pump_;
  Executor io_;
};

AnswerPump::AnswerPump(Executor io, Shared& shared, Response& res, bool chunked, Send send)
    : io_(io), shared_(shared), res_(res), chunked_(chunked), send_(std::move(send)), wake_timer_(io), done_signal_(io) {
  done_signal_.expires_at(asio::steady_timer::time_point::max());
}

AnswerPump::~AnswerPump() = default;

asio::awaitable<bool> AnswerPump::run() {
  auto self = shared_from_this();
  schedule_poll();
  if (!finished_) co_await done_signal_.async_wait(kTuple);
  co_return ok_;
}

void AnswerPump::schedule_poll() {
  if (finished_ || produced_all_ || cancelled_) return;
  if (polling_) {
    wake_again_ = true;
    return;
  }
  polling_ = true;
  // Asked before each poll: a producer may block only now and then (the
  // router's relay while it resumes on another worker).
  const bool on_pool = res_.producer->poll_may_block();
  if (on_pool) {
    asio::post(*shared_.handler_pool, [self = shared_from_this()] { self->poll_now(true); });
  } else {
    asio::post(io_, [self = shared_from_this()] { self->poll_now(false); });
  }
}

// On the executor, or a handler thread for a poll that may block.
void AnswerPump::poll_now(bool on_pool) {
  Producer& p = *res_.producer;
  auto wake_at = Clock::time_point::max();
  Producer::Progress progress = Producer::Progress::kPending;
  bool failed = false;
  try {
    if (!started_) {
      started_ = true;
      p.start(std::make_shared<PumpWaker>(weak_from_this(), io_));
    }
    progress = p.poll(res_, wake_at);
  } catch (const std::exception& e) {
    log_error("http: an answer failed while it was produced: {}", e.what());
    failed = true;
  }
  if (!on_pool) return on_polled(progress, wake_at, failed);
  asio::post(io_, [self = shared_from_this(), progress, wake_at, failed] { self->on_polled(progress, wake_at, failed); });
}

void AnswerPump::on_polled(Producer::Progress progress, Clock::time_point wake_at, bool failed) {
  polling_ = false;
  if (cancel_after_poll_ || failed) {
    if (failed && !send_) {  // a whole answer can still say what happened
      res_.status = 500;
      res_.set_content(shared_.error_body(500, "internal error while answering", ""), "application/json");
      produced_all_ = true;
      return finish(true);
    }
    cancelled_ = true;
    try {
      res_.producer->cancel();
    } catch (const std::exception& e) {
      log_error("http: cancelling an answer failed: {}", e.what());
    }
    return finish(false);
  }
  if (progress == Producer::Progress::kDone) produced_all_ = true;
  if (!send_) {
    if (produced_all_) finish(true);
  } else {
    take_output();
    if (outbox_.size() > shared_.limits.max_stream_buffer) return drop(true);
    kick_write();
  }
  if (finished_ || produced_all_) return;
  if (pending_fd_ >= 0) {
    watch_fd(pending_fd_);
    pending_fd_ = -1;
  }
  if (wake_at != Clock::time_point::max()) {
    wake_timer_.expires_at(wake_at);
    wake_timer_.async_wait([self = weak_from_this()](boost::system::error_code ec) {
      if (auto p = self.lock(); p && !ec) p->schedule_poll();
    });
  }
  if (wake_again_) {
    wake_again_ = false;
    schedule_poll();
  }
}

// The producer's new bytes into the outbox, as a chunk (and the last chunk
// once it is done).
void AnswerPump::take_output() {
  std::string& body = res_.body;
  if (!body.empty()) {
    if (chunked_) outbox_ += fmt::format("{:x}\r\n", body.size());
    outbox_ += body;
    if (chunked_) outbox_ += "\r\n";
    body.clear();
  }
  if (produced_all_ && chunked_) outbox_ += "0\r\n\r\n";
}

void AnswerPump::kick_write() {
  if (writing_ || finished_) return;
  if (outbox_.empty()) {
    if (produced_all_) finish(true);
    return;
  }
  writing_ = true;
  std::string bytes;
  bytes.swap(outbox_);
  send_(std::move(bytes), [self = shared_from_this()](bool ok) {
    self->writing_ = false;
    if (self->finished_) return;
    if (!ok) return self->drop(false);
    self->kick_write();
  });
}

// Wakes the producer once `fd` is readable. A dup of it is watched, so the
// producer keeps its own descriptor to itself.
void AnswerPump::watch_fd(int fd) {
  fd_watch_.reset();
  const int copy = ::dup(fd);
  if (copy < 0) return schedule_poll();
  fd_watch_.emplace(io_, copy);
  fd_watch_->async_wait(asio::posix::stream_descriptor::wait_read,
                        [self = weak_from_this()](boost::system::error_code ec) {
                          if (ec == asio::error::operation_aborted) return;
                          if (auto p = self.lock()) p->schedule_poll();
                        });
}

// The reader is gone or too slow: the producer's work stops (after a poll in
// progress returns) and the answer ends unfinished.
void AnswerPump::drop(bool slow_reader) {
  if (finished_) return;
  if (slow_reader) shared_.stats.count(Refusal::kSlowReader);
  if (polling_) {
    cancel_after_poll_ = true;
    return;
  }
  if (!produced_all_ && !cancelled_) {
    cancelled_ = true;
    try {
      res_.producer->cancel();
    } catch (const std::exception& e) {
      log_error("http: cancelling an answer failed: {}", e.what());
    }
  }
  finish(false);
}

void AnswerPump::client_gone() { drop(false); }

void AnswerPump::finish(bool ok) {
  if (finished_) return;
  finished_ = true;
  ok_ = ok;
  wake_timer_.cancel();
  fd_watch_.reset();
  done_signal_.cancel();
}

}  // namespace kvlm::http::detail
