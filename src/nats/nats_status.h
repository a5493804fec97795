// The one conversion of nats.c's errors (natsStatus, and the JetStream API's jsErrCode) into
// idem's: the relay and the consumers both use it, without linking each other.
#pragma once

#include <nats/nats.h>

#include <string>
#include <string_view>

#include "idem/status.h"

namespace idem::internal {

// nats.c's text for `s`, the detail nats.c recorded for it on this thread when there is one
// (`detail`, when given, instead: a PubAck error's text from the server), and the JetStream
// error code when there is one: "Timeout (detail) [JetStream error 10059]".
std::string NatsErrorText(natsStatus s, jsErrCode js_error = static_cast<jsErrCode>(0),
                          const char* detail = nullptr);

// "WHAT: " + NatsErrorText as a Status: timeouts -> kDeadlineExceeded, a missing stream or
// consumer -> kNotFound, bad arguments -> kInvalidArgument, everything else (lost or not yet
// made connections among them) kUnavailable. OK for NATS_OK.
Status FromNats(natsStatus s, std::string_view what,
                jsErrCode js_error = static_cast<jsErrCode>(0));

// Whether a connection failed with `s` (nats.c's text for it `text`) because the server refused
// its credentials (none, or wrong ones): retrying with the same ones will never connect.
bool NatsRefusedCredentials(natsStatus s, std::string_view text);

}  // namespace idem::internal
