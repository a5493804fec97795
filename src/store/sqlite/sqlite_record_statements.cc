#include "store/sqlite/sqlite_record_statements.h"

#include <string>
#include <utility>

#include "core/response_codec.h"

namespace idem::internal::sqlite {

Use& BindScope(Use& use, const Scope& scope) {
  return use.Text(1, scope.tenant).Text(2, scope.client).Text(3, scope.key);
}

Result<Decided> ReadAndDecide(const Statement& select, sqlite3* db, const Scope& scope,
                              const Fingerprint& fingerprint, TimePoint now) {
  Use use(select, db);
  BindScope(use, scope);
  auto row = use.Step("select");
  if (!row.ok()) return row.status();
  Decided decided;
  std::optional<RecordHead>& head = decided.head;
  if (*row) {
    auto read = ReadHead(use);
    if (!read.ok()) return read.status();
    head = *read;
  }
  const auto decision = internal::DecideBegin(head ? &*head : nullptr, fingerprint, now);
  decided.action = decision.action;
  switch (decision.action) {
    case BeginAction::kMismatch:
      decided.outcome = Mismatch{};
      break;
    case BeginAction::kInFlight: {
      InFlight in_flight{decision.retry_after, std::nullopt};
      if (!use.ColumnNull(column::kStatus)) {  // an accepted long-running operation
        auto accepted = ReadResponse(use, column::kStatus);
        if (!accepted.ok()) return accepted.status();
        in_flight.accepted = std::move(*accepted);
      }
      decided.outcome = std::move(in_flight);
      break;
    }
    case BeginAction::kReplay: {
      auto response = ReadResponse(use, column::kStatus);
      if (!response.ok()) return response.status();
      decided.outcome = Replay{std::move(*response)};
      break;
    }
    case BeginAction::kTakeOver:
      decided.previous_token = head->token;
      break;
    case BeginAction::kAcquire:
      break;
  }
  return decided;
}

Result<RecordHead> ReadHead(const Use& use) {
  auto fingerprint = Fingerprint::FromRaw(use.ColumnBytes(column::kFingerprint));
  if (!fingerprint.ok()) return fingerprint.status();
  const int64_t state = use.ColumnInt(column::kState);
  if (state != 1 && state != 2) {
    return DataLossError("record has unknown state " + std::to_string(state));
  }
  RecordHead head;
  head.fingerprint = *fingerprint;
  head.state = static_cast<RecordState>(state);
  head.token = static_cast<FencingToken>(use.ColumnInt(column::kToken));
  head.lease_deadline = FromMillis(use.ColumnInt(column::kLeaseDeadline));
  head.expires_at = FromMillis(use.ColumnInt(column::kExpires));
  return head;
}

Result<StoredResponse> ReadResponse(const Use& use, int first_column) {
  if (use.ColumnNull(first_column)) return DataLossError("completed record has no status");
  StoredResponse response;
  response.status = static_cast<int>(use.ColumnInt(first_column));
  auto headers = internal::DecodeHeaders(use.ColumnBytes(first_column + 1));
  if (!headers.ok()) return headers.status();
  response.headers = std::move(*headers);
  response.body = std::string(use.ColumnBytes(first_column + 2));
  return response;
}

}  // namespace idem::internal::sqlite
