#include "nats/nats_auth.h"

#include <nats/nats.h>

namespace idem::internal {

int ApplyNatsAuth(natsOptions* opts, const NatsAuth& auth) {
  natsStatus s = NATS_OK;
  if (!auth.token.empty()) s = natsOptions_SetToken(opts, auth.token.c_str());
  if (s == NATS_OK && !auth.credentials_file.empty()) {
    s = natsOptions_SetUserCredentialsFromFiles(opts, auth.credentials_file.c_str(), nullptr);
  }
  return s;
}

}  // namespace idem::internal
