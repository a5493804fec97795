#include "gateway/request_reader.h"

#include <algorithm>
#include <functional>
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

ReadResult Refused(Refusal refusal) {
  ReadResult result;
  result.kind = ReadResult::Kind::kRefused;
  result.refusal = std::move(refusal);
  return result;
}

}  // namespace

size_t ReaderBufferLimit(const ReaderLimits& limits) { return limits.max_header_bytes + 16384; }

Task<ReadResult> ReadRequest(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                             const ReaderLimits& limits, FieldsAllocator<char> fields_allocator) {
  http::request_parser<http::string_body, FieldsAllocator<char>> parser(
      std::piecewise_construct, std::make_tuple(), std::make_tuple(fields_allocator));
  parser.header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser.body_limit(limits.max_request_body);
  bool extension_too_long = false;
  // A std::function, not a bare lambda: a coroutine frame holding a member of a type without
  // linkage draws g++'s -Wsubobject-linkage in a unity build.
  std::function<void(std::uint64_t, std::string_view, boost::system::error_code&)>
      on_chunk_header = [&extension_too_long](std::uint64_t, std::string_view extensions,
                                              boost::system::error_code& ec) {
        if (extensions.size() > kMaxChunkExtensionBytes) {
          extension_too_long = true;
          ec = http::error::bad_chunk_extension;
        }
      };
  parser.on_chunk_header(on_chunk_header);
  boost::system::error_code ec;
  stream.expires_after(limits.read_timeout);

  // 1. The header: the raw bytes are checked before Beast parses (and unfolds) them.
  for (;;) {
    if (auto refusal = CheckHeaderBytes(Bytes(buffer))) co_return Refused(std::move(*refusal));
    if (buffer.size() > 0) {
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (!ec && parser.is_header_done()) break;
      if (ec && ec != http::error::need_more) {
        auto refusal = RefusalFor(ec, false, parser.get());
        if (!refusal) co_return ReadResult{};
        co_return Refused(std::move(*refusal));
      }
      ec = {};
      if (used > 0) continue;
    }
    const size_t room = std::min<size_t>(4096, buffer.max_size() - buffer.size());
    if (room == 0) {
      Refusal refusal;
      refusal.cause = Cause::kHeadersTooLarge;
      refusal.detail = "the request header is larger than " +
                       std::to_string(limits.max_header_bytes) + " bytes";
      co_return Refused(std::move(refusal));
    }
    const size_t n = co_await stream.async_read_some(buffer.prepare(room),
                                                     asio::redirect_error(asio::use_awaitable, ec));
    buffer.commit(n);
    if (ec) co_return ReadResult{};  // gone, idle or slow mid-header: close quietly
  }

  // 2. The gateway's own checks, before it asks for or reads the body.
  if (auto refusal = CheckRequestHeader(parser.get(), limits.tenant_header)) {
    co_return Refused(std::move(*refusal));
  }

  // Belt and braces: the framing the checks accepted must be the framing Beast will read.
  if (parser.get().find(http::field::transfer_encoding) != parser.get().end() &&
      !parser.chunked()) {
    Refusal refusal;
    refusal.method = std::string(parser.get().method_string());
    refusal.path = std::string(TargetPath(parser.get().target()));
    refusal.detail = "Transfer-Encoding could not be read as chunked";
    co_return Refused(std::move(refusal));
  }

  // 3. The gateway reads the whole body before it forwards anything, so it meets the client's
  // Expect: 100-continue itself (and never forwards Expect: the upstream gets the body at once).
  const bool has_body =
      parser.chunked() || (parser.content_length() && *parser.content_length() > 0);
  if (has_body && buffer.size() == 0 && ExpectsContinue(parser.get())) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    co_await asio::async_write(stream, asio::buffer(kContinue.data(), kContinue.size()),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return ReadResult{};
  }

  // 4. The body.
  // Beast adds trailer fields (after a chunked body) to the header, each beside any field of the
  // same name; the header as it was before the body is kept to put back.
  std::optional<Fields> header_fields;
  if (parser.chunked()) header_fields.emplace(static_cast<const Fields&>(parser.get()));
  // The parser is fed by hand, not by http::async_read, so that the bytes it holds back can be
  // checked: it ends a chunk line only at a CRLF and, given bare LFs, would wait for more bytes
  // until the read timeout.
  parser.eager(true);  // each put() takes every chunk it can, leaving only an incomplete line
  while (!parser.is_done()) {
    if (buffer.size() > 0) {
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == http::error::need_more) ec = {};
      if (ec) {
        auto refusal = RefusalFor(ec, extension_too_long, parser.get());
        if (!refusal) co_return ReadResult{};
        co_return Refused(std::move(*refusal));
      }
      if (parser.is_done()) break;
      if (parser.chunked()) {
        if (auto refusal = CheckChunkFramingBytes(Bytes(buffer))) {
          refusal->method = std::string(parser.get().method_string());
          refusal->path = std::string(TargetPath(parser.get().target()));
          co_return Refused(std::move(*refusal));
        }
      }
    }
    const size_t room = std::min<size_t>(65536, buffer.max_size() - buffer.size());
    if (room == 0) {
      auto refusal = RefusalFor(http::error::buffer_overflow, false, parser.get());
      co_return Refused(std::move(*refusal));
    }
    const size_t n = co_await stream.async_read_some(buffer.prepare(room),
                                                     asio::redirect_error(asio::use_awaitable, ec));
    buffer.commit(n);
    if (ec) co_return ReadResult{};  // gone, idle or slow mid-body: close quietly
  }

  // 5. The request as the gateway fingerprints and forwards it.
  ReadResult result;
  result.kind = ReadResult::Kind::kRequest;
  result.request = parser.release();
  Request& request = result.request;
  // Beast appends trailer fields to the header; they are dropped (RFC 9110 6.5.1 lets a
  // recipient discard them), so a trailer can neither add an identity header nor be forwarded.
  if (header_fields && FieldCount(request) != FieldCount(*header_fields)) {
    static_cast<Fields&>(request) = std::move(*header_fields);
  }
  request.erase(http::field::expect);
  const std::string origin = OriginFormTarget(request.target());
  if (origin != request.target()) request.target(origin);
  co_return result;
}

}  // namespace idem::gateway
