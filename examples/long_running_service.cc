// A long-running operation behind `idem gateway` (docs/gateway.md, "Long-running operations"):
// the service accepts a report request at once with 202, and a background job builds the report
// and then tells the gateway the final answer, with the fencing token the gateway gave the
// request. Retries of the request meanwhile get the 202 again from the gateway, never a second
// job; after the job's completion they get its 201.
//
//   long_running_service HOST:PORT --admin GATEWAY_ADMIN_HOST:PORT
//
//   POST /v1/reports[/...][?work_ms=N&fail=1&hold=1]
//        starts a job (counted), answers 202 with Location and Retry-After. The job works N ms
//        (default 1000), then POSTs /v1/operations/complete to the gateway's admin listener
//        with 201 and the report, or /v1/operations/release with fail=1 (a transient failure:
//        the next retry runs again). hold=1: the job never finishes by itself (for tests).
//   GET  /executions?key=K   how many jobs the Idempotency-Key K started
//   GET  /tokens?key=K       the fencing token of K's last job
//   GET  /jobs               how many jobs ended, and how each ended (JSON)
// Prints "listening on HOST:PORT" once ready. One thread per connection and per job: simple,
// not fast.
#include <boost/asio/connect.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "example_http.h"

namespace {

using namespace idem::examples;

std::string admin_address;  // the gateway's admin listener, HOST:PORT
std::mutex mu;
std::map<std::string, int> jobs_by_key;
std::map<std::string, std::string> token_by_key;
std::map<std::string, int> job_ends;  // "completed", "released", "fenced", "failed"
std::atomic<int> reports{0};

std::string Base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    const size_t n = std::min<size_t>(3, in.size() - i);
    uint32_t v = 0;
    for (size_t j = 0; j < 3; ++j) v = v << 8 | (j < n ? static_cast<uint8_t>(in[i + j]) : 0);
    for (size_t j = 0; j < 4; ++j) out += j <= n ? kAlphabet[(v >> (18 - 6 * j)) & 63] : '=';
  }
  return out;
}

// A JSON string literal (the fields here are keys, tokens and header values: printable ASCII,
// but escape quotes and backslashes all the same).
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// POSTs `body` to the gateway's admin listener; returns the status, or 0 if unreachable.
int PostToGateway(const std::string& path, const std::string& body) {
  try {
    asio::io_context io;
    tcp::resolver resolver(io);
    const size_t colon = admin_address.rfind(':');
    tcp::socket socket(io);
    asio::connect(socket, resolver.resolve(admin_address.substr(0, colon),
                                           admin_address.substr(colon + 1)));
    Request req{http::verb::post, path, 11};
    req.set(http::field::host, admin_address);
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(socket, req);
    beast::flat_buffer buffer;
    Response res;
    http::read(socket, buffer, res);
    return static_cast<int>(res.result_int());
  } catch (const std::exception& e) {
    std::cerr << "job: cannot reach the gateway's admin listener: " << e.what() << "\n";
    return 0;
  }
}

// The background job: works, then ends the operation through the gateway. A real job would
// retry an unreachable gateway; a 409 means it was taken over and its result must be dropped.
// `tenant` is the request's Authorization header (the gateway's default tenant header), if it
// had one: the gateway scopes keys per tenant, and so does the admin API.
void RunJob(std::string key, std::optional<std::string> tenant, std::string token, int report,
            int work_ms, bool fail) {
  std::this_thread::sleep_for(std::chrono::milliseconds(work_ms));
  const std::string who = "{\"key\":" + Quote(key) +
                          (tenant ? ",\"tenant\":" + Quote(*tenant) : "") +
                          ",\"token\":" + Quote(token);
  int status = 0;
  if (fail) {
    status = PostToGateway("/v1/operations/release", who + "}");
  } else {
    const std::string location = "/v1/reports/" + std::to_string(report);
    const std::string result = "{\"report\":" + std::to_string(report) + ",\"rows\":42}";
    status = PostToGateway(
        "/v1/operations/complete",
        who + ",\"status\":201,\"headers\":[[\"Content-Type\",\"application/json\"],"
              "[\"Location\"," + Quote(location) + "]],\"body\":" + Quote(Base64(result)) + "}");
  }
  const std::string end = status == 200   ? (fail ? "released" : "completed")
                          : status == 409 ? "fenced"
                                          : "failed";
  std::lock_guard lock(mu);
  ++job_ends[end];
}

Response Handle(const Request& req) {
  Response res{http::status::ok, req.version()};
  res.keep_alive(req.keep_alive());
  res.set(http::field::content_type, "text/plain");
  const std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  if (req.method() == http::verb::post && path.starts_with("/v1/reports")) {
    const std::string key(req["Idempotency-Key"]);
    const std::string token(req["Idempotency-Fencing-Token"]);
    const std::string work = QueryParam(target, "work_ms");
    const int report = ++reports;
    {
      std::lock_guard lock(mu);
      ++jobs_by_key[key];
      token_by_key[key] = token;
    }
    if (QueryParam(target, "hold").empty()) {
      std::optional<std::string> tenant;
      if (auto it = req.find(http::field::authorization); it != req.end()) {
        tenant = std::string(it->value());
      }
      std::thread(RunJob, key, tenant, token, report,
                  work.empty() ? 1000 : std::stoi(work), !QueryParam(target, "fail").empty())
          .detach();
    }
    res.result(http::status::accepted);
    res.set(http::field::content_type, "application/json");
    res.set(http::field::location, "/v1/reports/" + std::to_string(report));
    res.set(http::field::retry_after, "1");
    res.body() = "{\"report\":" + std::to_string(report) + ",\"status\":\"running\"}";
  } else if (path == "/executions" || path == "/tokens") {
    const std::string key = QueryParam(target, "key");
    std::lock_guard lock(mu);
    res.body() = path == "/executions" ? std::to_string(jobs_by_key[key]) : token_by_key[key];
  } else if (path == "/jobs") {
    std::lock_guard lock(mu);
    std::string body = "{";
    for (const auto& [end, n] : job_ends) {
      body += (body.size() > 1 ? "," : "") + Quote(end) + ":" + std::to_string(n);
    }
    res.set(http::field::content_type, "application/json");
    res.body() = body + "}";
  } else {
    res.result(http::status::not_found);
    res.body() = "not found";
  }
  res.prepare_payload();
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || std::string_view(argv[2]) != "--admin") {
    std::cerr << "usage: long_running_service HOST:PORT --admin GATEWAY_ADMIN_HOST:PORT\n";
    return 2;
  }
  admin_address = argv[3];
  if (admin_address.rfind(':') == std::string::npos) {
    std::cerr << "long_running_service: the admin address must be HOST:PORT\n";
    return 2;
  }
  return ListenAndServe("long_running_service", argv[1],
                        [](tcp::socket socket) { ServeConnection(std::move(socket), Handle); });
}
