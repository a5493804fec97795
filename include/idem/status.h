// Status and Result<T>: how idem reports infrastructure failures.
//
// idem has two registers of "not the happy path":
//   * Outcomes of the idempotency protocol (a replay, a conflicting duplicate, a fingerprint
//     mismatch, a fenced zombie) are ordinary values; see store.h.
//   * Failures of the machinery underneath (a store that is down, a corrupt row, a bad argument)
//     are a Status with a code and a message that names the operation.
// No exception crosses a public idem interface.
//
// Thread safety: Status and Result are values; distinct objects may be used from any thread.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace idem {

// The codes follow abseil's vocabulary, because their comments answer the question a caller has
// to answer: should I retry, and at which level?
enum class StatusCode : int {
  kOk = 0,
  // The caller passed something malformed (a bad key, an unknown store URL). Do not retry.
  kInvalidArgument = 3,
  // The operation's deadline passed before the engine answered. Retrying may help.
  kDeadlineExceeded = 4,
  // A named thing does not exist (a file, a record an operator asked for).
  kNotFound = 5,
  // What the caller tried to create exists already with other contents (a ledger txn id
  // reused for another account or amount). Do not retry: the caller has a bug or a collision.
  kAlreadyExists = 6,
  // A bounded resource is full (the store executor's queue). Retry after backing off.
  kResourceExhausted = 8,
  // The system is not in a state that allows the operation (schema from a newer idem version,
  // store opened read-only). Do not retry until an operator fixes the state.
  kFailedPrecondition = 9,
  // A concurrency conflict was lost at a level the caller should retry as a whole.
  kAborted = 10,
  // An invariant broke inside idem. A bug; report it.
  kInternal = 13,
  // The engine cannot be reached or is busy (I/O error, SQLITE_BUSY, connection refused).
  // Retrying the same call later is the right response.
  kUnavailable = 14,
  // Stored data cannot be decoded. Never retry silently; log loudly.
  kDataLoss = 15,
};

// Returns "OK", "INVALID_ARGUMENT", ... for logs and problem responses.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  // An OK status.
  Status() = default;
  // REQUIRES: code != kOk, or message is empty.
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "UNAVAILABLE: sqlite begin: database is locked".
  std::string ToString() const;

  // Returns a copy whose message is "context: <old message>", so each layer can say what it was
  // doing without losing what the layer below said.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status&, const Status&) = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgumentError(std::string message);
Status DeadlineExceededError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status ResourceExhaustedError(std::string message);
Status FailedPreconditionError(std::string message);
Status AbortedError(std::string message);
Status InternalError(std::string message);
Status UnavailableError(std::string message);
Status DataLossError(std::string message);

// Either a T or a non-OK Status. Constructing a Result from an OK Status is a bug (asserted in
// debug builds, turned into kInternal in release builds).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status)                          // NOLINT(google-explicit-constructor)
      : data_(status.ok() ? InternalError("Result constructed from an OK status")
                          : std::move(status)) {
    assert(!std::get<Status>(data_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  // Returns OK when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(data_); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace idem

// Returns early from the enclosing function with the status if it is not OK.
#define IDEM_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::idem::Status idem_status_ = (expr);     \
    if (!idem_status_.ok()) return idem_status_; \
  } while (false)
