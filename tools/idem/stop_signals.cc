#include "stop_signals.h"

#include <pthread.h>

#include <utility>

namespace idem::cli {

StopSignals::StopSignals() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
}

StopSignals::~StopSignals() {
  if (waiter_.joinable()) Join(/*wake=*/true);
}

void StopSignals::Start(std::function<void(const char* signal_name)> on_signal) {
  waiter_ = std::thread([this, signals = signals_, on_signal = std::move(on_signal)] {
    int signal = 0;
    sigwait(&signals, &signal);
    if (!woken_.load()) on_signal(signal == SIGTERM ? "SIGTERM" : "SIGINT");
  });
}

void StopSignals::Join(bool wake) {
  if (!waiter_.joinable()) return;
  if (wake) {
    woken_.store(true);
    pthread_kill(waiter_.native_handle(), SIGTERM);
  }
  waiter_.join();
}

}  // namespace idem::cli
