// A small synchronous JetStream client for tests and benchmarks: create a stream, publish with
// or without Nats-Msg-Id and headers, read a consumer's counters. Every call waits for the
// server's answer; errors come back as text for an ASSERT message.
#pragma once

#include <nats/nats.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace idem::testing {

// A message stored on a stream, with its headers (the first value of each name).
struct StoredMessage {
  std::string error;  // "" when read
  std::string data;
  std::map<std::string, std::string> headers;
};
// Creates a file-backed stream on `subjects` with a `duplicate_window` dedup window;
// max_msg_size -1: no limit. "" on success, else what went wrong.
std::string AddStream(jsCtx* js, const std::string& name, const std::vector<std::string>& subjects,
                      std::chrono::milliseconds duplicate_window = std::chrono::minutes(2),
                      int32_t max_msg_size = -1);

class JsClient {
 public:
  JsClient() = default;
  ~JsClient();
  JsClient(const JsClient&) = delete;
  JsClient& operator=(const JsClient&) = delete;

  // Returns "" on success, else what went wrong.
  std::string Connect(const std::string& url);
  // A file-backed stream on `subjects` with a `duplicate_window_ms` dedup window.
  std::string AddStream(const std::string& name, const std::vector<std::string>& subjects,
                        int64_t duplicate_window_ms = 120000);
  // Publishes and waits for the stream's ack. `msg_id` empty: no Nats-Msg-Id. `*duplicate`
  // (if given) says whether JetStream dropped it as a duplicate within its window.
  std::string Publish(const std::string& subject, const std::string& data,
                      const std::string& msg_id = "",
                      const std::vector<std::pair<std::string, std::string>>& headers = {},
                      bool* duplicate = nullptr);
  // The consumer's delivered-but-unacked and not-yet-delivered message counts.
  struct ConsumerCounts {
    int64_t ack_pending = -1;
    uint64_t pending = 0;
    int64_t redelivered = 0;
  };
  std::string Counts(const std::string& stream, const std::string& consumer, ConsumerCounts* out);
  // Messages stored on `stream` (0 if it does not exist).
  uint64_t StreamMessages(const std::string& stream);
  // The message stored on `stream` at `sequence`.
  StoredMessage Get(const std::string& stream, uint64_t sequence);

  natsConnection* conn() { return conn_; }
  jsCtx* js() { return js_; }

 private:
  natsConnection* conn_ = nullptr;
  jsCtx* js_ = nullptr;
};

}  // namespace idem::testing
