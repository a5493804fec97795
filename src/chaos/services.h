// The two services of the chaos pipeline, served from the `idem chaos` process itself on
// loopback (one thread and one PostgreSQL connection per client connection):
//
//   POST /charge   behind `idem gateway`: {"op", "amount"} with Idempotency-Key. In ONE
//                  transaction: the key recorded with idem's transactional API (layer 1 in the
//                  service's own database), a row in chaos_charges, and the event
//                  "charge-<row id>" enqueued in the outbox (layer 3's producer side). 201.
//   POST /apply    behind `idem consume`: the event, with Idempotency-Key = the message id and
//                  Idem-Delivery-Count. In ONE transaction: idem.inbox_claim (layer 2), then a
//                  row in chaos_applied (with Idem-Stream-Sequence, where the message is
//                  stored). A refused duplicate is logged in chaos_rejects. 200.
//
// The services have no duplicate protection of their own beyond those idem calls, so that a
// disabled layer shows what it was worth: with layer 1 off /charge skips the key record, with
// layer 2 off /apply skips the inbox claim. Two faults are injected here, for operations whose
// plan says so: a redelivery storm (/apply answers 503 to the first kStormDeliveries deliveries,
// after its transaction) and a consumer kill (on the first delivery, after COMMIT and before
// answering, `kill_consumer` is called: the sidecar dies before it can ack). A third in /charge:
// a zombie (the first request of the operation sleeps kZombieHang before its transaction, so
// the client's retry takes the gateway's key over, and then finishes; every request of a zombie
// operation logs its Idempotency-Fencing-Token in chaos_attempts, the evidence of the takeover).
//
// Thread safety: Start/Stop from one thread; the handlers run on their own threads.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "chaos/oracle.h"
#include "idem/clock.h"

namespace idem::chaos {

inline constexpr int kStormDeliveries = 6;
// How long /charge hangs on a zombie operation's first request: past the gateway route's 1 s
// lease, within its upstream response timeout (Pipeline::StartProcesses).
inline constexpr std::chrono::milliseconds kZombieHang{2000};

// Creates the chaos tables in the database `conninfo` names. Empty on success, else why not.
std::string CreateChaosSchema(const std::string& conninfo);

class Services {
 public:
  struct Config {
    std::string conninfo;                          // libpq connection string
    std::string subject = "chaos.charged";         // the events' subject
    bool layer1 = true;                            // record the key in the charge transaction
    bool layer2 = true;                            // claim the inbox in the apply transaction
    std::map<std::string, FaultMode> faults;       // op id -> its fault
    std::function<void()> kill_consumer;           // SIGKILL the consumer sidecar
    // "now" of /charge's key record (retry_hours moves it); the system clock means the
    // database server's.
    std::shared_ptr<Clock> clock = SystemClock();
  };

  explicit Services(Config config);
  ~Services();  // Stop()

  // Listens on 127.0.0.1 (a free port). Empty on success, else why not.
  std::string Start();
  void Stop();
  int port() const { return port_; }
  int consumer_kills() const { return consumer_kills_.load(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<int> consumer_kills_{0};
};

}  // namespace idem::chaos
