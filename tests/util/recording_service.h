// An in-process HTTP service for `idem consume` tests: records every request it gets and
// answers with whatever the test's handler decides (a status, or a whole Reply with a body and
// headers, after an optional wait). One
// thread per connection; the destructor closes every connection and joins every thread, and
// wakes handlers blocked in WaitUntilStopped().
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace idem::testing {

struct SeenRequest {
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string Header(const std::string& name) const;  // first match, case-insensitive, or ""
};

struct Reply {
  int status = 200;
  std::string body;  // empty: "status N\n"
  std::vector<std::pair<std::string, std::string>> headers;
};

class RecordingService {
 public:
  // Returns the HTTP status to answer with. Runs on the connection's thread.
  using Handler = std::function<int(const SeenRequest&)>;
  // Returns the whole answer. Runs on the connection's thread.
  using Responder = std::function<Reply(const SeenRequest&)>;

  // Listens on 127.0.0.1, a free port. The default handler answers 200.
  explicit RecordingService(Handler handler = nullptr);
  explicit RecordingService(Responder responder);
  ~RecordingService();

  int port() const { return port_; }
  std::string Url(const std::string& path) const;
  std::vector<SeenRequest> seen() const;
  size_t count() const;
  // Blocks until the service stops or `ms` pass; for handlers that simulate a hung service.
  void WaitUntilStopped(int ms);

 private:
  void Serve(int fd);

  Responder responder_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SeenRequest> seen_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
};

}  // namespace idem::testing
