// Beast aliases and small HTTP helpers shared by the gateway's files.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <initializer_list>
#include <string>
#include <string_view>

#include "admin/http_message.h"
#include "admin/listen_address.h"
#include "idem/status.h"

namespace idem::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

// The messages a listener reads and answers (admin/http_message.h): header fields with an
// allocator a connection can point at its own memory.
using admin::Fields;
using admin::FieldsAllocator;
using admin::Request;
using admin::Response;

template <typename T>
using Task = asio::awaitable<T>;

using admin::ParseListenAddress;  // "HOST:PORT" -> an endpoint to listen on

class DeadlineStream;  // deadline_stream.h

// Removes the hop-by-hop headers (RFC 9110 7.6.1), including those the Connection header names,
// except the names in `keep` (compared ignoring case): Connection cannot remove those.
template <bool kIsRequest>
void StripHopByHop(http::header<kIsRequest, Fields>& h,
                   std::initializer_list<std::string_view> keep = {});

// message.prepare_payload(), except when that would change nothing but the place of the
// Content-Length field in the header (a body, no Transfer-Encoding, and one Content-Length
// that already gives the body's size): then the message is left as it is. Setting a field in
// Beast takes it out of the header and puts a new one in at the end, a cost paid twice on
// every proxied request.
template <bool kIsRequest>
void PreparePayload(http::message<kIsRequest, http::string_body, Fields>& message);

// The request target split into path and query ("/a/b?x=1" -> "/a/b", "x=1").
std::string_view TargetPath(std::string_view target);
std::string_view TargetQuery(std::string_view target);

// The value of `name` in a query string, decoded (internal::PercentForm::kQuery: '+' is a
// space, a malformed escape is kept as written); empty if absent.
std::string QueryParam(std::string_view query, std::string_view name);

// The path a route is matched against: escapes of unreserved characters decoded, empty and "."
// segments dropped, ".." resolved ("/v1//a/../%70ay" -> "/v1/pay"). So an encoded or dotted
// path cannot slip past a route that an upstream normalising its paths would still reach.
// The request itself is forwarded and fingerprinted as sent.
std::string NormalizePathForRouting(std::string_view path);

// Writes `message` to `stream` with one gather write: its start line and fields serialized into
// `scratch` (reused across calls), then the body. A message with a chunked body goes through
// Beast's serializer instead. Completes with the error of the write, if any (never with
// http::error::end_of_stream, which Beast's http::async_write reports for a message that needs
// the connection closed: callers check keep_alive() for that). Returns true if the message went
// in one send, without an asynchronous operation (so without a pass of the event loop).
// REQUIRES: for a body that is not chunked, Content-Length already set (prepare_payload).
template <bool kIsRequest>
Task<bool> WriteMessage(DeadlineStream& stream,
                        http::message<kIsRequest, http::string_body, Fields>& message,
                        std::string& scratch, boost::system::error_code& ec);

}  // namespace idem::gateway
