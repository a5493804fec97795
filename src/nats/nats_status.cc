#include "nats/nats_status.h"

namespace idem::internal {

std::string NatsErrorText(natsStatus s, jsErrCode js_error, const char* detail) {
  std::string text = natsStatus_GetText(s);
  if (detail == nullptr) {
    natsStatus last = NATS_OK;
    detail = nats_GetLastError(&last);
    if (last != s) detail = nullptr;  // another call's
  }
  if (detail != nullptr && *detail != '\0' && text != detail) {
    text += std::string(" (") + detail + ")";
  }
  if (js_error != 0) {
    text += " [JetStream error " + std::to_string(static_cast<int>(js_error)) + "]";
  }
  return text;
}

Status FromNats(natsStatus s, std::string_view what, jsErrCode js_error) {
  if (s == NATS_OK) return Status::Ok();
  std::string message = std::string(what) + ": " + NatsErrorText(s, js_error);
  if (js_error == JSStreamNotFoundErr || js_error == JSConsumerNotFoundErr) {
    return NotFoundError(std::move(message));
  }
  switch (s) {
    case NATS_TIMEOUT: return DeadlineExceededError(std::move(message));
    case NATS_NOT_FOUND: return NotFoundError(std::move(message));
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBJECT:
    case NATS_INVALID_SUBSCRIPTION: return InvalidArgumentError(std::move(message));
    default: return UnavailableError(std::move(message));
  }
}

bool NatsRefusedCredentials(natsStatus s, std::string_view text) {
  return s == NATS_CONNECTION_AUTH_FAILED || s == NATS_NOT_PERMITTED ||
         text.find("Authorization Violation") != std::string_view::npos;
}

}  // namespace idem::internal
