// chaos::Pipeline's restarts of the servers under the pipeline: nats-server (or the node that
// leads the stream in a cluster), PostgreSQL and the gateway's Redis.
#include <libpq-fe.h>

#include "chaos/pg_connect.h"
#include "chaos/pg_exec.h"
#include "chaos/pipeline_impl.h"

namespace idem::chaos {

bool Pipeline::RestartNats() {
  Impl& p = *impl_;
  if (!p.nats) return false;
  return p.ServerFault(nats_restarts_, "nats-server restart", [&p] { return p.nats->Restart(); });
}

bool Pipeline::KillStreamLeader() {
  Impl& p = *impl_;
  if (!p.cluster) return false;
  auto fail = [&p](std::string why) {
    MutexLock lock(p.mu);
    p.error = "nats_leader_kill: " + why;
    return false;
  };
  std::string why;
  int leader = -1;
  Poll(kNatsComeback, [&] {  // an election may be under way (a restart, an earlier kill)
    MutexLock lock(p.cluster_mu);
    leader = p.cluster->StreamLeader(p.stream, &why);
    return leader >= 0;
  });
  if (leader < 0) return fail("no node leads the stream: " + why);
  // The outbox's newest row now: once the leader changed, the relay must publish every row up
  // to it (the operation's own event among them) before the next fault.
  PGconn* conn = Connect(conninfo());
  const int64_t newest = QueryNumber(conn, "SELECT coalesce(max(id), 0) FROM idem.outbox", {});
  // Killed and started again on the supervisor thread: a node is a child of the thread that
  // starts it.
  p.OnSupervisor([this, &p, leader] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    MutexLock lock(p.cluster_mu);
    ++nats_restarts_;
    p.cluster->Kill(leader);
  });
  int next = -1;
  {
    MutexLock lock(p.cluster_mu);
    next = p.cluster->WaitStreamLeader(p.stream, kNatsComeback, leader, &why);
  }
  const std::string elected = next >= 0 ? "" : "no new stream leader: " + why;
  const bool restarted = p.OnSupervisor([&p, leader] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    MutexLock lock(p.cluster_mu);
    if (auto e = p.cluster->Restart(leader); !e.empty()) {
      return p.GiveUp("nats_leader_kill: node " + std::to_string(leader + 1) + " restart: " + e);
    }
    return true;
  });
  if (!restarted || !elected.empty()) PQfinish(conn);
  if (!restarted) return false;
  if (!elected.empty()) return fail(elected);
  std::string healthy;
  {
    MutexLock lock(p.cluster_mu);
    healthy = p.cluster->WaitStreamHealthy(p.stream, kNatsComeback);
  }
  // The relay carried on through the leader change: without this wait the kills of a dense
  // plan follow each other so closely that the stream has a leader only a second at a time,
  // and the relay (backing off up to 5 s between attempts) rarely meets one.
  const bool caught_up = healthy.empty() && Poll(kAppliedWithin, [&] {
    if (PQstatus(conn) != CONNECTION_OK) PQreset(conn);
    return QueryNumber(conn, "SELECT count(*) FROM idem.outbox WHERE state = 0 AND id <= $1",
                       {std::to_string(newest)}) == 0;
  });
  PQfinish(conn);
  if (!healthy.empty()) return fail("the restarted node did not catch up: " + healthy);
  if (!caught_up) {
    return fail("the relay did not publish the rows enqueued before the kill within " +
                std::to_string(kAppliedWithin.count()) + " s of the new leader");
  }
  return true;
}

bool Pipeline::RestartPostgres() {
  Impl& p = *impl_;
  if (!p.pg) return false;
  return p.ServerFault(postgres_restarts_, "PostgreSQL restart",
                       [&p] { return p.pg->Restart() ? std::string() : p.pg->error(); });
}

bool Pipeline::KillRedis() {
  Impl& p = *impl_;
  if (!p.redis) return false;
  return p.ServerFault(redis_restarts_, "Redis kill", [&p] {
    p.redis->Kill();
    return std::string();
  });
}

bool Pipeline::RestartRedis() {
  Impl& p = *impl_;
  if (!p.redis) return false;
  return p.OnSupervisor([&p] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    if (auto e = p.redis->Restart(); !e.empty()) return p.GiveUp("redis-server restart: " + e);
    return true;
  });
}

}  // namespace idem::chaos
