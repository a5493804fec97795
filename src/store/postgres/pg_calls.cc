#include "store/postgres/pg_calls.h"

#include <openssl/evp.h>

#include "core/response_codec.h"

namespace idem::internal::pg {
namespace {

void AppendLengthPrefixed(std::string& out, std::string_view part) {
  const uint32_t n = static_cast<uint32_t>(part.size());
  out.push_back(static_cast<char>(n >> 24));
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  out.append(part);
}

// The parameters every call that may insert a row starts with: scope id, tenant, client,
// key, fingerprint.
PgParams RowParams(const Scope& scope, const Fingerprint& fingerprint) {
  PgParams params;
  params.Bytes(ScopeId(scope))
      .Text(scope.tenant)
      .Text(scope.client)
      .Text(scope.key)
      .Bytes(std::string(fingerprint.raw()));
  return params;
}

PgParams& AddNow(PgParams& params, NowParam now) {
  return now ? params.Int(ToMillis(*now)) : params.Null();
}

}  // namespace

std::string ScopeId(const Scope& scope) {
  std::string encoded;
  encoded.reserve(12 + scope.tenant.size() + scope.client.size() + scope.key.size());
  AppendLengthPrefixed(encoded, scope.tenant);
  AppendLengthPrefixed(encoded, scope.client);
  AppendLengthPrefixed(encoded, scope.key);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(encoded.data(), encoded.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    // OpenSSL without SHA-256 is a broken installation; fall back to the encoding itself,
    // which is still unambiguous (only longer).
    return encoded;
  }
  return std::string(reinterpret_cast<const char*>(digest), size);
}

NowParam NowFor(const std::shared_ptr<Clock>& clock) {
  if (clock == nullptr || clock.get() == SystemClock().get()) return std::nullopt;
  return clock->Now();
}

PgParams BeginParams(const Scope& scope, const Fingerprint& fingerprint, Duration lease,
                     Duration abandoned_retention, NowParam now) {
  PgParams params = RowParams(scope, fingerprint);
  params.Int(lease.count()).Int(abandoned_retention.count());
  return std::move(AddNow(params, now));
}

PgParams CompleteParams(const Scope& scope, FencingToken token, const StoredResponse& response,
                        Duration ttl, NowParam now) {
  PgParams params;
  params.Bytes(ScopeId(scope))
      .Int(static_cast<int64_t>(token))
      .Bytes(EncodeResponse(response))
      .Int(ttl.count());
  return std::move(AddNow(params, now));
}

PgParams AcceptParams(const Scope& scope, FencingToken token, const StoredResponse& accepted,
                      Duration lease, Duration abandoned_retention, NowParam now) {
  PgParams params;
  params.Bytes(ScopeId(scope))
      .Int(static_cast<int64_t>(token))
      .Bytes(EncodeResponse(accepted))
      .Int(lease.count())
      .Int(abandoned_retention.count());
  return std::move(AddNow(params, now));
}

PgParams TierBeginParams(const Scope& scope, const Fingerprint& fingerprint, Duration lease,
                         Duration abandoned_retention, FencingToken token_floor, NowParam now) {
  PgParams params = RowParams(scope, fingerprint);
  params.Int(lease.count())
      .Int(abandoned_retention.count())
      .Int(static_cast<int64_t>(token_floor));
  return std::move(AddNow(params, now));
}

PgParams TierSettleParams(const Scope& scope, const Fingerprint& fingerprint, FencingToken token,
                          RecordState state, const StoredResponse& response, Duration keep,
                          Duration abandoned_retention, NowParam now) {
  PgParams params = RowParams(scope, fingerprint);
  params.Int(static_cast<int64_t>(token))
      .Int(static_cast<int64_t>(state))
      .Bytes(EncodeResponse(response))
      .Int(keep.count())
      .Int(abandoned_retention.count());
  return std::move(AddNow(params, now));
}

PgParams ReleaseParams(const Scope& scope, FencingToken token, NowParam now) {
  PgParams params;
  params.Bytes(ScopeId(scope)).Int(static_cast<int64_t>(token));
  return std::move(AddNow(params, now));
}

PgParams PurgeParams(const Scope& scope, NowParam now) {
  PgParams params;
  params.Bytes(ScopeId(scope));
  return std::move(AddNow(params, now));
}

PgParams GetParams(const Scope& scope, NowParam now) { return PurgeParams(scope, now); }

Result<BeginOutcome> DecodeBegin(const PGresult* result) {
  IDEM_RETURN_IF_ERROR(ExpectOneRow(result, 5));
  auto outcome = ColumnInt(result, 0, 0);
  if (!outcome.ok()) return outcome.status();
  switch (*outcome) {
    case 1:
    case 2: {
      auto token = ColumnInt(result, 0, 1);
      if (!token.ok()) return token.status();
      if (*outcome == 1) return BeginOutcome(Acquired{static_cast<FencingToken>(*token)});
      auto previous = ColumnInt(result, 0, 2);
      if (!previous.ok()) return previous.status();
      return BeginOutcome(TakenOver{static_cast<FencingToken>(*token),
                                    static_cast<FencingToken>(*previous)});
    }
    case 3: {
      if (ColumnIsNull(result, 0, 4)) return DataLossError("completed record has no response");
      auto response = DecodeResponse(ColumnBytes(result, 0, 4));
      if (!response.ok()) return response.status();
      return BeginOutcome(Replay{std::move(*response)});
    }
    case 4: {
      auto retry = ColumnInt(result, 0, 3);
      if (!retry.ok()) return retry.status();
      InFlight in_flight{Duration(std::max<int64_t>(1, *retry)), std::nullopt};
      if (!ColumnIsNull(result, 0, 4)) {  // an accepted long-running operation
        auto accepted = DecodeResponse(ColumnBytes(result, 0, 4));
        if (!accepted.ok()) return accepted.status();
        in_flight.accepted = std::move(*accepted);
      }
      return BeginOutcome(std::move(in_flight));
    }
    case 5:
      return BeginOutcome(Mismatch{});
  }
  return DataLossError("idem_begin returned unknown outcome " + std::to_string(*outcome));
}

Result<std::optional<Record>> DecodeGet(const PGresult* result, const Scope& scope) {
  if (PQntuples(result) == 0) return std::optional<Record>();
  IDEM_RETURN_IF_ERROR(ExpectOneRow(result, 7));
  auto fingerprint = Fingerprint::FromRaw(ColumnBytes(result, 0, 0));
  if (!fingerprint.ok()) return fingerprint.status();
  int64_t ints[5];
  for (int i = 0; i < 5; ++i) {
    auto v = ColumnInt(result, 0, i + 1);
    if (!v.ok()) return v.status();
    ints[i] = *v;
  }
  if (ints[0] != 1 && ints[0] != 2) {
    return DataLossError("record has unknown state " + std::to_string(ints[0]));
  }
  Record record;
  record.scope = scope;
  record.fingerprint = *fingerprint;
  record.state = static_cast<RecordState>(ints[0]);
  record.token = static_cast<FencingToken>(ints[1]);
  record.lease_deadline = FromMillis(ints[2]);
  record.created_at = FromMillis(ints[3]);
  record.expires_at = FromMillis(ints[4]);
  if (record.state == RecordState::kCompleted && ColumnIsNull(result, 0, 6)) {
    return DataLossError("completed record has no response");
  }
  if (!ColumnIsNull(result, 0, 6)) {  // the final response, or an accepted one in flight
    auto response = DecodeResponse(ColumnBytes(result, 0, 6));
    if (!response.ok()) return response.status();
    (record.state == RecordState::kCompleted ? record.response : record.accepted) =
        std::move(*response);
  }
  return std::optional<Record>(std::move(record));
}

}  // namespace idem::internal::pg
