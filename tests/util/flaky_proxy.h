// A deliberately unreliable HTTP hop for end-to-end tests: forwards each request to `target`
// on a fresh connection, but for the first `drop` requests closes the client's connection as
// soon as the request has been passed on, so the client never sees an answer although the
// server behind got (and handles) the request. One request per connection.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace idem::testing {

class FlakyProxy {
 public:
  // Listens on 127.0.0.1, a free port. `target` is "HOST:PORT".
  FlakyProxy(std::string target, int drop);
  ~FlakyProxy();  // stops accepting and waits for connections in progress
  FlakyProxy(const FlakyProxy&) = delete;
  FlakyProxy& operator=(const FlakyProxy&) = delete;

  const std::string& address() const { return address_; }
  int requests() const { return requests_.load(); }

 private:
  struct Impl;
  void AcceptLoop();
  void Serve(void* socket);  // a tcp::socket, kept alive by the caller

  std::string target_;
  int drop_;
  std::string address_;
  std::atomic<int> requests_{0};
  std::atomic<bool> stopping_{false};
  std::unique_ptr<Impl> impl_;
  std::thread acceptor_thread_;
  std::mutex mu_;
  std::vector<std::thread> connections_;  // GUARDED_BY(mu_)
};

}  // namespace idem::testing
