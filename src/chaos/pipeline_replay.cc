// chaos::Pipeline's consumer replaying old sequences (consumer_replay): a second durable
// consumer started at an event's sequence, run until that event came again, then deleted.
#include <signal.h>

#include <libpq-fe.h>

#include "chaos/pg_connect.h"
#include "chaos/pg_exec.h"
#include "chaos/pipeline_impl.h"
#include "nats/nats_status.h"

namespace idem::chaos {
namespace {

// How often `op`'s event reached the apply service: applied, or refused by the inbox.
constexpr const char* kDeliveries =
    "SELECT (SELECT count(*) FROM chaos_applied WHERE op = $1) + "
    "(SELECT count(*) FROM chaos_rejects WHERE op = $1)";

// QueryNumber on `conn` (connected again first if it broke) with `op` as $1.
int64_t QueryOp(PGconn* conn, const char* sql, const std::string& op) {
  if (PQstatus(conn) != CONNECTION_OK) PQreset(conn);
  return QueryNumber(conn, sql, {op});
}

}  // namespace

Status Pipeline::Impl::CreateReplayConsumer(const std::string& name, int64_t seq) {
  // Created here so that it starts at the event's sequence (idem consume creates a missing
  // consumer from the stream's start and binds to an existing one).
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = name.c_str();
  cc.AckPolicy = js_AckExplicit;
  cc.DeliverPolicy = js_DeliverByStartSequence;
  cc.OptStartSeq = static_cast<uint64_t>(seq);
  cc.AckWait = int64_t{2000} * 1000 * 1000;  // as the consumer's --ack-wait
  cc.MaxAckPending = 1000;
  cc.MaxDeliver = -1;
  Status created;
  Poll(kNatsComeback, [&] {  // nats-server may be restarting (nats_restart)
    auto admin = Admin();
    if (!admin.ok()) {
      created = admin.status();
      return false;
    }
    jsConsumerInfo* info = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_AddConsumer(&info, (*admin)->js(), stream.c_str(), &cc, nullptr, &jerr);
    if (info != nullptr) jsConsumerInfo_Destroy(info);
    created = s == NATS_OK ? Status() : internal::FromNats(s, "create consumer " + name, jerr);
    return created.ok();
  });
  return created;
}

std::string Pipeline::Impl::LaunchReplayer(const std::string& name) {
  return OnSupervisor([this, &name] {
    mu.AssertHeld();  // OnSupervisor runs it with mu held
    auto& replayer = replayers[name];
    replayer = std::make_unique<Process>(ConsumeArgv(name), Log("replay"));
    if (replayer->WaitForLine("pulling from", 15s)) return std::string();
    return "idem consume did not start:\n" + replayer->Output();
  });
}

void Pipeline::Impl::StopReplayer(const std::string& name) {
  OnSupervisor([this, &name] {
    mu.AssertHeld();  // OnSupervisor runs it with mu held
    auto it = replayers.find(name);
    if (it == replayers.end()) return;
    it->second->Stop(SIGTERM, 10s);
    replayers.erase(it);
  });
}

Status Pipeline::Impl::DeleteConsumer(const std::string& name) {
  Status deleted;
  Poll(10s, [&] {
    auto admin = Admin();
    if (!admin.ok()) {
      deleted = admin.status();
      return false;
    }
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_DeleteConsumer((*admin)->js(), stream.c_str(), name.c_str(), nullptr,
                                     &jerr);
    // Not found: an earlier attempt that timed out on our side did delete it.
    if (s != NATS_OK && jerr == JSConsumerNotFoundErr) s = NATS_OK;
    deleted = s == NATS_OK ? Status() : internal::FromNats(s, "delete consumer " + name, jerr);
    return deleted.ok();
  });
  return deleted;
}

bool Pipeline::ReplayFrom(const std::string& op) {
  Impl& p = *impl_;
  auto fail = [&p](std::string why) {
    MutexLock lock(p.mu);
    p.error = "consumer replay: " + why;
    return false;
  };
  PGconn* conn = Connect(conninfo());
  int64_t seq = -1;
  int64_t before = 0;
  const bool applied = Poll(kAppliedWithin, [&] {
    seq = QueryOp(conn, "SELECT min(seq) FROM chaos_applied WHERE op = $1 AND seq > 0", op);
    before = QueryOp(conn, kDeliveries, op);
    return seq > 0 && before > 0;
  });
  if (!applied) {
    PQfinish(conn);
    return fail(op + " was not applied within " + std::to_string(kAppliedWithin.count()) + " s");
  }
  const std::string name = "chaos-replay-" + std::to_string(++replays_);  // unique per replay
  if (Status created = p.CreateReplayConsumer(name, seq); !created.ok()) {
    PQfinish(conn);
    return fail(created.ToString());
  }
  const std::string launch_error = p.LaunchReplayer(name);
  // The replayed event reaches the apply service again: refused by the inbox (layer 2) or,
  // with layer 2 off, applied a second time.
  const bool redelivered = launch_error.empty() &&
                           Poll(15s, [&] { return QueryOp(conn, kDeliveries, op) > before; });
  PQfinish(conn);
  p.StopReplayer(name);
  const Status deleted = p.DeleteConsumer(name);
  if (!launch_error.empty()) return fail(launch_error);
  if (!redelivered) return fail(op + " was not delivered again within 15 s");
  if (!deleted.ok()) return fail(deleted.ToString());
  return true;
}

}  // namespace idem::chaos
