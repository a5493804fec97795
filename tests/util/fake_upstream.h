// FakeUpstream: a scripted Upstream for socket-free tests of the gateway's request flow. Each
// Exchange takes the next scripted step (or, once the script is used up, the default: 201 with
// body "created"), counts the call and keeps a copy of the request it was sent.
//
// A step may hold its answer until Release() is called, so a test can run other requests while
// one is "at the upstream" (a takeover, for instance) on a single-threaded io_context.
//
// Thread safety: none; use it from the one thread running the io_context.
#pragma once

#include <chrono>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include "gateway/upstream.h"

namespace idem::testing {

class FakeUpstream final : public gateway::Upstream {
 public:
  struct Step {
    gateway::UpstreamResult::Failure failure = gateway::UpstreamResult::Failure::kNone;
    unsigned status = 201;
    std::string body = "created";
    std::vector<std::pair<std::string, std::string>> headers = {{"Content-Type", "text/plain"}};
    bool hold = false;  // wait for Release() before answering
  };

  static Step Answer(unsigned status, std::string body) {
    Step step;
    step.status = status;
    step.body = std::move(body);
    return step;
  }
  static Step Fail(gateway::UpstreamResult::Failure failure) {
    Step step;
    step.failure = failure;
    return step;
  }

  void Script(Step step) { script_.push_back(std::move(step)); }

  // Lets every held Exchange answer.
  void Release() {
    released_ = true;
    for (auto* timer : held_) timer->cancel();
  }

  int calls() const { return calls_; }
  int held() const { return static_cast<int>(held_.size()); }
  const std::vector<gateway::Request>& requests() const { return requests_; }

  gateway::Task<gateway::UpstreamResult> Exchange(
      gateway::Request& request, std::chrono::milliseconds response_timeout) override {
    ++calls_;
    requests_.push_back(request);
    last_timeout_ = response_timeout;
    Step step;
    if (!script_.empty()) {
      step = std::move(script_.front());
      script_.pop_front();
    }
    if (step.hold && !released_) {
      boost::asio::steady_timer gate(co_await boost::asio::this_coro::executor,
                                     std::chrono::steady_clock::time_point::max());
      held_.push_back(&gate);
      boost::system::error_code ec;
      co_await gate.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
      std::erase(held_, &gate);
    }
    gateway::UpstreamResult result;
    result.failure = step.failure;
    if (step.failure != gateway::UpstreamResult::Failure::kNone) {
      result.detail = "fake upstream: scripted failure";
      co_return result;
    }
    result.response.result(step.status);
    result.response.version(11);
    for (const auto& [name, value] : step.headers) result.response.set(name, value);
    result.response.body() = step.body;
    result.response.prepare_payload();
    co_return result;
  }

  std::chrono::milliseconds last_timeout() const { return last_timeout_; }

 private:
  std::deque<Step> script_;
  std::vector<gateway::Request> requests_;
  std::vector<boost::asio::steady_timer*> held_;
  bool released_ = false;
  int calls_ = 0;
  std::chrono::milliseconds last_timeout_{0};
};

}  // namespace idem::testing
