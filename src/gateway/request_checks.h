// The checks a client request must pass before the gateway reads its body or acts on it, all in
// one place: message framing (RFC 9112 sections 5 and 6), the request target, the Expect header
// and the identity headers. Pure functions of the bytes or the parsed header.
//
// What Boost.Beast's parser (1.81) already refuses, and so is not checked again here: control
// characters (NUL, bare CR, bare LF, DEL) in the request line and in field values, whitespace
// in or after a field name, Content-Length together with Transfer-Encoding in either order, two
// Transfer-Encoding fields that both end in chunked, differing Content-Length values, a
// non-numeric or overflowing Content-Length, malformed or overflowing chunk sizes and chunk
// extensions, a chunk-size above the body limit (413).
//
// What Beast lets through and these checks refuse: obsolete line folding (Beast unfolds it),
// Transfer-Encoding that does not end in chunked (Beast then reads no body at all and takes
// the body as the next request: the desync), codings before chunked (Beast drops them),
// Transfer-Encoding on HTTP/1.0, parameters on chunked, header names that other servers read as
// Transfer-Encoding or Content-Length (Transfer_Encoding), a fragment or an unusable form of
// the request target, a bare LF ending a chunk line or trailer field (Beast waits for a CRLF
// that never comes), a missing Host (HTTP/1.1), several Host fields or a Host that is not
// host[:port] (RFC 9112 3.2), Expect values other than 100-continue, and duplicate identity
// headers.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "gateway/http.h"
#include "gateway/metrics.h"
#include "gateway/problem.h"

namespace idem::gateway {

// A request the gateway answers itself without reading further: the connection is closed
// after the answer, because what follows on it cannot be trusted to start a new request.
struct Refusal {
  Cause cause = Cause::kMalformedRequest;  // its answer: problem.h
  std::string detail;
  std::string method = "-";  // for the log line, once the request line is parsed
  std::string path = "-";
};

// Checks the raw bytes of a request's header as received, before they are parsed: `raw` is the
// start of the request, possibly incomplete. Refuses obsolete line folding (a line of the
// header block that starts with SP or HTAB, RFC 9112 5.2).
std::optional<Refusal> CheckHeaderBytes(std::string_view raw);

// Checks the bytes of a chunked body that the parser holds back because they do not yet end a
// chunk line or the trailer section (so never chunk data). Refuses a bare LF in them: chunk
// lines and trailer fields end in CRLF (RFC 9112 7.1), and Beast's parser, waiting for one,
// would otherwise wait until the read timeout.
std::optional<Refusal> CheckChunkFramingBytes(std::string_view pending);

// Checks a parsed request header. `tenant_header` empty skips the identity checks (the admin
// listener). Refusals: 400 malformed-request (framing, target, Host, duplicate tenant header),
// 501 unsupported-transfer-coding, 417 expectation-failed, 400 invalid-key (several keys).
std::optional<Refusal> CheckRequestHeader(const http::request_header<Fields>& header,
                                          std::string_view tenant_header);

// True when the client waits for `100 Continue` before it sends the body (HTTP/1.1 and
// Expect: 100-continue; CheckRequestHeader has refused any other expectation).
bool ExpectsContinue(const http::request_header<Fields>& header);

// The request target in origin-form: an absolute-form target ("http://host/a?b") reduced to its
// path and query ("/a?b", "/" for an empty path); any other target is returned as it is.
std::string OriginFormTarget(std::string_view target);

}  // namespace idem::gateway
