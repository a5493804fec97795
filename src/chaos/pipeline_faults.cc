// chaos::Pipeline's faults on the processes it runs: the gateway killed, its clock moved, the
// relay crashed after a publish or held down (an outage), the stream's duplicate window
// changed, the consumer killed.
#include <signal.h>

#include <filesystem>
#include <fstream>

#include <libpq-fe.h>

#include "chaos/pg_connect.h"
#include "chaos/pg_exec.h"
#include "chaos/pipeline_impl.h"
#include "nats/nats_status.h"

namespace idem::chaos {

bool Pipeline::KillAndRestartGateway() {
  Impl& p = *impl_;
  return p.OnSupervisor([this] { return KillAndRestartGatewayLocked(); });
}

bool Pipeline::KillAndRestartGatewayLocked() {
  Impl& p = *impl_;
  p.mu.AssertHeld();  // see the header: called through OnSupervisor
  if (!p.gateway) return false;
  p.gateway->Stop(SIGKILL);
  ++gateway_kills_;
  // The first start rarely fails (the port lingering, or the store itself restarting in a
  // redis_restart or postgres_restart: the gateway does not start without its store). The
  // supervisor then keeps starting it between its other tasks, so the store's own restart,
  // queued on the same thread, is not held up; the clients retry meanwhile.
  p.gateway_down = true;
  p.gateway_down_since = std::chrono::steady_clock::now();
  p.gateway_last_start = {};
  p.RestartGatewayLocked();
  return !p.broken;
}

bool Pipeline::SetClockOffset(Duration offset) {
  Impl& p = *impl_;
  service_clock_->SetOffset(offset);
  if (!p.config.gateway) return true;  // layer 1 off: no gateway, only the service's clock
  {
    // Written aside and renamed over: the gateway never reads a half-written file.
    const std::string file = p.ClockOffsetFile();
    std::ofstream(file + ".new") << offset.count() << "ms\n";
    std::error_code ec;
    std::filesystem::rename(file + ".new", file, ec);
    if (ec) {
      MutexLock lock(p.mu);
      p.error = "moving the gateway's clock: " + ec.message();
      return false;
    }
  }
  // The gateway logs each new offset it reads (every 100 ms).
  const std::string logged = "clock offset now " + std::to_string(offset.count()) + " ms ahead";
  return p.OnSupervisor([&p, &logged] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    if (p.gateway && p.gateway->WaitForLine(logged, 5s)) return true;
    p.error = "the gateway did not take the clock offset within 5 s";
    return false;
  });
}

int Pipeline::ArmRelayCrash(bool hold_after_crash) {
  Impl& p = *impl_;
  const int before = relay_crashes_.load();
  p.OnSupervisor([&p, hold_after_crash] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    if (p.relay) p.relay->Stop(SIGTERM, 10s);
    p.relay_held = false;
    p.hold_after_crash = hold_after_crash;
    if (auto e = p.LaunchRelay(true); !e.empty()) p.error = e;
  });
  return before;
}

void Pipeline::HoldRelay() {
  Impl& p = *impl_;
  p.OnSupervisor([&p] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    if (p.relay) p.relay->Stop(SIGTERM, 10s);
    p.relay_held = true;
  });
}

void Pipeline::ReleaseRelay() {
  Impl& p = *impl_;
  p.OnSupervisor([&p] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    p.relay_held = false;
  });
}

bool Pipeline::SetDuplicateWindow(std::chrono::milliseconds window) {
  Impl& p = *impl_;
  Status done;
  Poll(kNatsComeback, [&] {  // nats-server may be restarting (nats_restart)
    auto admin = p.Admin();
    if (!admin.ok()) {
      done = admin.status();
      return false;
    }
    jsStreamInfo* info = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_GetStreamInfo(&info, (*admin)->js(), p.stream.c_str(), nullptr, &jerr);
    if (s == NATS_OK) {
      info->Config->Duplicates = std::chrono::nanoseconds(window).count();
      jsStreamInfo* updated = nullptr;
      s = js_UpdateStream(&updated, (*admin)->js(), info->Config, nullptr, &jerr);
      if (updated != nullptr) jsStreamInfo_Destroy(updated);
    }
    if (info != nullptr) jsStreamInfo_Destroy(info);
    done = s == NATS_OK ? Status() : internal::FromNats(s, "setting the stream's window", jerr);
    return done.ok();
  });
  if (!done.ok()) {
    MutexLock lock(p.mu);
    p.error = done.ToString();
  }
  return done.ok();
}

std::chrono::milliseconds Pipeline::duplicate_window() const {
  return impl_->config.duplicate_window;
}

bool Pipeline::WaitForOutageRepublished() {
  PGconn* conn = Connect(conninfo());
  const bool done = Poll(30s, [&] {
    if (PQstatus(conn) != CONNECTION_OK) PQreset(conn);
    return QueryNumber(conn,
                       "SELECT count(*) FROM idem.outbox o JOIN chaos_outage_events e "
                       "USING (event_id) WHERE o.state = 0",
                       {}) == 0;
  });
  PQfinish(conn);
  if (!done) {
    MutexLock lock(impl_->mu);
    impl_->error = "a relay outage's rows were not republished within 30 s";
  }
  return done;
}

bool Pipeline::RecordOutageBatch() {
  // Retried for a while: a postgres_restart may be under way (the relay stays down meanwhile,
  // so the rows wait).
  std::string error;
  const bool ok = Poll(20s, [&] {
    error = ExecOn(conninfo(),
                   "INSERT INTO chaos_outage_events (event_id) SELECT event_id "
                   "FROM idem.outbox WHERE state = 0 AND (attempts > 0 OR id IN "
                   "(SELECT unnest(ids) FROM idem.outbox_attempts))");
    return error.empty();
  });
  if (!ok) {
    MutexLock lock(impl_->mu);
    impl_->error = "recording a relay outage's rows: " + error;
  }
  return ok;
}

std::chrono::seconds Pipeline::relay_crash_within() const {
  return impl_->config.nats_nodes > 1 ? 30s : 10s;
}

bool Pipeline::WaitForRelayCrash(int before) {
  const auto deadline = std::chrono::steady_clock::now() + relay_crash_within();
  while (std::chrono::steady_clock::now() < deadline) {
    if (relay_crashes_.load() > before) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

void Pipeline::KillConsumer() {
  Impl& p = *impl_;
  MutexLock lock(p.mu);
  if (p.consumer && p.consumer->pid() > 0) kill(p.consumer->pid(), SIGKILL);
}

}  // namespace idem::chaos
