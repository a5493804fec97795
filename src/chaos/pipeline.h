// Process orchestration for `idem chaos`: PostgreSQL, `nats-server -js` and (for that store)
// Redis in temporary directories on loopback, then `idem relay`, `idem consume` and
// `idem gateway` as child processes of this binary; every one started and stopped by PID.
// A supervisor thread restarts the relay and the consumer when they die (the faults kill them);
// the gateway is killed by the driver and started again on the same port and store (by the
// supervisor, again and again for a while, if its store is restarting too).
//
// Thread safety: Start and Stop from one thread; the fault methods from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "idem/clock.h"

namespace idem::chaos {

// The stream's duplicate window with layer 3 off: JetStream has no "off" (0 means its 2 min
// default) and refuses windows under 100 ms, so the relay creates the stream with a 100 ms
// window. The broker forgets a Nats-Msg-Id after 100 ms, before a crashed relay's rows are
// published again (the next relay starts 300 ms after the crash with such a window), so every
// republished copy is stored and delivered. The
// relay still sends Nats-Msg-Id: the consumer uses it as the message's inbox key (layer 2), and
// publishing without it would blind the inbox too, not just the broker.
inline constexpr std::chrono::milliseconds kNoDuplicateWindow{100};
// The stream's window with layer 3 on.
inline constexpr std::chrono::milliseconds kDuplicateWindow{120000};
// relay_outage: while the relay is down the stream's window is cut to this (the smallest
// JetStream accepts), and the outage lasts kOutageDown, several windows: the broker forgets the
// crashed batch's ids. The window is set back once the batch has been republished, so no other
// fault runs under the short window (relay_kill's copies must still be dropped by the stream).
inline constexpr std::chrono::milliseconds kOutageWindow{100};
inline constexpr std::chrono::milliseconds kOutageDown{600};

class Pipeline {
 public:
  struct Config {
    std::string idem_binary;  // this binary, run as `idem gateway|relay|consume`
    std::string store;        // the gateway's store: sqlite, memory, redis, postgresql
    bool gateway = true;      // false: layer 1 off, no gateway is started
    // The stream's duplicate window (the relay creates the stream with it). Layer 3 off: the
    // smallest window JetStream accepts, so a republished copy is not dropped.
    std::chrono::milliseconds duplicate_window = kDuplicateWindow;
    // Servers to use instead of starting them (ChaosOptions); empty: start one.
    std::string postgres_url, nats_url, redis_url;
    // The NATS nodes to start (without nats_url): 1, one nats-server; 3, a cluster whose
    // stream is created with three replicas before the relay starts (the relay is given
    // every node's URL and finds the stream there).
    int nats_nodes = 1;
    // retry_hours / retry_expired run: the gateway is started with --unsafe-clock-offset-file
    // (a file in the run's directory, "0s" at first), so SetClockOffset can move it.
    bool movable_clock = false;
    // How long a killed gateway that cannot start again (its store down) is retried before
    // the run is broken().
    std::chrono::milliseconds gateway_comeback{30000};
  };

  explicit Pipeline(Config config);
  ~Pipeline();  // Stop()

  // Starts the servers and creates the database (idem's schema and the chaos tables).
  // Empty on success, else why not.
  std::string StartServers();
  // libpq connection string of the chaos database. REQUIRES: StartServers succeeded.
  std::string conninfo() const;
  // The subject the payments service publishes its events on (the stream covers it).
  std::string subject() const;

  // Starts the relay (which creates the stream), the consumer delivering to
  // http://127.0.0.1:SERVICE_PORT/apply and the gateway in front of /charge, then the
  // supervisor. Empty on success, else why not.
  std::string StartProcesses(int service_port);
  // Where clients send payments: the gateway, or the service itself with layer 1 off.
  std::string entry_address() const;

  // The payments service's clock (its key record's "now"): the system clock moved by the
  // offset SetClockOffset last set, as the gateway's.
  std::shared_ptr<Clock> service_clock() const { return service_clock_; }
  // Moves the gateway's clock (through its clock offset file) and the service's to `offset`
  // ahead of the system clock, and waits (up to 5 s) until the running gateway logged the new
  // offset. REQUIRES: config.movable_clock. False (error() says why) if the gateway did not.
  bool SetClockOffset(Duration offset);

  // SIGKILL the gateway, then start it again on the same port and store. A start that fails
  // is repeated by the supervisor every 200 ms for up to Config::gateway_comeback (the
  // store may be restarting too); after that the run is broken(). False if there was no gateway or it is broken.
  bool KillAndRestartGateway();
  // True once a process the run needs could not be brought back (error() says why): a gateway
  // past gateway_comeback, or a failed restart of nats-server, PostgreSQL or Redis. The driver
  // stops sending, and the run ends with exit code 2 rather than a verdict.
  bool broken() const;
  // Stops the relay (SIGTERM) and starts one that SIGKILLs itself after its next published
  // batch and before marking it; the supervisor then starts a normal one. Returns the crash
  // count before, for WaitForRelayCrash.
  // With `hold_after_crash`, no relay is started after the crash until ReleaseRelay (an
  // outage).
  int ArmRelayCrash(bool hold_after_crash = false);
  // Stops the relay (SIGTERM) and keeps it stopped until the next ArmRelayCrash: rows pile up
  // in the outbox meanwhile.
  void HoldRelay();
  // Lets the supervisor start a relay again after HoldRelay or a held crash.
  void ReleaseRelay();
  // Sets the stream's duplicate window (JetStream purges the ids older than a shortened window
  // at once). False (error() says why) if NATS refused.
  bool SetDuplicateWindow(std::chrono::milliseconds window);
  std::chrono::milliseconds duplicate_window() const;
  // Waits (up to 30 s) until every row RecordOutageBatch recorded has been marked published.
  bool WaitForOutageRepublished();
  bool RecordOutageBatch();
  // Waits (up to relay_crash_within()) until relay_crashes() exceeds `before`; false if it
  // did not.
  bool WaitForRelayCrash(int before);
  // 10 s; 30 s on a cluster, where a nats_leader_kill's election (4 to 9 s, publishes refused
  // meanwhile) may hold up the armed relay's next batch.
  std::chrono::seconds relay_crash_within() const;
  // SIGKILL the consumer sidecar now; the supervisor starts it again.
  void KillConsumer();

  // Late completions the gateways refused because a retry had taken the key over (their
  // "fenced" log events, counted over every gateway started). REQUIRES: Stop() was called.
  int FencedCompletions() const;
  // Copies the log files of every process the run started (gateways, relays, consumers, and
  // the servers it started itself) into `to`, which is created if missing. REQUIRES: Stop()
  // was called. Empty on success, else why not.
  std::string CopyLogs(const std::filesystem::path& to) const;

  // SIGKILL nats-server and start it again on the same port and store directory (the relay and
  // the consumer reconnect on their own). False if it does not come back (error() says why).
  bool RestartNats();
  // nats_leader_kill (a cluster only): SIGKILL the node that leads the stream now, wait (up
  // to 60 s) until another node leads it, start the killed node again on its ports and store,
  // and wait (up to 60 s) until it has caught up, so that the next kill never takes the
  // stream's quorum away, and then until the relay has published every outbox row enqueued
  // before the kill (up to 120 s), so that the stream has a leader between two kills for as
  // long as the pipeline needs. Counted in nats_restarts(). False (error() says why) if a step
  // failed; the run is broken() if the node did not start again.
  bool KillStreamLeader();
  // SIGKILL PostgreSQL's postmaster and start it again on the same data directory and port
  // (crash recovery; every connection breaks). False if it does not come back.
  bool RestartPostgres();

  // A consumer replaying old sequences: waits (up to 30 s) until `op`'s event was applied,
  // creates a second durable consumer on the stream that starts at that event's sequence
  // (DeliverByStartSequence), runs an `idem consume` on it until the event has been delivered
  // again (up to 15 s), then stops it and deletes the consumer. Every message from that sequence
  // on comes again to the apply service. False (error() says why) if a step failed.
  bool ReplayFrom(const std::string& op);

  // SIGKILL the gateway's redis-server (--store redis); the gateway answers 503 until
  // RestartRedis starts it again on the same port and append-only file. False if there is no
  // Redis or it does not come back (error() says why).
  bool KillRedis();
  bool RestartRedis();

  int redis_restarts() const { return redis_restarts_.load(); }
  int nats_restarts() const { return nats_restarts_.load(); }
  int postgres_restarts() const { return postgres_restarts_.load(); }
  int relay_crashes() const { return relay_crashes_.load(); }
  int replays() const { return replays_.load(); }
  int gateway_kills() const { return gateway_kills_.load(); }
  // How often the harness's own NATS connection (the one it changes the stream and creates
  // replaying consumers with) was found closed by nats.c and replaced by a new one.
  int nats_admin_replaced() const;
  // Closes the harness's NATS connection for good, as nats.c does on an -ERR it does not know;
  // the next call that needs it connects a new one. For tests.
  void TEST_CloseNatsAdmin();
  std::string error() const;
  void Stop();

 private:
  bool KillAndRestartGatewayLocked();  // REQUIRES: on the supervisor thread, impl_->mu held

  struct Impl;
  std::unique_ptr<Impl> impl_;
  const std::shared_ptr<OffsetClock> service_clock_ = std::make_shared<OffsetClock>(SystemClock());
  std::atomic<int> relay_crashes_{0};
  std::atomic<int> gateway_kills_{0};
  std::atomic<int> nats_restarts_{0};
  std::atomic<int> postgres_restarts_{0};
  std::atomic<int> redis_restarts_{0};
  std::atomic<int> replays_{0};
};

}  // namespace idem::chaos
