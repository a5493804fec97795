#include "gateway/request_reader.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

namespace idem::gateway {
namespace {

std::string_view Bytes(const beast::flat_buffer& buffer) {
  return {static_cast<const char*>(buffer.data().data()), buffer.size()};
}

// How a parse error is answered; nullopt: the connection is closed without an answer (the
// client went away, timed out, or stopped mid-request).
std::optional<Refusal> RefusalFor(const boost::system::error_code& ec, bool extension_too_long,
                                  const Request& partial) {
  Refusal r;
  if (partial.method_string().size() > 0) {
    r.method = std::string(partial.method_string());
    r.path = std::string(TargetPath(partial.target()));
  }
  r.detail = ec.message();
  if (ec == http::error::body_limit) {
    r.cause = Cause::kBodyTooLarge;
  } else if (ec == http::error::header_limit) {
    r.cause = Cause::kHeadersTooLarge;
  } else if (extension_too_long) {
    r.detail = "a chunk extension is longer than " + std::to_string(kMaxChunkExtensionBytes) +
               " bytes";
  } else if (ec == http::error::buffer_overflow) {
    r.detail = "a chunk line or the trailer section is too long";
  } else if (&ec.category() != &http::make_error_code(http::error::bad_target).category() ||
             ec == http::error::end_of_stream || ec == http::error::partial_message) {
    return std::nullopt;
  }
  return r;
}

size_t FieldCount(const Fields& fields) {
  return static_cast<size_t>(std::distance(fields.begin(), fields.end()));
}

using Parser = http::request_parser<http::string_body, FieldsAllocator<char>>;

// Where a step of the read left it.
enum class Step {
  kMore,     // the parser needs more bytes than the buffer holds
  kDone,     // the step is complete
  kRefused,  // answer the refusal, then close
  kClosed,   // close quietly
};

// What the steps share besides the parser and the buffer.
struct ReadContext {
  const ReaderLimits& limits;
  const bool& extension_too_long;  // set by the parser's chunk header callback
  Refusal& refusal;                // filled in by a step that ends kRefused
};

// What RefusalFor says of `ec`, as a step.
Step RefusedOrClosed(const boost::system::error_code& ec, bool extension_too_long,
                     const Request& partial, Refusal& refusal) {
  auto refused = RefusalFor(ec, extension_too_long, partial);
  if (!refused) return Step::kClosed;
  refusal = std::move(*refused);
  return Step::kRefused;
}

// Names the request (method and path) in a refusal made after its header was read.
Step RefusedAfterHeader(const Parser& parser, Refusal& refusal) {
  refusal.method = std::string(parser.get().method_string());
  refusal.path = std::string(TargetPath(parser.get().target()));
  return Step::kRefused;
}

// Feeds the header bytes `buffer` holds to `parser`, checking the raw bytes before Beast parses
// (and unfolds) them. kMore: read more, with room in the buffer for them.
Step FeedHeader(Parser& parser, beast::flat_buffer& buffer, const ReadContext& context) {
  Refusal& refusal = context.refusal;
  boost::system::error_code ec;
  for (;;) {
    if (auto refused = CheckHeaderBytes(Bytes(buffer))) {
      refusal = std::move(*refused);
      return Step::kRefused;
    }
    if (buffer.size() == 0) break;
    const size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (!ec && parser.is_header_done()) return Step::kDone;
    if (ec && ec != http::error::need_more) return RefusedOrClosed(ec, false, parser.get(), refusal);
    ec = {};
    if (used == 0) break;
  }
  if (buffer.size() < buffer.max_size()) return Step::kMore;
  refusal.cause = Cause::kHeadersTooLarge;
  refusal.detail = "the request header is larger than " +
                   std::to_string(context.limits.max_header_bytes) + " bytes";
  return Step::kRefused;
}

// Feeds the body bytes `buffer` holds to `parser`. kMore: read more, with room in the buffer.
Step FeedBody(Parser& parser, beast::flat_buffer& buffer, const ReadContext& context) {
  Refusal& refusal = context.refusal;
  if (buffer.size() > 0) {
    boost::system::error_code ec;
    const size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more) ec = {};
    if (ec) return RefusedOrClosed(ec, context.extension_too_long, parser.get(), refusal);
    if (parser.is_done()) return Step::kDone;
    if (parser.chunked()) {
      if (auto refused = CheckChunkFramingBytes(Bytes(buffer))) {
        refusal = std::move(*refused);
        return RefusedAfterHeader(parser, refusal);
      }
    }
  }
  if (buffer.size() < buffer.max_size()) return Step::kMore;
  return RefusedOrClosed(http::error::buffer_overflow, false, parser.get(), refusal);
}

using Feed = Step (*)(Parser&, beast::flat_buffer&, const ReadContext&);

// Reads, at most `chunk` bytes at a time, until `feed` (FeedHeader or FeedBody) is done.
Task<Step> ReadUntilFed(DeadlineStream& stream, beast::flat_buffer& buffer, Parser& parser,
                        size_t chunk, Feed feed, const ReadContext& context) {
  Step step = Step::kMore;
  boost::system::error_code ec;
  while (step == Step::kMore) {
    const size_t room = std::min<size_t>(chunk, buffer.max_size() - buffer.size());
    const size_t n = co_await stream.async_read_some(buffer.prepare(room),
                                                     asio::redirect_error(asio::use_awaitable, ec));
    buffer.commit(n);
    if (ec) co_return Step::kClosed;  // gone, idle or slow mid-request: close quietly
    step = feed(parser, buffer, context);
  }
  co_return step;
}

// The gateway's own checks of a complete header, before it asks for or reads the body.
Step CheckHeader(const Parser& parser, const ReadContext& context) {
  Refusal& refusal = context.refusal;
  if (auto refused = CheckRequestHeader(parser.get(), context.limits.tenant_header)) {
    refusal = std::move(*refused);
    return Step::kRefused;
  }
  // Belt and braces: the framing the checks accepted must be the framing Beast will read.
  if (parser.get().find(http::field::transfer_encoding) != parser.get().end() &&
      !parser.chunked()) {
    refusal.detail = "Transfer-Encoding could not be read as chunked";
    return RefusedAfterHeader(parser, refusal);
  }
  return Step::kDone;
}

// Whether the client waits for `100 Continue` before it sends the body it announced.
bool AwaitsContinue(const Parser& parser, const beast::flat_buffer& buffer) {
  const bool has_body =
      parser.chunked() || (parser.content_length() && *parser.content_length() > 0);
  return has_body && buffer.size() == 0 && ExpectsContinue(parser.get());
}

// The gateway reads the whole body before it forwards anything, so it meets the client's
// Expect: 100-continue itself (and never forwards Expect: the upstream gets the body at once).
Task<Step> SendContinue(DeadlineStream& stream) {
  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  boost::system::error_code ec;
  co_await asio::async_write(stream, asio::buffer(kContinue.data(), kContinue.size()),
                             asio::redirect_error(asio::use_awaitable, ec));
  co_return ec ? Step::kClosed : Step::kDone;
}

// A chunked body. Beast adds trailer fields (after the body) to the header, each beside any
// field of the same name; they are dropped (RFC 9110 6.5.1 lets a recipient discard them), so a
// trailer can neither add an identity header nor be forwarded: the header as it was before the
// body is put back.
Task<Step> ReadChunkedBody(DeadlineStream& stream, beast::flat_buffer& buffer, Parser& parser,
                           const ReadContext& context) {
  Fields header_fields(static_cast<const Fields&>(parser.get()));
  Step step = FeedBody(parser, buffer, context);
  if (step == Step::kMore) {
    step = co_await ReadUntilFed(stream, buffer, parser, 65536, FeedBody, context);
  }
  if (step == Step::kDone && FieldCount(parser.get()) != FieldCount(header_fields)) {
    static_cast<Fields&>(parser.get()) = std::move(header_fields);
  }
  co_return step;
}

// The request as the gateway fingerprints and forwards it, from a parser that is done.
void TakeRequest(Parser& parser, ReadResult& result) {
  result.kind = ReadResult::Kind::kRequest;
  result.request = parser.release();
  Request& request = result.request;
  request.erase(http::field::expect);
  const std::string origin = OriginFormTarget(request.target());
  if (origin != request.target()) request.target(origin);
}

}  // namespace

// Refuses a chunk whose extensions are longer than kMaxChunkExtensionBytes. A named type outside
// the anonymous namespace, not a lambda (a coroutine frame holding a member of a type without
// linkage draws g++'s -Wsubobject-linkage in a unity build) nor a std::function (24 bytes more,
// which took ReadRequest's frame past what Asio recycles, so every request allocated it).
struct ChunkExtensionCheck {
  bool* too_long;
  void operator()(std::uint64_t, std::string_view extensions,
                  boost::system::error_code& ec) const {
    if (extensions.size() > kMaxChunkExtensionBytes) {
      *too_long = true;
      ec = http::error::bad_chunk_extension;
    }
  }
};

size_t ReaderBufferLimit(const ReaderLimits& limits) { return limits.max_header_bytes + 16384; }

// Each step that waits is a coroutine of its own, entered only when the buffer does not already
// hold what the step needs, and the rest are plain functions: Asio recycles a coroutine frame
// only up to about 1 KiB, so one large frame per request would reach the heap every time.
Task<ReadResult> ReadRequest(DeadlineStream& stream, beast::flat_buffer& buffer,
                             const ReaderLimits& limits, FieldsAllocator<char> fields_allocator) {
  ReadResult result;
  Parser parser(std::piecewise_construct, std::make_tuple(), std::make_tuple(fields_allocator));
  parser.header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser.body_limit(limits.max_request_body);
  bool extension_too_long = false;
  ChunkExtensionCheck on_chunk_header{&extension_too_long};
  parser.on_chunk_header(on_chunk_header);
  stream.expires_after(limits.read_timeout);
  const ReadContext context{limits, extension_too_long, result.refusal};

  // 1. The header. 2. The gateway's own checks. 3. Expect: 100-continue.
  Step step = FeedHeader(parser, buffer, context);
  if (step == Step::kMore) {
    step = co_await ReadUntilFed(stream, buffer, parser, 4096, FeedHeader, context);
  }
  if (step == Step::kDone) step = CheckHeader(parser, context);
  if (step == Step::kDone && AwaitsContinue(parser, buffer)) step = co_await SendContinue(stream);

  // 4. The body. The parser is fed by hand, not by http::async_read, so that the bytes it holds
  // back can be checked: it ends a chunk line only at a CRLF and, given bare LFs, would wait for
  // more bytes until the read timeout.
  parser.eager(true);  // each put() takes every chunk it can, leaving only an incomplete line
  if (step == Step::kDone && parser.chunked()) {
    step = co_await ReadChunkedBody(stream, buffer, parser, context);
  } else if (step == Step::kDone && !parser.is_done()) {
    step = FeedBody(parser, buffer, context);
    if (step == Step::kMore) {
      step = co_await ReadUntilFed(stream, buffer, parser, 65536, FeedBody, context);
    }
  }

  // 5. The request as the gateway fingerprints and forwards it.
  if (step == Step::kDone) TakeRequest(parser, result);
  if (step == Step::kRefused) result.kind = ReadResult::Kind::kRefused;
  co_return std::move(result);
}

}  // namespace idem::gateway
