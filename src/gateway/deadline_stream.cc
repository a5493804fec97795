#include "gateway/deadline_stream.h"

namespace idem::gateway {

DeadlineStream::DeadlineStream(tcp::socket socket)
    : state_(std::make_shared<State>(std::move(socket))) {}

DeadlineStream::DeadlineStream(const executor_type& executor)
    : DeadlineStream(tcp::socket(executor)) {}

DeadlineStream::~DeadlineStream() {
  boost::system::error_code ignored;
  state_->watchdog.cancel();
  state_->socket.close(ignored);
}

void DeadlineStream::State::Started() {
  ++pending;
  if (deadline == Clock::time_point::max()) return;
  if (armed && armed_until <= deadline) return;  // it fires in time and looks again
  Arm(deadline);
}

void DeadlineStream::State::Finished(boost::system::error_code& ec) {
  --pending;
  if (timed_out && ec) ec = beast::error::timeout;
}

void DeadlineStream::State::Arm(Clock::time_point at) {
  armed = true;
  armed_until = at;
  const uint64_t g = ++generation;
  // Cancels the wait it replaces, whose handler then ignores it.
  watchdog.expires_at(Clock::ToSteady(at));
  watchdog.async_wait([weak = weak_from_this(), g](const boost::system::error_code& ec) {
    if (auto self = weak.lock()) self->Fired(g, ec);
  });
}

void DeadlineStream::State::Fired(uint64_t g, const boost::system::error_code& ec) {
  if (g != generation) return;  // replaced by a wait for an earlier deadline
  armed = false;
  if (ec || pending == 0 || deadline == Clock::time_point::max()) return;
  // The precise time: the coarse clock may not have reached a deadline that has passed.
  if (std::chrono::steady_clock::now() < Clock::ToSteady(deadline)) {
    Arm(deadline);
    return;
  }
  timed_out = true;
  boost::system::error_code ignored;
  socket.close(ignored);
}

}  // namespace idem::gateway
