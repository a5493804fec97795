#include "call_command.h"

#include <iostream>

#include "idem/client.h"
#include "idem/gateway_options.h"
#include "subcommand.h"

namespace idem::cli {
namespace {

constexpr const char* kCallDescription =
    "Send one HTTP request, retrying it safely. One Idempotency-Key is made for the call\n"
    "(or given with --key) and sent with every attempt, so a server behind idem gateway\n"
    "executes it at most once. Retries connection failures, timeouts, 5xx, 408, 409 and\n"
    "429 with full-jitter exponential backoff, waiting at least what Retry-After asks;\n"
    "never retries 422 or another 4xx.\n\n"
    "Prints the final response body on stdout and one line on stderr: the status, the\n"
    "attempts, whether the answer was a replay, and the key (to resume with --key).\n"
    "Exit code: 0 for a final 1xx-3xx answer, 1 for a final 4xx or 5xx answer, 2 for bad\n"
    "arguments, 3 when it gave up (attempts or deadline exhausted).\n\n"
    "Example:\n"
    "  idem call -d '{\"amount\":250}' -H 'Content-Type: application/json' \\\n"
    "            http://127.0.0.1:8080/v1/payments";

struct CallFlags {
  std::string url;
  std::string method;
  std::string body;
  bool has_body = false;
  std::vector<std::string> headers;
  std::string key;
  std::string key_type = "uuidv7";
  int attempts = 5;
  std::string deadline = "30s";
  std::string timeout = "10s";
  bool verbose = false;
};

void AddCallFlags(CLI::App& cmd, CallFlags& flags) {
  cmd.add_option("url", flags.url, "http://HOST:PORT/PATH")->required();
  cmd.add_option("-X,--request", flags.method, "Method (default: POST with -d, else GET)");
  cmd.add_option("-d,--data", flags.body, "Request body")
      ->each([&flags](const std::string&) { flags.has_body = true; });
  cmd.add_option("-H,--header", flags.headers, "'Name: value', repeatable");
  cmd.add_option("--key", flags.key, "Idempotency-Key to send (default: a fresh one)");
  cmd.add_option("--key-type", flags.key_type, "Type of a fresh key")
      ->check(CLI::IsMember({"uuidv7", "uuidv4", "ulid"}))
      ->capture_default_str();
  cmd.add_option("--attempts", flags.attempts, "Attempts at most, the first included")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd.add_option("--deadline", flags.deadline, "For the whole call, waits included")
      ->capture_default_str();
  cmd.add_option("--timeout", flags.timeout, "Per attempt")->capture_default_str();
  cmd.add_flag("-v,--verbose", flags.verbose, "Print each failed attempt and the wait on stderr");
}

// The request: the URL, the method (POST with a body, else GET), the body, the headers.
Result<ClientRequest> CallRequestFromFlags(const CallFlags& flags) {
  ClientRequest request;
  request.url = flags.url;
  request.body = flags.body;
  request.method = !flags.method.empty() ? flags.method : flags.has_body ? "POST" : "GET";
  request.key = flags.key;
  for (const std::string& h : flags.headers) {
    const size_t colon = h.find(':');
    if (colon == std::string::npos || colon == 0) {
      return InvalidArgumentError("header '" + h + "' is not 'Name: value'");
    }
    std::string value = h.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    request.headers.emplace_back(h.substr(0, colon), value);
  }
  return request;
}

// How the call retries: attempts, deadline and timeout, the key's type, what -v prints.
Result<ClientOptions> CallOptionsFromFlags(const CallFlags& flags) {
  auto deadline = ParseDuration(flags.deadline);
  auto timeout = ParseDuration(flags.timeout);
  if (!deadline.ok() || !timeout.ok()) return (deadline.ok() ? timeout : deadline).status();
  ClientOptions options;
  options.max_attempts = flags.attempts;
  options.deadline = *deadline;
  options.attempt_timeout = *timeout;
  options.key_type = flags.key_type == "ulid"     ? ClientKeyType::kUlid
                     : flags.key_type == "uuidv4" ? ClientKeyType::kUuidV4
                                                  : ClientKeyType::kUuidV7;
  if (flags.verbose) {
    options.on_retry = [](int attempt, const std::string& why, Duration wait) {
      std::cerr << "idem call: attempt " << attempt << ": " << why << "; retrying in "
                << wait.count() << " ms\n";
    };
  }
  return options;
}

// Sends the request; the body on stdout, a summary on stderr; the exit code.
int RunCall(ClientRequest request, ClientOptions options) {
  auto result = RetryingClient(std::move(options)).Call(std::move(request));
  if (!result.ok()) {
    std::cerr << "idem call: " << result.status().ToString() << "\n";
    return 3;
  }
  std::cout << result->response.body << std::flush;
  std::cerr << "idem call: HTTP " << result->response.status << ", attempts "
            << result->attempts << ", replayed " << (result->replayed ? "yes" : "no")
            << ", key " << result->key << "\n";
  return result->response.status >= 400 ? 1 : 0;
}

int RunCallCommand(const CallFlags& flags) {
  auto bad_arguments = [](const Status& status) {
    std::cerr << "idem call: " << status.message() << "\n";
    return 2;
  };
  auto options = CallOptionsFromFlags(flags);
  if (!options.ok()) return bad_arguments(options.status());
  auto request = CallRequestFromFlags(flags);
  if (!request.ok()) return bad_arguments(request.status());
  return RunCall(std::move(*request), std::move(*options));
}

}  // namespace

std::function<int()> AddCallCommand(CLI::App& app) {
  return AddSubcommand<CallFlags>(app, "call", kCallDescription, AddCallFlags, RunCallCommand);
}

}  // namespace idem::cli
