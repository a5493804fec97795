// NATS subject matching, for the relay: which rows its subjects take, and whether the subjects
// it was told to take (--subjects) lie within its stream's.
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

// True when `pattern` is a subject pattern NATS accepts: non-empty tokens separated by '.',
// no whitespace, '>' only as the last token. ('*' and '>' inside a longer token are literal.)
bool IsSubjectPattern(std::string_view pattern);

// True when every subject `inner` matches, `outer` matches too (both valid patterns).
bool PatternWithin(std::string_view inner, std::string_view outer);

// True when one of `outers` takes every subject `inner` matches. (A pattern covered only by
// several of them together, "a.*" by "a.b" and "a.c" say, is not: no such cover is complete.)
bool AnyPatternCovers(const std::vector<std::string>& outers, std::string_view inner);

}  // namespace idem::outbox
