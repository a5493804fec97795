#include "idem/client.h"

#include <curl/curl.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <thread>

#include "core/text.h"
#include "core/transient_status.h"
#include "idem/keys.h"

namespace idem {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

uint64_t SecureRandom() {
  uint64_t v = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v) != 1) {
    // Jitter only spreads retries out; a failing RNG must not stop them.
    v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return v;
}

std::string FormatDuration(Duration d) {
  return d.count() % 1000 == 0 && d.count() > 0 ? std::to_string(d.count() / 1000) + " s"
                                                 : std::to_string(d.count()) + " ms";
}

size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

size_t WriteHeader(char* data, size_t size, size_t n, void* user) {
  auto* response = static_cast<ClientResponse*>(user);
  const std::string_view line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    response->headers.clear();  // a new response (after 100 Continue, or a redirect)
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    response->headers.emplace_back(std::string(Trim(line.substr(0, colon))),
                                   std::string(Trim(line.substr(colon + 1))));
  }
  return size * n;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

std::string ClientResponse::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (internal::EqualsIgnoreCase(n, name)) return v;
  }
  return {};
}

bool IsRetryableStatus(int status) {
  // 409 too: the gateway's key-in-flight, which this client's retry with the same key resolves.
  return internal::IsTransientHttpStatus(status, {.conflict = true});
}

Duration BackoffDelay(int retry, Duration base, Duration cap, uint64_t random) {
  int64_t ceiling = base.count();
  for (int i = 0; i < retry && ceiling < cap.count(); ++i) ceiling *= 2;
  ceiling = std::min(ceiling, cap.count());
  if (ceiling <= 0) return Duration(0);
  return Duration(static_cast<int64_t>(random % static_cast<uint64_t>(ceiling + 1)));
}

std::optional<Duration> ParseRetryAfter(std::string_view value, TimePoint now) {
  value = Trim(value);
  if (value.empty()) return std::nullopt;
  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (value.size() > 9) return Duration(int64_t{999'999'999} * 1000);
    return Duration(std::stoll(std::string(value)) * 1000);
  }
  const time_t when = curl_getdate(std::string(value).c_str(), nullptr);
  if (when < 0) return std::nullopt;
  return std::max(Duration(0), Duration(int64_t{when} * 1000 - ToMillis(now)));
}

Result<std::string> NewClientKey(ClientKeyType type) {
  switch (type) {
    case ClientKeyType::kUlid: return NewUlid();
    case ClientKeyType::kUuidV4: {
      auto u = NewUuidV4();
      if (!u.ok()) return u.status();
      return u->ToString();
    }
    case ClientKeyType::kUuidV7: break;
  }
  auto u = NewUuidV7();
  if (!u.ok()) return u.status();
  return u->ToString();
}

Transport CurlTransport(Duration connect_timeout) {
  return [connect_timeout](const ClientRequest& request,
                           Duration timeout) -> Result<ClientResponse> {
    GlobalInit();
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
    if (!curl) return InternalError("curl_easy_init failed");
    struct curl_slist* list = nullptr;
    for (const auto& [name, value] : request.headers) {
      list = curl_slist_append(list, (name + ": " + value).c_str());
    }
    if (!request.key.empty()) {
      list = curl_slist_append(list, ("Idempotency-Key: " + request.key).c_str());
    }
    list = curl_slist_append(list, "Expect:");  // no 100-continue round trip
    std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(list, curl_slist_free_all);

    ClientResponse response;
    char error[CURL_ERROR_SIZE] = {0};
    CURL* h = curl.get();
    curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    if (!request.body.empty() || request.method == "POST" || request.method == "PUT" ||
        request.method == "PATCH") {
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
      curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, request.body.c_str());
    }
    if (request.method == "HEAD") curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(1, timeout.count())));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(std::max<int64_t>(1, std::min(connect_timeout, timeout).count())));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &response.body);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, WriteHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &response);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);

    const CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK) {
      std::string what = error[0] != 0 ? error : curl_easy_strerror(rc);
      if (rc == CURLE_OPERATION_TIMEDOUT) return DeadlineExceededError(what);
      if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL) {
        return InvalidArgumentError(what);
      }
      return UnavailableError(what);
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    response.status = static_cast<int>(status);
    return response;
  };
}

RetryingClient::RetryingClient(ClientOptions options) : options_(std::move(options)) {
  if (!options_.clock) options_.clock = SystemClock();
  if (!options_.sleep) options_.sleep = [](Duration d) { std::this_thread::sleep_for(d); };
  if (!options_.random) options_.random = SecureRandom;
  if (!options_.transport) options_.transport = CurlTransport(options_.connect_timeout);
  options_.max_attempts = std::max(1, options_.max_attempts);
}

Result<CallResult> RetryingClient::Call(ClientRequest request) const {
  if (request.key.empty()) {
    auto key = NewClientKey(options_.key_type);
    if (!key.ok()) return key.status().WithContext("generating the Idempotency-Key");
    request.key = std::move(*key);
  }
  const Clock& clock = *options_.clock;
  const TimePoint deadline = clock.Now() + options_.deadline;
  const std::string for_key = " (Idempotency-Key " + request.key + ")";
  std::string last;
  for (int attempt = 1;; ++attempt) {
    const Duration remaining = deadline - clock.Now();
    if (remaining <= Duration(0)) {
      return DeadlineExceededError("gave up after " + std::to_string(attempt - 1) +
                                   " attempts: the deadline passed; last: " + last + for_key);
    }
    auto answer = options_.transport(request, std::min(options_.attempt_timeout, remaining));
    std::optional<Duration> retry_after;
    if (answer.ok()) {
      if (!IsRetryableStatus(answer->status)) {
        CallResult result;
        result.replayed = internal::EqualsIgnoreCase(Trim(answer->Header("Idempotent-Replayed")), "true");
        result.response = std::move(*answer);
        result.attempts = attempt;
        result.key = request.key;
        return result;
      }
      last = "HTTP " + std::to_string(answer->status);
      if (std::string ra = answer->Header("Retry-After"); !ra.empty()) {
        retry_after = ParseRetryAfter(ra, clock.Now());
        if (retry_after) last += " (Retry-After: " + ra + ")";
      }
    } else {
      const StatusCode code = answer.status().code();
      if (code != StatusCode::kUnavailable && code != StatusCode::kDeadlineExceeded) {
        return answer.status().WithContext("attempt " + std::to_string(attempt) + for_key);
      }
      last = answer.status().ToString();
    }
    if (attempt >= options_.max_attempts) {
      return UnavailableError("gave up after " + std::to_string(attempt) +
                              " attempts; last: " + last + for_key);
    }
    Duration wait = BackoffDelay(attempt - 1, options_.backoff_base, options_.backoff_cap,
                                 options_.random());
    if (retry_after) wait = std::max(wait, *retry_after);
    if (clock.Now() + wait >= deadline) {
      return DeadlineExceededError("gave up after " + std::to_string(attempt) +
                                   " attempts: waiting " + FormatDuration(wait) +
                                   " would pass the deadline; last: " + last + for_key);
    }
    if (options_.on_retry) options_.on_retry(attempt, last, wait);
    options_.sleep(wait);
  }
}

}  // namespace idem
