// A scripted upstream for end-to-end tests: a TCP server on a free loopback port that records
// every byte it receives, splits the bytes into requests with Beast's parser, and answers each
// request with whatever bytes the test chooses (interim responses, odd framing, anything).
// Bytes that do not parse as a request are counted: behind the gateway, that is a desync.
//
// Thread safety: the accessors may be called from any thread while connections are served.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace idem::testing {

struct ReceivedRequest {
  std::string raw;  // the request's bytes exactly as they arrived
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  int connection = 0;  // which connection (1, 2, ...) it came on

  // Every value of the header `name` (case-insensitive), in order.
  std::vector<std::string> Values(const std::string& name) const;
};

class RawUpstream {
 public:
  // Returns the raw bytes sent back for one request.
  using Responder = std::function<std::string(const ReceivedRequest&)>;

  // Listens on 127.0.0.1, a free port. Without a responder each request gets
  // "201 Created" with the body "got N bytes" (N the request body's size).
  explicit RawUpstream(Responder respond = nullptr);
  ~RawUpstream();  // closes every connection and joins every thread
  RawUpstream(const RawUpstream&) = delete;
  RawUpstream& operator=(const RawUpstream&) = delete;

  // "127.0.0.1:PORT".
  const std::string& address() const { return address_; }
  // The requests received so far, in the order they completed.
  std::vector<ReceivedRequest> requests() const;
  // How many times received bytes failed to parse as a request (each closes its connection).
  int parse_errors() const { return parse_errors_.load(); }
  // Forgets the requests and errors recorded so far.
  void Clear();
  // From now on, closes each connection right after its first answer, without saying so in
  // the answer (HTTP allows a server to close an idle keep-alive connection at any time).
  void CloseAfterEachAnswer() { close_after_answer_ = true; }

  // The default answer: 201 with "got N bytes".
  static std::string Created(const ReceivedRequest& request);

 private:
  void AcceptLoop();
  void Serve(int fd, int connection);

  Responder respond_;
  int listen_fd_ = -1;
  std::string address_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> parse_errors_{0};
  std::atomic<bool> close_after_answer_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<ReceivedRequest> requests_;  // GUARDED_BY(mu_)
  std::vector<int> fds_;                   // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;       // GUARDED_BY(mu_)
};

// A blocking client connection for tests that need to control every byte and every pause.
class RawSocket {
 public:
  // Connects to the IPv4 "HOST:PORT", from `source_ip` if given (any 127.x.y.z reaches a
  // loopback listener, so one machine can play several clients); ok() says if it worked.
  explicit RawSocket(const std::string& address, const std::string& source_ip = "");
  ~RawSocket();
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  bool ok() const { return fd_ >= 0; }
  bool Send(const std::string& bytes);
  void ShutdownWrite();
  // Reads until what was read contains `needle` (returns everything read so far), or until the
  // peer closes or `timeout_ms` passes.
  std::string ReadUntil(const std::string& needle, int timeout_ms = 5000);
  // Reads until the peer closes or `timeout_ms` passes.
  std::string ReadAll(int timeout_ms = 5000);

 private:
  int fd_ = -1;
  std::string pending_;
};

}  // namespace idem::testing
