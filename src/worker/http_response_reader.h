// HttpResponseReader: reads one HTTP/1.x response from bytes as they arrive on a connection,
// keeping only what `idem consume` uses of it (the status, Retry-After, the body, whether the
// connection may carry another request). One reader serves every response of a connection
// (Reset between them), so reading an answer allocates nothing beyond its body.
//
// Bodies delimited by Content-Length, by chunked transfer coding (trailers are read past) or by
// the end of the connection are understood; interim responses (1xx, except 101) are read past.
//
// Thread safety: none; one connection's.
#pragma once

#include <cstddef>
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

  // A head (status line and fields) longer than this is refused (kBad).
  static constexpr size_t kMaxHead = 64 * 1024;

  // Starts reading a new response whose body may be at most `max_body` bytes.
  void Reset(size_t max_body);

  // Reads from `bytes` (what arrived after the bytes already used), returns the new state and
  // sets `*used` to how many bytes of `bytes` it consumed. Bytes it did not consume (an
  // incomplete head, or what follows a complete response) are to be offered again, with more
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
  enum class Phase { kHead, kLength, kChunkSize, kChunkData, kChunkEnd, kTrailers, kUntilEnd };

  State Fail(std::string why);
  // Parses a complete head (without its final empty line); sets up the body's phase.
  State Head(std::string_view head);
  State Body(std::string_view bytes, size_t* used);
  State Append(std::string_view bytes);

  State state_ = State::kMore;
  Phase phase_ = Phase::kHead;
  size_t max_body_ = 0;
  size_t remaining_ = 0;  // kLength, kChunkData: bytes of body still expected
  int status_ = 0;
  bool keep_alive_ = false;
  std::string body_;
  std::string retry_after_;
  std::string error_;
};

}  // namespace idem::worker
