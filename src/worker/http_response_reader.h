// HttpResponseReader: reads one HTTP/1.x response from bytes as they arrive on a connection,
// keeping only what `idem consume` uses of it (the status, Retry-After, the body, whether the
// connection may carry another request). One reader serves every response of a connection
// (Reset between them), so reading an answer allocates nothing beyond its body.
//
// The parsing is Boost.Beast's response parser; this class keeps what it reports. Bodies
// delimited by Content-Length, by chunked transfer coding (trailers are read past) or by the end
// of the connection are understood; interim responses (1xx, except 101) are read past.
//
// Thread safety: none; one connection's. Neither copied nor moved.
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace idem::worker {

class HttpResponseReader {
 public:
  enum class State {
    kMore,      // needs more bytes (or the end of the connection)
    kDone,      // a final response is complete
    kBad,       // not a usable HTTP/1.x response: error() says why
    kTooLarge,  // the body exceeds max_body
  };

  // A head (status line and fields), a chunk-size line or the trailers longer than this is
  // refused (kBad).
  static constexpr size_t kMaxHead = 64 * 1024;

  HttpResponseReader() = default;
  HttpResponseReader(const HttpResponseReader&) = delete;
  HttpResponseReader& operator=(const HttpResponseReader&) = delete;

  // Starts reading a new response whose body may be at most `max_body` bytes.
  void Reset(size_t max_body);

  // Reads from `bytes` (what arrived after the bytes already used), returns the new state and
  // sets `*used` to how many bytes of `bytes` it consumed. Bytes it did not consume (an
  // incomplete line, or what follows a complete response) are to be offered again, with more
  // after them. REQUIRES: state() is kMore.
  State Read(std::string_view bytes, size_t* used);
  // The connection ended (EOF) after everything offered: completes a body delimited by the end
  // of the connection; anything else incomplete becomes kBad.
  State End();

  State state() const { return state_; }
  int status() const { return status_; }
  // The final response's body; may be moved from once kDone.
  std::string& body() { return body_; }
  // The Retry-After field's value as sent (empty when absent).
  const std::string& retry_after() const { return retry_after_; }
  // Whether the connection may carry another request once this response is complete.
  bool keep_alive() const { return keep_alive_; }
  const std::string& error() const { return error_; }

 private:
  // Beast's push parser, reporting into the reader. Beast's parsers cannot be reset: one is
  // constructed in place (no allocation) for each response, and for each interim response.
  class Parser : public boost::beast::http::basic_parser<false> {
   public:
    explicit Parser(HttpResponseReader& reader);

   private:
    using error_code = boost::beast::error_code;
    using string_view = boost::beast::string_view;
    void on_request_impl(boost::beast::http::verb, string_view, string_view, int,
                         error_code&) override {}
    void on_response_impl(int code, string_view reason, int version, error_code& ec) override;
    void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                       error_code& ec) override;
    void on_header_impl(error_code&) override {}
    void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                           error_code& ec) override;
    size_t on_body_impl(string_view body, error_code& ec) override;
    void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
    size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) override;
    void on_finish_impl(error_code&) override {}

    HttpResponseReader& reader_;
  };

  // A whole final response in `bytes` (it starts there), read without Beast when it has the
  // plain form nearly every service answers with: HTTP/1.x, a status from 200 to 599 (not 204,
  // 304), fields of token names and printable values, a Content-Length, no Transfer-Encoding,
  // at most a plain Connection: close or keep-alive, and the whole body there. It reads what
  // Beast reads from such a response. Returns false, having changed nothing, for anything else
  // (an incomplete response among them), which Beast then reads.
  bool ReadPlain(std::string_view bytes, size_t* used);
  State Fail(std::string why);
  // Whether `*parser_` is reading an interim (1xx) response.
  bool Interim() const { return status_ < 200; }

  State state_ = State::kMore;
  std::optional<Parser> parser_;
  size_t max_body_ = 0;
  size_t head_used_ = 0;  // bytes of the current head consumed so far
  int status_ = 0;
  bool keep_alive_ = false;
  std::string body_;
  std::string retry_after_;
  std::string error_;
};

}  // namespace idem::worker
