// Reading one client request off a connection: the header, the checks the gateway makes before
// it takes the body (request_checks.h), the answer to `Expect: 100-continue`, then the body.
// The request handed on is the one the gateway fingerprints and forwards: Expect removed (the
// gateway met it), trailer fields dropped, the target in origin-form.
#pragma once

#include <string>

#include "gateway/deadline_stream.h"
#include "gateway/http.h"
#include "gateway/request_checks.h"
#include "idem/clock.h"

namespace idem::gateway {

struct ReadResult {
  enum class Kind {
    kRequest,  // `request` holds a complete request
    kRefused,  // answer `refusal`, then close
    kClosed,   // the client went away, sent an incomplete request or timed out: close quietly
  };
  Kind kind = Kind::kClosed;
  Request request;
  Refusal refusal;
};

struct ReaderLimits {
  size_t max_header_bytes = 16 * 1024;  // larger -> 431
  size_t max_request_body = 1 << 20;    // larger -> 413
  Duration read_timeout = std::chrono::seconds(30);  // for the whole request
  // The tenant header, checked for duplicates with Idempotency-Key; empty: no identity checks
  // (the admin listener).
  std::string tenant_header;
};

// The longest chunk line (size and extensions) and trailer section a request may have; beyond
// it the request is refused with 400. The flat_buffer a session reads into must be made with
// ReaderBufferLimit(limits) so that nothing unbounded is buffered.
inline constexpr size_t kMaxChunkExtensionBytes = 4096;
size_t ReaderBufferLimit(const ReaderLimits& limits);

// Reads one request. `buffer` may already hold bytes of it (a keep-alive connection keeps what
// followed the previous request). The request's header fields take memory through
// `fields_allocator` (admin/http_message.h). Never throws.
Task<ReadResult> ReadRequest(DeadlineStream& stream, beast::flat_buffer& buffer,
                             const ReaderLimits& limits,
                             FieldsAllocator<char> fields_allocator = {});

}  // namespace idem::gateway
