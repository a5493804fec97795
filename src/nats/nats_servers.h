// The NATS URL flags (--nats) take one server or several, comma-separated ("every node of the
// cluster"). nats.c's natsOptions_SetURL takes exactly one URL: a list given there is one
// malformed URL, and the connection never comes up. SetNatsServers puts a list into the
// server pool instead (natsOptions_SetServers; nats.c tries them in random order, and on a
// disconnect reconnects to another), and a single URL where it always went.
//
#pragma once

#include <nats/nats.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/text.h"

namespace idem::internal {

// NATS_INVALID_ARG when `urls` names no server.
inline natsStatus SetNatsServers(natsOptions* opts, std::string_view urls) {
  const std::vector<std::string_view> elements = ListElements(urls);
  if (elements.empty()) return NATS_INVALID_ARG;
  if (elements.size() == 1) return natsOptions_SetURL(opts, std::string(elements[0]).c_str());
  std::vector<std::string> owned(elements.begin(), elements.end());
  std::vector<const char*> servers;
  for (const std::string& url : owned) servers.push_back(url.c_str());
  return natsOptions_SetServers(opts, servers.data(), static_cast<int>(servers.size()));
}

}  // namespace idem::internal
