// What `idem relay` is told: where the outbox and the stream are, which subjects it takes, and
// its batch sizes, lease and waits (tools/idem's flags set them; docs/emit.md explains each).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "outbox/jetstream_publisher.h"

namespace idem::outbox {

struct RelayOptions {
  std::string db_url;                      // postgresql://...
  std::string nats_url;                    // nats://HOST:PORT
  internal::NatsAuth nats_auth;            // a token or credentials file; empty: none
  std::string stream;                      // the stream to check (or create)
  std::optional<StreamSpec> create_stream;  // create it when missing
  // The subjects whose rows this relay takes (NATS patterns), each within the stream's
  // subjects; empty: the stream's subjects. Rows on other subjects stay pending for the relay
  // that takes them.
  std::vector<std::string> subjects;
  // How old the oldest pending row on a subject this relay does not take may get before the
  // relay warns (at most once a minute) that no running relay seems to take it.
  std::chrono::milliseconds warn_uncovered_after{std::chrono::minutes(1)};
  int batch = 256;                         // rows per claim
  int max_pending = 256;                   // unacknowledged publishes at a time
  // The longest a batch's transaction may sit idle holding its rows: a relay that hangs is cut
  // off by the server after it and its rows go to another relay. (A relay that dies frees its
  // rows at once, with its connection.)
  std::chrono::milliseconds claim_lease{std::chrono::seconds(30)};
  std::chrono::milliseconds ack_timeout{std::chrono::seconds(5)};
  // How long an idle relay waits for an enqueue notification before looking anyway (leases
  // of crashed relays run out without a notification).
  std::chrono::milliseconds poll_interval{std::chrono::seconds(2)};
  int retention_days = 30;                 // published rows kept, 0 to 366; 0: never swept
  std::chrono::milliseconds max_backoff{std::chrono::seconds(5)};
  std::string relay_id;                    // empty: host:pid
};

}  // namespace idem::outbox
