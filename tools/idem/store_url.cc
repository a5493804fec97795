#include "store_url.h"

#include <cstdio>

#include "config_file.h"

namespace idem::cli {
namespace {

std::string PercentEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    const bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '.' || c == '_' || c == '~';
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace

Result<std::string> StoreUrlWithPasswordFile(const std::string& url, const std::string& setting,
                                             const std::string& password_file) {
  if (password_file.empty()) return url;
  std::string scheme;
  for (const char* s : {"postgresql://", "postgres://", "redis://"}) {
    if (url.rfind(s, 0) == 0) scheme = s;
  }
  if (scheme.empty()) {
    return InvalidArgumentError(setting +
                                ": only a postgresql:// or redis:// URL takes a password");
  }
  auto password = ReadSecretFile(setting, password_file);
  if (!password.ok()) return password.status();
  const std::string rest = url.substr(scheme.size());
  const size_t authority_end = rest.find_first_of("/?");
  const std::string authority = rest.substr(0, authority_end);
  const size_t at = authority.rfind('@');
  const std::string userinfo = at == std::string::npos ? "" : authority.substr(0, at);
  const bool redis = scheme == "redis://";
  if (userinfo.find(':') != std::string::npos || (redis && !userinfo.empty())) {
    return InvalidArgumentError(setting + ": the URL already holds a password; give one or the "
                                          "other");
  }
  if (at == std::string::npos) {
    if (!redis) return InvalidArgumentError(setting + ": the URL has no user name (USER@HOST)");
    return scheme + ":" + PercentEncode(*password) + "@" + rest;
  }
  return scheme + userinfo + ":" + PercentEncode(*password) + rest.substr(at);
}

}  // namespace idem::cli
