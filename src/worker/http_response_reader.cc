#include "worker/http_response_reader.h"

#include <charconv>

#include "core/text.h"

namespace idem::worker {
namespace {

using internal::EqualsIgnoreCase;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether the comma-separated list `value` holds `token` (ignoring case).
bool ListHas(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (EqualsIgnoreCase(Trim(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

// The last element of the comma-separated list `value`.
std::string_view LastOf(std::string_view value) {
  const size_t comma = value.rfind(',');
  return Trim(comma == std::string_view::npos ? value : value.substr(comma + 1));
}

}  // namespace

void HttpResponseReader::Reset(size_t max_body) {
  state_ = State::kMore;
  phase_ = Phase::kHead;
  max_body_ = max_body;
  remaining_ = 0;
  status_ = 0;
  keep_alive_ = false;
  body_.clear();
  retry_after_.clear();
  error_.clear();
}

HttpResponseReader::State HttpResponseReader::Fail(std::string why) {
  error_ = std::move(why);
  keep_alive_ = false;
  return state_ = State::kBad;
}

HttpResponseReader::State HttpResponseReader::Read(std::string_view bytes, size_t* used) {
  *used = 0;
  while (state_ == State::kMore && phase_ == Phase::kHead) {
    const size_t end = bytes.find("\r\n\r\n", *used);
    if (end == std::string_view::npos) {
      if (bytes.size() - *used > kMaxHead) return Fail("response head larger than 64 KiB");
      return state_;
    }
    if (end - *used > kMaxHead) return Fail("response head larger than 64 KiB");
    const std::string_view head = bytes.substr(*used, end - *used);
    *used = end + 4;
    Head(head);  // an interim response leaves the phase at kHead
  }
  if (state_ != State::kMore) return state_;
  size_t body_used = 0;
  Body(bytes.substr(*used), &body_used);
  *used += body_used;
  return state_;
}

HttpResponseReader::State HttpResponseReader::Head(std::string_view head) {
  const size_t line_end = head.find("\r\n");
  const std::string_view status_line = head.substr(0, line_end);
  // "HTTP/1.1 200 OK": a version, a space, three digits, then a space or the end.
  if (status_line.size() < 12 || status_line.substr(0, 7) != "HTTP/1." ||
      (status_line[7] != '0' && status_line[7] != '1') || status_line[8] != ' ' ||
      (status_line.size() > 12 && status_line[12] != ' ')) {
    return Fail("not an HTTP/1.x status line: '" + std::string(status_line.substr(0, 80)) + "'");
  }
  int status = 0;
  for (char c : status_line.substr(9, 3)) {
    if (c < '0' || c > '9') return Fail("bad status in '" + std::string(status_line) + "'");
    status = status * 10 + (c - '0');
  }
  if (status < 100) return Fail("invalid status " + std::to_string(status));
  if (status == 101) return Fail("101 Switching Protocols, which idem consume does not support");
  const bool http10 = status_line[7] == '0';

  std::string_view content_length, transfer_encoding, connection, retry_after;
  bool has_length = false;
  std::string_view fields =
      line_end == std::string_view::npos ? std::string_view() : head.substr(line_end + 2);
  while (!fields.empty()) {
    const size_t eol = fields.find("\r\n");
    const std::string_view line = fields.substr(0, eol);
    fields = eol == std::string_view::npos ? std::string_view() : fields.substr(eol + 2);
    const size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos || line.front() == ' ' ||
        line.front() == '\t') {
      return Fail("bad header line: '" + std::string(line.substr(0, 80)) + "'");
    }
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = Trim(line.substr(colon + 1));
    if (EqualsIgnoreCase(name, "content-length")) {
      if (has_length && value != content_length) return Fail("conflicting Content-Length fields");
      content_length = value;
      has_length = true;
    } else if (EqualsIgnoreCase(name, "transfer-encoding")) {
      transfer_encoding = value;  // the last field's last coding decides
    } else if (EqualsIgnoreCase(name, "connection")) {
      connection = value;
    } else if (EqualsIgnoreCase(name, "retry-after")) {
      retry_after = value;
    }
  }
  if (status < 200) return state_;  // interim: the final response follows
  status_ = status;
  retry_after_ = retry_after;
  keep_alive_ = http10 ? ListHas(connection, "keep-alive") : !ListHas(connection, "close");
  if (status == 204 || status == 304) return state_ = State::kDone;
  if (!transfer_encoding.empty()) {
    // With both, Transfer-Encoding decides and the connection is not reused (RFC 9112 6.3).
    if (has_length) keep_alive_ = false;
    if (EqualsIgnoreCase(LastOf(transfer_encoding), "chunked")) {
      phase_ = Phase::kChunkSize;
    } else {
      phase_ = Phase::kUntilEnd;
      keep_alive_ = false;
    }
    return state_;
  }
  if (has_length) {
    size_t n = 0;
    const auto [end, ec] =
        std::from_chars(content_length.data(), content_length.data() + content_length.size(), n);
    if (ec != std::errc() || end != content_length.data() + content_length.size() ||
        content_length.empty()) {
      return Fail("bad Content-Length '" + std::string(content_length.substr(0, 40)) + "'");
    }
    if (n > max_body_) return state_ = State::kTooLarge;
    if (n == 0) return state_ = State::kDone;
    body_.reserve(n);
    remaining_ = n;
    phase_ = Phase::kLength;
    return state_;
  }
  phase_ = Phase::kUntilEnd;
  keep_alive_ = false;
  return state_;
}

HttpResponseReader::State HttpResponseReader::Append(std::string_view bytes) {
  if (body_.size() + bytes.size() > max_body_) {
    keep_alive_ = false;
    return state_ = State::kTooLarge;
  }
  body_.append(bytes);
  return state_;
}

HttpResponseReader::State HttpResponseReader::Body(std::string_view bytes, size_t* used) {
  *used = 0;
  while (state_ == State::kMore) {
    const std::string_view rest = bytes.substr(*used);
    switch (phase_) {
      case Phase::kHead:
        return state_;  // not reached: Read parses heads
      case Phase::kUntilEnd:
        *used = bytes.size();
        return Append(rest);
      case Phase::kLength:
      case Phase::kChunkData: {
        const size_t n = std::min(remaining_, rest.size());
        if (Append(rest.substr(0, n)) != State::kMore) return state_;
        *used += n;
        remaining_ -= n;
        if (remaining_ > 0) return state_;
        if (phase_ == Phase::kLength) return state_ = State::kDone;
        phase_ = Phase::kChunkEnd;
        break;
      }
      case Phase::kChunkEnd:
        if (rest.size() < 2) return state_;
        if (rest.substr(0, 2) != "\r\n") return Fail("chunk not followed by CRLF");
        *used += 2;
        phase_ = Phase::kChunkSize;
        break;
      case Phase::kChunkSize: {
        const size_t eol = rest.find("\r\n");
        if (eol == std::string_view::npos) {
          if (rest.size() > 1024) return Fail("chunk size line longer than 1 KiB");
          return state_;
        }
        const std::string_view line = rest.substr(0, eol);
        size_t size = 0;
        const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
        if (ec != std::errc() || line.empty() ||
            (end != line.data() + line.size() && *end != ';' && *end != ' ' && *end != '\t')) {
          return Fail("bad chunk size '" + std::string(line.substr(0, 40)) + "'");
        }
        *used += eol + 2;
        if (size == 0) {
          phase_ = Phase::kTrailers;
        } else if (body_.size() + size > max_body_) {
          keep_alive_ = false;
          return state_ = State::kTooLarge;
        } else {
          remaining_ = size;
          phase_ = Phase::kChunkData;
        }
        break;
      }
      case Phase::kTrailers: {
        const size_t eol = rest.find("\r\n");
        if (eol == std::string_view::npos) {
          if (rest.size() > kMaxHead) return Fail("trailers larger than 64 KiB");
          return state_;
        }
        *used += eol + 2;
        if (eol == 0) return state_ = State::kDone;
        break;
      }
    }
  }
  return state_;
}

HttpResponseReader::State HttpResponseReader::End() {
  if (state_ != State::kMore) return state_;
  if (phase_ == Phase::kUntilEnd) {
    keep_alive_ = false;
    return state_ = State::kDone;
  }
  return Fail(phase_ == Phase::kHead ? "the connection closed before a response"
                                     : "the connection closed before the response's end");
}

}  // namespace idem::worker
