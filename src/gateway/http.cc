#include "gateway/http.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cctype>
#include <system_error>
#include <vector>

#include "core/text.h"
#include "gateway/deadline_stream.h"

namespace idem::gateway {

namespace {

// The fields that are hop-by-hop by definition (RFC 9110 7.6.1, and those RFC 9112 and older
// proxies treat so).
bool IsHopByHop(http::field name) {
  switch (name) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_authenticate:
    case http::field::proxy_authorization:
    case http::field::proxy_connection:
    case http::field::te:
    case http::field::trailer:
    case http::field::transfer_encoding:
    case http::field::upgrade:
      return true;
    default:
      return false;
  }
}

}  // namespace

template <bool kIsRequest>
void StripHopByHop(http::header<kIsRequest, Fields>& h,
                   std::initializer_list<std::string_view> keep) {
  // One pass over the fields, comparing their known names as numbers; the names the Connection
  // header lists (rare) are looked up afterwards.
  std::vector<std::string> named;
  for (auto it = h.begin(); it != h.end();) {
    const http::field name = it->name();
    if (!IsHopByHop(name)) {
      ++it;
      continue;
    }
    if (name == http::field::connection) {
      for (std::string_view token : internal::ListElements(it->value())) named.emplace_back(token);
    }
    it = h.erase(it);
  }
  for (const auto& name : named) {
    const bool kept = std::any_of(keep.begin(), keep.end(), [&](std::string_view k) {
      return internal::EqualsIgnoreCase(k, name);
    });
    if (!kept) h.erase(name);
  }
}

template void StripHopByHop<true>(http::header<true, Fields>&,
                                  std::initializer_list<std::string_view>);
template void StripHopByHop<false>(http::header<false, Fields>&,
                                   std::initializer_list<std::string_view>);

template <bool kIsRequest>
void PreparePayload(http::message<kIsRequest, http::string_body, Fields>& message) {
  // One pass over the fields, comparing their known names as numbers (Beast's lookups by name
  // compare strings ignoring case, several hundred instructions for a header this size).
  // An empty body is left to prepare_payload: for a request whose method expects no body it
  // removes the Content-Length.
  const Fields::value_type* length = nullptr;
  int lengths = 0;
  bool transfer_encoding = false;
  for (const auto& field : message.base()) {
    if (field.name() == http::field::content_length) {
      length = &field;
      ++lengths;
    } else if (field.name() == http::field::transfer_encoding) {
      transfer_encoding = true;
    }
  }
  if (!message.body().empty() && lengths == 1 && !transfer_encoding) {
    char digits[24];
    const auto [end, error] = std::to_chars(digits, digits + sizeof digits, message.body().size());
    if (error == std::errc() && length->value() == std::string_view(digits, end - digits)) return;
  }
  message.prepare_payload();
}

template void PreparePayload<true>(http::message<true, http::string_body, Fields>&);
template void PreparePayload<false>(http::message<false, http::string_body, Fields>&);

namespace {

void AppendVersion(std::string& out, unsigned version) {
  out.append("HTTP/", 5);
  out += static_cast<char>('0' + version / 10);
  out += '.';
  out += static_cast<char>('0' + version % 10);
}

void AppendStartLine(std::string& out, const http::header<true, Fields>& h) {
  out += h.method_string();
  out += ' ';
  out += h.target();
  out += ' ';
  AppendVersion(out, h.version());
  out.append("\r\n", 2);
}

void AppendStartLine(std::string& out, const http::header<false, Fields>& h) {
  AppendVersion(out, h.version());
  out += ' ';
  out += std::to_string(h.result_int());
  out += ' ';
  out += h.reason();
  out.append("\r\n", 2);
}

// Appends "name: value\r\n". Beast keeps a field's line in that form, in one block (the name,
// ": ", the value, "\r\n"): copied in one piece when it is, which is checked rather than
// assumed, and in four otherwise.
void AppendFieldLine(std::string& out, const Fields::value_type& field) {
  const std::string_view name = field.name_string();
  const std::string_view value = field.value();
  const char* line = name.data();
  if (value.data() == line + name.size() + 2 && line[name.size()] == ':' &&
      line[name.size() + 1] == ' ' && value.data()[value.size()] == '\r' &&
      value.data()[value.size() + 1] == '\n') {
    out.append(line, name.size() + 2 + value.size() + 2);
    return;
  }
  out.append(name).append(": ", 2).append(value).append("\r\n", 2);
}

// `buffers` without their first `sent` bytes.
std::array<asio::const_buffer, 2> RestAfter(const std::array<asio::const_buffer, 2>& buffers,
                                            size_t sent) {
  if (sent >= buffers[0].size()) {
    return {asio::const_buffer(), buffers[1] + (sent - buffers[0].size())};
  }
  return {buffers[0] + sent, buffers[1]};
}

}  // namespace

template <bool kIsRequest>
Task<bool> WriteMessage(DeadlineStream& stream,
                        http::message<kIsRequest, http::string_body, Fields>& message,
                        std::string& scratch, boost::system::error_code& ec) {
  ec = {};
  if (message.chunked()) {
    co_await http::async_write(stream, message, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::end_of_stream) ec = {};
    co_return false;
  }
  scratch.clear();
  AppendStartLine(scratch, message.base());
  for (const auto& field : message.base()) AppendFieldLine(scratch, field);
  scratch.append("\r\n", 2);
  std::array<asio::const_buffer, 2> buffers{asio::buffer(scratch), asio::buffer(message.body())};
  // The socket usually takes a small message whole: sent at once, without an asynchronous
  // operation, whose completion would be queued to the event loop and cost another pass of it
  // (epoll_wait) before this coroutine resumes. The rest, if any, goes the asynchronous way,
  // which also reports a broken connection. The socket is put in non-blocking mode once (Asio's
  // asynchronous operations set it anyway): a send then takes what fits and reports
  // would_block instead of waiting.
  tcp::socket& socket = stream.socket();
  if (!socket.non_blocking()) socket.non_blocking(true, ec);
  const size_t sent = ec ? 0 : socket.send(buffers, 0, ec);
  ec = {};
  const size_t total = buffers[0].size() + buffers[1].size();
  if (sent == total) co_return true;
  buffers = RestAfter(buffers, sent);
  co_await asio::async_write(stream, buffers, asio::redirect_error(asio::use_awaitable, ec));
  co_return false;
}

template Task<bool> WriteMessage<true>(DeadlineStream&, http::message<true, http::string_body, Fields>&,
                                       std::string&, boost::system::error_code&);
template Task<bool> WriteMessage<false>(DeadlineStream&,
                                        http::message<false, http::string_body, Fields>&, std::string&,
                                        boost::system::error_code&);

std::string_view TargetPath(std::string_view target) {
  return target.substr(0, target.find('?'));
}

std::string_view TargetQuery(std::string_view target) {
  const size_t q = target.find('?');
  return q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
}

namespace {
std::string Decode(std::string_view s) {
  return *internal::PercentDecode(s, internal::PercentForm::kQuery);  // never nullopt in kQuery
}
}  // namespace

std::string QueryParam(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (Decode(pair.substr(0, eq)) == name) {
      return eq == std::string_view::npos ? std::string() : Decode(pair.substr(eq + 1));
    }
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
  }
  return {};
}

std::string NormalizePathForRouting(std::string_view path) {
  const auto hex = internal::HexValue;
  auto unreserved = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
           c == '~';
  };
  // 1. Decode escapes of unreserved characters (RFC 3986 6.2.2.2); keep every other escape.
  std::string decoded;
  decoded.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 2 < path.size() &&
        hex(path[i + 1]) >= 0 && hex(path[i + 2]) >= 0) {
      const char c = static_cast<char>(hex(path[i + 1]) * 16 + hex(path[i + 2]));
      if (unreserved(c)) {
        decoded.push_back(c);
        i += 2;
        continue;
      }
    }
    decoded.push_back(path[i]);
  }
  // 2. Split on '/', dropping empty and "." segments and resolving ".." (RFC 3986 5.2.4).
  std::vector<std::string_view> segments;
  std::string_view rest = decoded;
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    const std::string_view segment = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (segment.empty() || segment == ".") continue;
    if (segment == "..") {
      if (!segments.empty()) segments.pop_back();
      continue;
    }
    segments.push_back(segment);
  }
  std::string out;
  for (const std::string_view segment : segments) {
    out.push_back('/');
    out.append(segment);
  }
  const bool trailing_slash = !decoded.empty() && decoded.back() == '/' && !out.empty();
  if (out.empty() || trailing_slash) out.push_back('/');
  return out;
}

}  // namespace idem::gateway
