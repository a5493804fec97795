#include "worker/http_response_reader.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

namespace idem::worker {

namespace http = boost::beast::http;

HttpResponseReader::Parser::Parser(HttpResponseReader& reader) : reader_(reader) {
  header_limit(kMaxHead);
  body_limit(reader.max_body_);
}

void HttpResponseReader::Parser::on_response_impl(int code, string_view, int, error_code& ec) {
  if (code < 100) {
    reader_.error_ = "invalid status " + std::to_string(code);
    ec = http::error::bad_status;
  } else if (code == 101) {
    reader_.error_ = "101 Switching Protocols, which idem consume does not support";
    ec = http::error::bad_status;
  }
  reader_.status_ = code;
}

void HttpResponseReader::Parser::on_field_impl(http::field name, string_view, string_view value,
                                               error_code&) {
  // Fields of the head only: trailers cannot change the answer.
  if (name == http::field::retry_after && !is_header_done()) {
    reader_.retry_after_.assign(value.data(), value.size());
  }
}

void HttpResponseReader::Parser::on_body_init_impl(
    const boost::optional<std::uint64_t>& content_length, error_code&) {
  if (content_length) reader_.body_.reserve(*content_length);  // within body_limit
}

size_t HttpResponseReader::Parser::on_body_impl(string_view body, error_code& ec) {
  if (reader_.body_.size() + body.size() > reader_.max_body_) {
    ec = http::error::body_limit;
    return 0;
  }
  reader_.body_.append(body.data(), body.size());
  return body.size();
}

size_t HttpResponseReader::Parser::on_chunk_body_impl(std::uint64_t, string_view body,
                                                      error_code& ec) {
  return on_body_impl(body, ec);
}

void HttpResponseReader::Reset(size_t max_body) {
  state_ = State::kMore;
  max_body_ = max_body;
  head_used_ = 0;
  status_ = 0;
  keep_alive_ = false;
  body_.clear();
  retry_after_.clear();
  error_.clear();
  parser_.emplace(*this);
}

HttpResponseReader::State HttpResponseReader::Fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
  keep_alive_ = false;
  return state_ = State::kBad;
}

HttpResponseReader::State HttpResponseReader::Read(std::string_view bytes, size_t* used) {
  *used = 0;
  while (state_ == State::kMore && *used < bytes.size()) {
    const bool in_head = !parser_->is_header_done();
    boost::beast::error_code ec;
    // Not eager: each call parses one step (the head, a chunk's size line, a piece of body), so
    // the bytes of a head are counted apart from the body's.
    const size_t n = parser_->put(boost::asio::buffer(bytes.data() + *used, bytes.size() - *used),
                                  ec);
    *used += n;
    if (in_head) head_used_ += n;
    if (ec == http::error::need_more) {
      // What Beast leaves unconsumed is part of a head, a chunk-size line or the trailers.
      if ((in_head ? head_used_ : 0) + (bytes.size() - *used) > kMaxHead) {
        return Fail(in_head ? "response head larger than 64 KiB"
                            : "chunk-size line or trailers larger than 64 KiB");
      }
      break;
    }
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return state_ = State::kTooLarge;
    }
    if (ec == http::error::header_limit) return Fail("response head larger than 64 KiB");
    if (ec) {
      // Where it went wrong, up to the end of that line.
      std::string_view at = bytes.substr(*used, 80);
      at = at.substr(0, at.find('\r'));
      return Fail("not a usable HTTP/1.x response (" + ec.message() + ") at '" + std::string(at) +
                  "'");
    }
    if (!parser_->is_done()) {
      if (n == 0) break;  // not reached: a step without an error consumes bytes
      continue;
    }
    if (Interim()) {  // the final response follows
      head_used_ = 0;
      retry_after_.clear();
      parser_.emplace(*this);
      continue;
    }
    keep_alive_ = parser_->keep_alive();
    state_ = State::kDone;
  }
  return state_;
}

HttpResponseReader::State HttpResponseReader::End() {
  if (state_ != State::kMore) return state_;
  if (!parser_->got_some()) return Fail("the connection closed before a response");
  boost::beast::error_code ec;
  parser_->put_eof(ec);
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    return state_ = State::kTooLarge;
  }
  if (ec || !parser_->is_done()) return Fail("the connection closed before the response's end");
  keep_alive_ = false;
  return state_ = State::kDone;
}

}  // namespace idem::worker
