// A small HTTP service to put behind `idem gateway`: it counts how often each request really
// executes, so you (and idem's tests) can see that retries do not run twice.
//
//   example_service [HOST:PORT]          default 127.0.0.1:9000; port 0 picks a free port
//
//   POST /anything[?sleep_ms=N&status=S&size=B]  "executes": counts the call, answers 201 with
//        a JSON receipt (or status S, or a B-byte body), after sleeping N ms (or the
//        X-Sleep-Ms header's value, which a gateway's default fingerprint does not cover)
//   GET  /executions?key=K   how many requests with Idempotency-Key K executed
//   GET  /executions         how many requests executed in all
//   GET  anything else       200 "hello"
// Prints "listening on HOST:PORT" once ready. One thread per connection: simple, not fast.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "example_http.h"

namespace {

using namespace idem::examples;

std::mutex mu;
std::map<std::string, int> executions_by_key;
std::atomic<int> executions{0};

Response Handle(const Request& req) {
  Response res{http::status::ok, req.version()};
  res.keep_alive(req.keep_alive());
  res.set(http::field::content_type, "text/plain");
  const std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  if (req.method() == http::verb::post || req.method() == http::verb::patch) {
    std::string sleep_ms = QueryParam(target, "sleep_ms");
    if (sleep_ms.empty()) sleep_ms = std::string(req["X-Sleep-Ms"]);  // outside the fingerprint
    if (!sleep_ms.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(sleep_ms)));
    const std::string key(req["Idempotency-Key"]);
    int n = ++executions;
    int for_key = 0;
    {
      std::lock_guard lock(mu);
      for_key = ++executions_by_key[key];
    }
    const std::string status = QueryParam(target, "status");
    res.result(status.empty() ? 201 : std::stoi(status));
    if (auto size = QueryParam(target, "size"); !size.empty()) {
      res.body() = std::string(std::stoul(size), 'x');
    } else {
      res.set(http::field::content_type, "application/json");
      res.set(http::field::location, std::string(path) + "/" + std::to_string(n));
      res.body() = "{\"execution\":" + std::to_string(n) + ",\"executions_for_key\":" +
                   std::to_string(for_key) + ",\"fencing_token\":\"" +
                   std::string(req["Idempotency-Fencing-Token"]) + "\",\"request\":" +
                   (req.body().empty() ? "null" : "\"" + std::to_string(req.body().size()) +
                                                      " bytes\"") +
                   "}";
    }
  } else if (path == "/executions") {
    const std::string key = QueryParam(target, "key");
    std::lock_guard lock(mu);
    res.body() = std::to_string(key.empty() ? executions.load() : executions_by_key[key]);
  } else {
    res.body() = "hello";
  }
  res.prepare_payload();
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2) {
    std::cerr << "usage: example_service [HOST:PORT]\n";
    return 2;
  }
  return ListenAndServe("example_service", argc > 1 ? argv[1] : "127.0.0.1:9000",
                        [](tcp::socket socket) { ServeConnection(std::move(socket), Handle); });
}
