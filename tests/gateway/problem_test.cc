// The answer tables (src/gateway/problem.cc) and the docs (docs/reference/http.md, the table in
// docs/gateway.md) say the same: a row added, removed or changed on one side only fails here.
#include "gateway/problem.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "gateway/proxy.h"
#include "util/build_tree.h"

namespace idem::gateway {
namespace {

using Row = std::vector<std::string>;

// A page of docs/, e.g. "reference/http.md".
std::string ReadDocs(const std::string& page) {
  std::ifstream in(std::string(idem::build_tree::kSourceDir) + "/docs/" + page);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// The cells of a markdown table row ("| a | b |"); "\|" stays inside its cell.
Row Cells(const std::string& line) {
  Row cells;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      cells.push_back(Trim(cell));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

// The body rows of the first table whose header row starts with `first_header`.
std::vector<Row> Table(const std::string& docs, const std::string& first_header) {
  std::istringstream in(docs);
  std::string line;
  std::vector<Row> rows;
  bool in_table = false;
  while (std::getline(in, line)) {
    if (!in_table) {
      if (line.rfind("| " + first_header + " |", 0) == 0) {
        in_table = true;
        std::getline(in, line);  // the |---| line
      }
      continue;
    }
    if (line.empty() || line[0] != '|') break;
    rows.push_back(Cells(line));
  }
  return rows;
}

std::string Slug(Problem problem) {
  const std::string_view type = ProblemType(problem);
  return std::string(type.substr(type.rfind(':') + 1));
}

// The docs cells a row of the answer table must have, after its cause and HTTP cells.
Row ExpectedCells(const Answer& a) {
  Row cells;
  cells.push_back(a.problem ? "`" + Slug(*a.problem) + "`" : "—");
  cells.push_back(a.outcome ? "`" + std::string(OutcomeLabel(*a.outcome)) + "`" : "not counted");
  cells.push_back(a.log == LogLevel::kNone   ? "—"
                  : a.log == LogLevel::kWarn ? "warning `" + std::string(a.event) + "`"
                                             : "error `" + std::string(a.event) + "`");
  cells.push_back(a.retry_after == RetryAfter::kNone        ? "—"
                  : a.retry_after == RetryAfter::kOneSecond ? "1"
                                                            : "seconds left on the lease");
  cells.push_back(a.fail_open ? "forwards" : "—");
  return cells;
}

TEST(ProblemTest, TheDocsAnswerTableIsTheCodesTable) {
  const std::vector<Row> docs = Table(ReadDocs("reference/http.md"), "cause");
  ASSERT_FALSE(docs.empty()) << "docs/reference/http.md has no '| cause |' table";
  std::map<std::string, Row> by_cause;
  for (const Row& row : docs) {
    ASSERT_EQ(row.size(), 7u) << row[0];
    EXPECT_TRUE(by_cause.emplace(row[0], row).second) << "listed twice: " << row[0];
  }
  std::set<std::string> in_code;
  for (const AnswerRow& row : AllAnswers()) {
    const std::string cause(row.cause);
    in_code.insert(cause);
    auto it = by_cause.find(cause);
    if (it == by_cause.end()) {
      ADD_FAILURE() << "docs/reference/http.md's answer table has no row for " << cause;
      continue;
    }
    const Row& cells = it->second;
    if (row.answer->problem) {
      EXPECT_EQ(cells[1], std::to_string(static_cast<int>(ProblemStatus(*row.answer->problem))))
          << cause;
    } else {
      EXPECT_FALSE(std::isdigit(static_cast<unsigned char>(cells[1][0])))
          << cause << ": not a problem, so no status of the gateway's own";
    }
    EXPECT_EQ(Row(cells.begin() + 2, cells.end()), ExpectedCells(*row.answer)) << cause;
  }
  for (const auto& [cause, row] : by_cause) {
    EXPECT_TRUE(in_code.count(cause)) << "docs/reference/http.md lists " << cause
                                      << ", which the code's table does not have";
  }
}

TEST(ProblemTest, TheDocsProblemTypesAreTheCodesProblems) {
  // docs/reference/http.md: | status | slug | when | a retry with the same key |
  const std::vector<Row> docs = Table(ReadDocs("reference/http.md"), "status");
  ASSERT_FALSE(docs.empty()) << "docs/reference/http.md has no '| status |' table";
  std::map<std::string, Row> by_slug;
  for (const Row& row : docs) {
    ASSERT_EQ(row.size(), 4u) << row[1];
    EXPECT_TRUE(by_slug.emplace(row[1], row).second) << "listed twice: " << row[1];
  }
  for (size_t i = 0; i < static_cast<size_t>(Problem::kCount); ++i) {
    const auto problem = static_cast<Problem>(i);
    // Appended, not "`" + std::string(...): GCC 12.2 warns of a memcpy out of bounds in that
    // operator+ when it inlines it here (-Warray-bounds, a false report; GCC bug 105651).
    std::string slug = "`";
    slug.append(Slug(problem)).append("`");
    auto it = by_slug.find(slug);
    if (it == by_slug.end()) {
      ADD_FAILURE() << "docs/reference/http.md's statuses lack " << slug;
      continue;
    }
    EXPECT_EQ(it->second[0], std::to_string(static_cast<int>(ProblemStatus(problem)))) << slug;
    by_slug.erase(it);
  }
  for (const auto& [slug, row] : by_slug) ADD_FAILURE() << "docs list an unknown slug " << slug;
}

// docs/gateway.md's "what happens to a request" table: every "NNN `slug`" it promises is that
// problem's status.
TEST(ProblemTest, TheDocsSituationTableNamesRealProblems) {
  const std::vector<Row> docs = Table(ReadDocs("gateway.md"), "situation");
  ASSERT_GT(docs.size(), 10u);
  std::map<std::string, int> status_of;
  for (size_t i = 0; i < static_cast<size_t>(Problem::kCount); ++i) {
    status_of[Slug(static_cast<Problem>(i))] =
        static_cast<int>(ProblemStatus(static_cast<Problem>(i)));
  }
  const std::regex answer(R"((\d{3}) `([a-z-]+)`)");
  int problems_seen = 0;
  for (const Row& row : docs) {
    ASSERT_EQ(row.size(), 4u) << row[0];
    for (std::sregex_iterator m(row[1].begin(), row[1].end(), answer), end; m != end; ++m) {
      const std::string slug = (*m)[2];
      ASSERT_TRUE(status_of.count(slug)) << "unknown problem type " << slug << " in: " << row[0];
      EXPECT_EQ(std::stoi((*m)[1]), status_of[slug]) << slug << " in: " << row[0];
      ++problems_seen;
    }
  }
  EXPECT_GE(problems_seen, 8);
}

TEST(ProblemTest, EveryStatusCodeHasARow) {
  std::set<std::string> causes;
  for (const AnswerRow& row : AllAnswers()) causes.insert(std::string(row.cause));
  for (int code = 1; code < 64; ++code) {
    const std::string_view name = StatusCodeName(static_cast<StatusCode>(code));
    if (name == "UNKNOWN") continue;
    EXPECT_TRUE(causes.count("status `" + std::string(name) + "`")) << name;
    const Answer& answer = ProblemFor(Status(static_cast<StatusCode>(code), "x"));
    EXPECT_TRUE(answer.problem) << name;
    EXPECT_EQ(answer.outcome, Outcome::kStoreError) << name;
  }
}

TEST(ProblemTest, StatusesMapToTheirProblems) {
  const Answer& corrupt = ProblemFor(DataLossError("bad headers"));
  EXPECT_EQ(corrupt.problem, Problem::kRecordCorrupt);
  EXPECT_EQ(ProblemStatus(*corrupt.problem), http::status::internal_server_error);
  EXPECT_EQ(corrupt.log, LogLevel::kError);
  EXPECT_EQ(corrupt.event, "record_corrupt");
  EXPECT_FALSE(corrupt.fail_open) << "a corrupt record is never run again unprotected";

  // Sha256Hex and ComputeFingerprint report an OpenSSL failure as INTERNAL.
  const Answer& internal = ProblemFor(InternalError("OpenSSL SHA-256 failed"));
  EXPECT_EQ(internal.problem, Problem::kInternalError);
  EXPECT_EQ(ProblemStatus(*internal.problem), http::status::internal_server_error);
  EXPECT_EQ(internal.log, LogLevel::kError);

  // A store that is down or busy: retry the same request later (status.h).
  for (const Status& s : {UnavailableError("down"), DeadlineExceededError("slow"),
                          ResourceExhaustedError("queue full"), AbortedError("lost a race")}) {
    const Answer& a = ProblemFor(s);
    EXPECT_EQ(a.problem, Problem::kStoreUnavailable) << s.ToString();
    EXPECT_EQ(a.retry_after, RetryAfter::kOneSecond);
    EXPECT_TRUE(a.fail_open);
    EXPECT_EQ(a.log, LogLevel::kNone);
  }
  // A store that says "do not retry" (status.h) is never answered 503 + Retry-After: a bug or
  // a misconfiguration, 500 and logged.
  for (const Status& s : {InvalidArgumentError("bad"), NotFoundError("none"),
                          AlreadyExistsError("other contents"), FailedPreconditionError("gone")}) {
    const Answer& a = ProblemFor(s);
    EXPECT_EQ(a.problem, Problem::kInternalError) << s.ToString();
    EXPECT_EQ(a.retry_after, RetryAfter::kNone) << s.ToString();
    EXPECT_EQ(a.log, LogLevel::kError) << s.ToString();
    EXPECT_EQ(a.outcome, Outcome::kStoreError) << s.ToString();
  }
  EXPECT_EQ(ProblemFor(FailedPreconditionError("read-only")).event, "store_misconfigured");
  EXPECT_EQ(ProblemFor(InvalidArgumentError("bad")).event, "internal_error");
  EXPECT_TRUE(ProblemFor(FailedPreconditionError("read-only")).fail_open);
  EXPECT_FALSE(ProblemFor(AlreadyExistsError("x")).fail_open)
      << "something exists under the key: never run again unprotected";
  Response res = MakeProblem(ProblemFor(UnavailableError("down")), "d", 11, true);
  EXPECT_EQ(res.result(), http::status::service_unavailable);
  EXPECT_EQ(res[http::field::retry_after], "1");
  res = MakeProblem(ProblemFor(FailedPreconditionError("read-only")), "d", 11, true);
  EXPECT_EQ(res.result(), http::status::internal_server_error);
  EXPECT_TRUE(res[http::field::retry_after].empty());
  res = MakeProblem(ProblemFor(DataLossError("x")), "d", 11, true);
  EXPECT_EQ(res.result(), http::status::internal_server_error);
  EXPECT_TRUE(res[http::field::retry_after].empty());
  EXPECT_NE(res.body().find("urn:idem:problem:record-corrupt"), std::string::npos);
}

TEST(ProblemTest, ClaimsMapToTheirAnswers) {
  EXPECT_FALSE(ProblemFor(BeginOutcome(Acquired{1})).problem);
  EXPECT_EQ(ProblemFor(BeginOutcome(Acquired{1})).outcome, Outcome::kExecuted);
  const Answer& taken = ProblemFor(BeginOutcome(TakenOver{2, 1}));
  EXPECT_FALSE(taken.problem);
  EXPECT_EQ(taken.log, LogLevel::kWarn);
  EXPECT_EQ(taken.event, "takeover");
  EXPECT_FALSE(ProblemFor(BeginOutcome(Replay{{201, {}, "b"}})).problem);
  EXPECT_EQ(ProblemFor(BeginOutcome(Replay{{201, {}, "b"}})).outcome, Outcome::kReplayed);
  const Answer& not_stored =
      ProblemFor(BeginOutcome(Replay{{201, {{std::string(kNotStoredMarker), "9999"}}, ""}}));
  EXPECT_EQ(not_stored.problem, Problem::kResponseNotStored);
  EXPECT_EQ(not_stored.outcome, Outcome::kReplayed);
  const Answer& in_flight = ProblemFor(BeginOutcome(InFlight{Duration(1500)}));
  EXPECT_EQ(in_flight.problem, Problem::kKeyInFlight);
  EXPECT_EQ(in_flight.outcome, Outcome::kConflict);
  Response res = MakeProblem(in_flight, "d", 11, true, 2);
  EXPECT_EQ(res.result(), http::status::conflict);
  EXPECT_EQ(res[http::field::retry_after], "2");
  EXPECT_EQ(ProblemFor(BeginOutcome(Mismatch{})).problem, Problem::kKeyReused);
  EXPECT_EQ(ProblemFor(BeginOutcome(Mismatch{})).outcome, Outcome::kMismatch);
}

}  // namespace
}  // namespace idem::gateway
