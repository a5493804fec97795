#include "gateway/request_checks.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <vector>

#include "core/text.h"

namespace idem::gateway {
namespace {

using internal::EqualsIgnoreCase;
using internal::ListElements;
using internal::TrimOws;

constexpr std::string_view kKeyHeaderName = "Idempotency-Key";

Refusal Refuse(Cause cause, std::string detail, const http::request_header<Fields>& header) {
  Refusal r;
  r.cause = cause;
  r.detail = std::move(detail);
  r.method = std::string(header.method_string());
  r.path = std::string(TargetPath(header.target()));
  return r;
}

// RFC 9112 6.1 and 6.3: the codings, in order, must end in exactly one chunked.
std::optional<Refusal> CheckTransferEncoding(const http::request_header<Fields>& header) {
  std::vector<std::string_view> codings;
  for (const auto& field : header) {
    if (field.name() != http::field::transfer_encoding) continue;
    for (std::string_view element : ListElements(field.value())) codings.push_back(element);
  }
  if (header.version() < 11) {
    return Refuse(Cause::kMalformedRequest,
                  "an HTTP/1.0 request must not carry Transfer-Encoding; its framing is "
                  "ambiguous (RFC 9112 6.1)",
                  header);
  }
  if (header.find(http::field::content_length) != header.end()) {
    return Refuse(Cause::kMalformedRequest,
                  "the request has both Transfer-Encoding and Content-Length (RFC 9112 6.3)",
                  header);
  }
  if (codings.empty()) {
    return Refuse(Cause::kMalformedRequest,
                  "Transfer-Encoding is empty; it must end in chunked (RFC 9112 6.3)", header);
  }
  struct Coding {
    std::string_view name;
    bool has_parameters;
  };
  std::vector<Coding> parsed;
  for (std::string_view element : codings) {
    const size_t semicolon = element.find(';');
    const std::string_view name = TrimOws(element.substr(0, semicolon));
    if (!internal::IsHttpToken(name)) {
      return Refuse(Cause::kMalformedRequest,
                    "Transfer-Encoding has a malformed coding '" + std::string(element) + "'",
                    header);
    }
    parsed.push_back({name, semicolon != std::string_view::npos});
  }
  const Coding& last = parsed.back();
  if (!EqualsIgnoreCase(last.name, "chunked")) {
    return Refuse(Cause::kMalformedRequest,
                  "Transfer-Encoding must end in chunked, or the body's length cannot be "
                  "known (RFC 9112 6.3); it ends in '" + std::string(last.name) + "'",
                  header);
  }
  if (last.has_parameters) {
    return Refuse(Cause::kMalformedRequest, "the chunked coding takes no parameters", header);
  }
  for (size_t i = 0; i + 1 < parsed.size(); ++i) {
    if (EqualsIgnoreCase(parsed[i].name, "chunked")) {
      return Refuse(Cause::kMalformedRequest,
                    "chunked is applied more than once (RFC 9112 7)", header);
    }
  }
  if (parsed.size() > 1) {
    return Refuse(Cause::kUnsupportedCoding,
                  "the gateway implements no transfer coding but chunked; '" +
                      std::string(parsed.front().name) + "' is not supported (RFC 9112 6.1)",
                  header);
  }
  return std::nullopt;
}

// `name` with every '_' made '-'.
std::string Dashed(std::string_view name) {
  std::string dashed(name);
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  return dashed;
}

// A name that some servers read as Transfer-Encoding or Content-Length (those that map '_' to
// '-', as CGI-style environments do) would frame the body differently there.
bool IsLookalikeName(std::string_view name) {
  if (name.find('_') == std::string_view::npos) return false;
  const std::string dashed = Dashed(name);
  return EqualsIgnoreCase(dashed, "transfer-encoding") ||
         EqualsIgnoreCase(dashed, "content-length");
}

// What the checks need to know of a header's fields, gathered in one pass over them.
struct FieldFacts {
  std::optional<std::string_view> lookalike;    // the first name IsLookalikeName
  std::optional<std::string_view> expectation;  // the first Expect element but 100-continue
  size_t hosts = 0;
  std::string_view host;  // the last Host field's value
  size_t keys = 0;        // Idempotency-Key fields
  size_t tenants = 0;     // fields named as the tenant header (none counted when it is empty)
};

FieldFacts GatherFieldFacts(const http::request_header<Fields>& header,
                            std::string_view tenant_header) {
  FieldFacts facts;
  for (const auto& field : header) {
    const std::string_view name = field.name_string();
    if (!facts.lookalike && IsLookalikeName(name)) facts.lookalike = name;
    if (field.name() == http::field::host) {
      ++facts.hosts;
      facts.host = field.value();
    }
    if (field.name() == http::field::expect && !facts.expectation) {
      for (std::string_view element : ListElements(field.value())) {
        if (!EqualsIgnoreCase(element, "100-continue")) {
          facts.expectation = element;
          break;
        }
      }
    }
    if (EqualsIgnoreCase(name, kKeyHeaderName)) ++facts.keys;
    if (!tenant_header.empty() && EqualsIgnoreCase(name, tenant_header)) ++facts.tenants;
  }
  return facts;
}

std::optional<Refusal> CheckTarget(const http::request_header<Fields>& header) {
  const std::string_view target = header.target();
  if (target.find('#') != std::string_view::npos) {
    return Refuse(Cause::kMalformedRequest,
                  "the request target has a fragment ('#'), which a request must not carry "
                  "(RFC 9112 3.2)",
                  header);
  }
  if (!target.empty() && target.front() == '/') return std::nullopt;
  if (target == "*" && header.method() == http::verb::options) return std::nullopt;
  const std::string_view lower_scheme = target.substr(0, 8);
  if (EqualsIgnoreCase(target.substr(0, 7), "http://") ||
      EqualsIgnoreCase(lower_scheme, "https://")) {
    return std::nullopt;
  }
  return Refuse(Cause::kMalformedRequest,
                "the request target must be a path (/...) or an absolute http URL", header);
}

// RFC 3986 3.2.2 and 3.2.3: uri-host [ ":" port ], where uri-host is an IP literal in brackets,
// or a reg-name (unreserved, sub-delims and %XX escapes; IPv4 addresses are reg-names too).
bool IsValidHostValue(std::string_view value) {
  // A table, built at compile time: a search of the set per byte costs a call each.
  static constexpr auto kMarkOrSubDelim = [] {
    std::array<bool, 256> table{};
    for (const char c : std::string_view("-._~!$&'()*+,;=")) {
      table[static_cast<unsigned char>(c)] = true;
    }
    return table;
  }();
  auto unreserved_or_sub_delim = [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return std::isalnum(byte) || kMarkOrSubDelim[byte];
  };
  std::string_view port;
  if (!value.empty() && value.front() == '[') {
    const size_t close = value.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (char c : value.substr(1, close - 1)) {
      if (!unreserved_or_sub_delim(c) && c != ':') return false;
    }
    const std::string_view rest = value.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
    }
  } else {
    const size_t colon = value.find(':');
    std::string_view name = value.substr(0, colon);
    if (colon != std::string_view::npos) port = value.substr(colon + 1);
    for (size_t i = 0; i < name.size(); ++i) {
      if (name[i] == '%') {
        if (i + 2 >= name.size() || internal::HexValue(name[i + 1]) < 0 ||
            internal::HexValue(name[i + 2]) < 0) {
          return false;
        }
        i += 2;
      } else if (!unreserved_or_sub_delim(name[i])) {
        return false;
      }
    }
  }
  for (char c : port) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// RFC 9112 3.2: an HTTP/1.1 request carries exactly one Host field, and any request at most one,
// with a valid value (empty is allowed: a target without an authority).
std::optional<Refusal> CheckHost(const http::request_header<Fields>& header, size_t hosts,
                                 std::string_view host) {
  if (hosts == 0 && header.version() >= 11) {
    return Refuse(Cause::kMalformedRequest,
                  "an HTTP/1.1 request must carry a Host header (RFC 9112 3.2)", header);
  }
  if (hosts > 1) {
    return Refuse(Cause::kMalformedRequest,
                  "the request has " + std::to_string(hosts) +
                      " Host headers; send exactly one (RFC 9112 3.2)",
                  header);
  }
  if (hosts == 1 && !IsValidHostValue(host)) {
    return Refuse(Cause::kMalformedRequest,
                  "the Host header is not a valid host[:port] (RFC 9112 3.2)", header);
  }
  return std::nullopt;
}

std::optional<Refusal> CheckIdentityHeaders(const http::request_header<Fields>& header,
                                            std::string_view tenant_header,
                                            const FieldFacts& facts) {
  if (facts.keys > 1) {
    return Refuse(Cause::kSeveralKeys,
                  "the request has " + std::to_string(facts.keys) +
                      " Idempotency-Key headers; send exactly one",
                  header);
  }
  if (facts.tenants > 1) {
    return Refuse(Cause::kMalformedRequest,
                  "the request has " + std::to_string(facts.tenants) + " " +
                      std::string(tenant_header) +
                      " headers; keys are scoped by one tenant, so send exactly one",
                  header);
  }
  return std::nullopt;
}

}  // namespace

std::optional<Refusal> CheckHeaderBytes(std::string_view raw) {
  const size_t end = raw.find("\r\n\r\n");
  const std::string_view block = raw.substr(0, end);
  for (size_t at = block.find("\r\n"); at != std::string_view::npos;
       at = block.find("\r\n", at + 2)) {
    if (at + 2 < raw.size() && (raw[at + 2] == ' ' || raw[at + 2] == '\t')) {
      Refusal r;
      r.detail =
          "a header line starts with whitespace: obsolete line folding is not accepted "
          "(RFC 9112 5.2)";
      return r;
    }
  }
  return std::nullopt;
}

std::optional<Refusal> CheckChunkFramingBytes(std::string_view pending) {
  for (size_t at = pending.find('\n'); at != std::string_view::npos;
       at = pending.find('\n', at + 1)) {
    if (at == 0 || pending[at - 1] != '\r') {
      Refusal r;
      r.detail =
          "a chunk line or trailer field ends in a bare LF; chunked framing ends lines in CRLF "
          "(RFC 9112 7.1)";
      return r;
    }
  }
  return std::nullopt;
}

std::optional<Refusal> CheckRequestHeader(const http::request_header<Fields>& header,
                                          std::string_view tenant_header) {
  const FieldFacts facts = GatherFieldFacts(header, tenant_header);
  if (facts.lookalike) {
    return Refuse(Cause::kMalformedRequest,
                  "header '" + std::string(*facts.lookalike) + "' reads as " +
                      Dashed(*facts.lookalike) + " to some servers; it is not accepted",
                  header);
  }
  if (header.find(http::field::transfer_encoding) != header.end()) {
    if (auto r = CheckTransferEncoding(header)) return r;
  }
  if (auto r = CheckTarget(header)) return r;
  if (auto r = CheckHost(header, facts.hosts, facts.host)) return r;
  if (header.version() >= 11 && facts.expectation) {
    return Refuse(Cause::kExpectationFailed,
                  "the gateway meets only Expect: 100-continue, not '" +
                      std::string(*facts.expectation) + "'",
                  header);
  }
  if (!tenant_header.empty()) {
    if (auto r = CheckIdentityHeaders(header, tenant_header, facts)) return r;
  }
  return std::nullopt;
}

bool ExpectsContinue(const http::request_header<Fields>& header) {
  if (header.version() < 11) return false;
  for (const auto& field : header) {
    if (field.name() != http::field::expect) continue;
    for (std::string_view element : ListElements(field.value())) {
      if (EqualsIgnoreCase(element, "100-continue")) return true;
    }
  }
  return false;
}

std::string OriginFormTarget(std::string_view target) {
  size_t scheme_end = 0;
  if (EqualsIgnoreCase(target.substr(0, 7), "http://")) {
    scheme_end = 7;
  } else if (EqualsIgnoreCase(target.substr(0, 8), "https://")) {
    scheme_end = 8;
  } else {
    return std::string(target);
  }
  const std::string_view rest = target.substr(scheme_end);
  const size_t path = rest.find_first_of("/?");
  if (path == std::string_view::npos) return "/";
  std::string origin;
  if (rest[path] == '?') origin.push_back('/');
  origin.append(rest.substr(path));
  return origin;
}

}  // namespace idem::gateway
