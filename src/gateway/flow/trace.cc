#include "gateway/flow/trace.h"

namespace idem::gateway::flow {

double MillisSince(SteadyClock::time_point start) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
}

Trace::Trace(Services& services, const Request& request)
    : s_(services),
      method_(request.method_string()),
      path_(TargetPath(request.target())),
      arrival_(services.clock()->Now()) {}

std::string_view Trace::key_digest() const {
  if (key_digest_.empty() && scope_ != nullptr && !scope_->key.empty()) {
    key_digest_ = internal::ScopeDigest(*scope_);
  }
  return key_digest_.view();
}

void Trace::Finish(const Answer& answer, const Response& response) {
  Finish(answer.outcome.value_or(Outcome::kRejected), response);
}

void Trace::Finish(Outcome outcome, const Response& response) {
  s_.metrics.Count(outcome);
  const double ms = MillisSince(start_);
  s_.metrics.request_seconds().Observe(ms / 1000.0);
  // With the request log off, a request is logged only if it has a reason to tell (an error).
  if (!s_.options.request_log && detail.empty()) return;
  s_.log.Request({method_, path_, static_cast<int>(response.result_int()), OutcomeLabel(outcome),
                  key_digest(), token, ms, detail});
}

StoreTimer::~StoreTimer() { metrics_.store_seconds().Observe(MillisSince(started_) / 1000.0); }

}  // namespace idem::gateway::flow
