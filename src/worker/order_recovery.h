// What `idem consume` reads from JetStream to keep per-key order across restarts: the
// consumer's progress (ack floor, last delivered, its actual ack_wait and filter), and the
// ordering keys of the stream messages an earlier process may have left unsettled.
//
// Thread safety: the functions block on NATS round trips; call them off the event loop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "idem/clock.h"
#include "idem/status.h"
#include "worker/jetstream.h"
#include "worker/key_order.h"

namespace idem::worker {

struct ConsumerProgress {
  Duration ack_wait{0};        // the consumer's own, which wins over --ack-wait
  std::string filter_subject;  // empty: the whole stream
  uint64_t ack_floor = 0;      // stream sequence: every message at or below it is settled
  uint64_t delivered = 0;      // stream sequence of the last message delivered at least once
};

// One consumer-info request. kNotFound when the stream or consumer does not exist.
Result<ConsumerProgress> ReadConsumerProgress(NatsConnection& conn, const std::string& stream,
                                              const std::string& consumer);

// True when `subject` matches the NATS subject filter `filter` ("*" one token, ">" the rest);
// an empty filter matches everything.
bool SubjectMatches(std::string_view filter, std::string_view subject);

// The messages in stream sequences [first, last] that match `filter_subject` and carry an
// ordering key, read one by one (deleted sequences are skipped). Reads at most `limit`
// sequences, from `first`; `*read_up_to` (if given) says where it stopped.
Result<std::vector<KeyOrder::Keyed>> ReadOrderingKeys(NatsConnection& conn,
                                                      const std::string& stream,
                                                      const std::string& filter_subject,
                                                      uint64_t first, uint64_t last,
                                                      uint64_t limit,
                                                      uint64_t* read_up_to = nullptr);

}  // namespace idem::worker
