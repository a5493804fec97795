// SettleListener: the thread behind a store's settle notices (ExecutionHooks::SubscribeSettled).
//
// It holds one connection of its own to the store's server (a Redis SUBSCRIBE, a PostgreSQL
// LISTEN) and hands each notice to the subscriber's handler. A connection that fails is
// replaced after a backoff (50 ms, doubling to 2 s) for as long as the listener lives; notices
// published meanwhile are lost, which SubscribeSettled allows. Destroying the listener wakes
// its thread at once (a self-pipe next to the socket in one poll) and joins it.
//
// Thread safety: the handler runs on the listener's thread only, one notice at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "idem/status.h"
#include "store/store_execution.h"

namespace idem::internal {

// One connection that receives notices.
class NoticeSource {
 public:
  virtual ~NoticeSource() = default;
  // The socket to wait on.
  virtual int fd() const = 0;
  // Hands every notice already received to `deliver`; with `read`, first reads what the socket
  // has (poll said it is readable). An error means the connection is broken.
  virtual Status Drain(bool read,
                       const std::function<void(const SettleNotice&)>& deliver) = 0;
};

class SettleListener final : public SettleSubscription {
 public:
  // Opens a source: connected and subscribed, or an error.
  using Connect = std::function<Result<std::unique_ptr<NoticeSource>>()>;

  // Starts the thread with `first` already connected (null: the thread connects).
  SettleListener(Connect connect, std::unique_ptr<NoticeSource> first,
                 SettleHandler handler);
  ~SettleListener() override;
  SettleListener(const SettleListener&) = delete;
  SettleListener& operator=(const SettleListener&) = delete;

  // How many times a connection was (re)established after the first; for tests.
  int reconnects() const;

 private:
  void Run(std::unique_ptr<NoticeSource> source);
  // Listens on `source` until it breaks (false) or the listener stops (true).
  bool Listen(NoticeSource& source);
  // Sleeps for `d` unless stopped first; true when stopped.
  bool SleepUnlessStopped(std::chrono::milliseconds d);

  const Connect connect_;
  const SettleHandler handler_;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<int> reconnects_{0};
  std::thread thread_;
};

// A notice's payload names a key by a hex SHA-256 of its scope (maybe inside a Redis key,
// "PREFIX:{HEX}"): the Scope::Digest() it stands for, or empty when it names none.
std::string DigestFromNotice(std::string_view payload);

}  // namespace idem::internal
