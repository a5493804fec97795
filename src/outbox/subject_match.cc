#include "outbox/subject_match.h"

namespace idem::outbox {
namespace {

// Splits off the next '.'-separated token of `rest`; false when none is left.
bool NextToken(std::string_view& rest, std::string_view& token, bool& done) {
  if (done) return false;
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) {
    token = rest;
    done = true;
  } else {
    token = rest.substr(0, dot);
    rest.remove_prefix(dot + 1);
  }
  return true;
}

}  // namespace

bool SubjectMatches(std::string_view pattern, std::string_view subject) {
  if (pattern.empty() || subject.empty()) return false;
  bool pattern_done = false;
  bool subject_done = false;
  std::string_view p;
  std::string_view s;
  while (NextToken(pattern, p, pattern_done)) {
    if (p == ">") return pattern_done && NextToken(subject, s, subject_done);
    if (!NextToken(subject, s, subject_done)) return false;
    if (s.empty()) return false;
    if (p != "*" && p != s) return false;
  }
  return subject_done;
}

bool AnySubjectMatches(const std::vector<std::string>& patterns, std::string_view subject) {
  for (const auto& pattern : patterns) {
    if (SubjectMatches(pattern, subject)) return true;
  }
  return false;
}

bool IsSubjectPattern(std::string_view pattern) {
  if (pattern.empty()) return false;
  bool done = false;
  std::string_view token;
  while (NextToken(pattern, token, done)) {
    if (token.empty()) return false;
    for (char c : token) {
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') return false;
    }
    if (token == ">" && !done) return false;
  }
  return true;
}

bool PatternWithin(std::string_view inner, std::string_view outer) {
  if (!IsSubjectPattern(inner) || !IsSubjectPattern(outer)) return false;
  bool inner_done = false;
  bool outer_done = false;
  std::string_view i;
  std::string_view o;
  while (NextToken(outer, o, outer_done)) {
    if (!NextToken(inner, i, inner_done)) return false;  // outer wants more tokens
    if (o == ">") return true;                            // the rest: one or more, as inner
    if (i == ">") return false;                           // inner takes more than one token
    if (o != "*" && (i == "*" || i != o)) return false;
  }
  return inner_done;
}

bool AnyPatternCovers(const std::vector<std::string>& outers, std::string_view inner) {
  for (const auto& outer : outers) {
    if (PatternWithin(inner, outer)) return true;
  }
  return false;
}

}  // namespace idem::outbox
