// How the relay and the consumers authenticate to NATS besides what a URL may carry
// (nats://USER:PASSWORD@HOST or nats://TOKEN@HOST): a token, or a credentials file (a user JWT
// and its NKey seed, as `nsc` writes them). The token is read by the caller from a file, so no
// secret has to be on a command line.
#pragma once

#include <string>

typedef struct __natsOptions natsOptions;

namespace idem::internal {

struct NatsAuth {
  std::string token;             // empty: none
  std::string credentials_file;  // path of a .creds file; empty: none
};

// Sets what `auth` holds on `opts` (a natsStatus); NATS_OK when it holds nothing.
int ApplyNatsAuth(natsOptions* opts, const NatsAuth& auth);

}  // namespace idem::internal
