// NATS subject matching, for the relay's check that its stream covers a row's subject before
// it publishes (a row the stream cannot take is parked instead of retried forever).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace idem::outbox {

// True when the literal `subject` matches `pattern`: tokens are separated by '.', a '*' token
// matches one token, a final '>' token matches one or more.
bool SubjectMatches(std::string_view pattern, std::string_view subject);

// True when any of `patterns` matches `subject`.
bool AnySubjectMatches(const std::vector<std::string>& patterns, std::string_view subject);

}  // namespace idem::outbox
