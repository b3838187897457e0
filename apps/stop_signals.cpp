#include "apps/stop_signals.h"

#include <pthread.h>

#include <thread>

#include "apps/front_door_options.h"

namespace kvlm::apps {

sigset_t block_stop_signals() {
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  block_reload_signal();
  return stop_signals;
}

void run_until_stop_signal(const sigset_t& stop_signals, const std::function<void()>& run,
                           const std::function<void()>& stop) {
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    stop();
  });
  run();
  // run() also returns if listening failed: wake the waiter either way.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
}

}  // namespace kvlm::apps
