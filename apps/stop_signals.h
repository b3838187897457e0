// How kvlm's servers stop: SIGINT and SIGTERM are taken by a waiting thread
// (a signal handler must not touch a server), and a client that hangs up
// must not kill the process with SIGPIPE.
#pragma once

#include <csignal>
#include <functional>

namespace kvlm::apps {

// Ignores SIGPIPE and blocks SIGINT, SIGTERM and SIGHUP (block_reload_signal)
// in this thread; returns the stop signals' set. Call before any thread
// starts: the blocked set is inherited by every thread.
sigset_t block_stop_signals();

// Calls `run` (a server's loop); the first stop signal calls `stop`, which
// makes `run` return.
void run_until_stop_signal(const sigset_t& stop_signals, const std::function<void()>& run,
                           const std::function<void()>& stop);

}  // namespace kvlm::apps
