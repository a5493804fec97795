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

}  // namespace idem::outbox
