#include "chaos/services.h"

#include <libpq-fe.h>
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <set>

#include "chaos/pg_connect.h"
#include "idem/fingerprint.h"
#include "core/mutex.h"
#include "idem/outbox.h"
#include "idem/postgres.h"
#include "idem/worker.h"

namespace idem::chaos {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

struct Reply {
  int status;
  std::string body;
};

bool Exec(PGconn* conn, const char* sql) {
  PGresult* r = PQexec(conn, sql);
  const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  PQclear(r);
  return ok;
}

// Runs `sql` with text parameters; the first column of the first row ("" if none), or nullopt.
std::optional<std::string> Value(PGconn* conn, const char* sql, std::vector<std::string> params) {
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p.c_str());
  PGresult* r = PQexecParams(conn, sql, static_cast<int>(values.size()), nullptr, values.data(),
                             nullptr, nullptr, 0);
  const auto status = PQresultStatus(r);
  std::optional<std::string> out;
  if (status == PGRES_COMMAND_OK) out = "";
  if (status == PGRES_TUPLES_OK) out = PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  return out;
}

Reply Rollback(PGconn* conn, Reply reply) {
  if (PQstatus(conn) == CONNECTION_OK) Exec(conn, "ROLLBACK");
  return reply;
}

}  // namespace

std::string CreateChaosSchema(const std::string& conninfo) {
  PGconn* conn = Connect(conninfo);
  std::string error;
  if (PQstatus(conn) != CONNECTION_OK) {
    error = std::string("connecting to PostgreSQL: ") + PQerrorMessage(conn);
  } else if (!Exec(conn,
                   "CREATE TABLE IF NOT EXISTS chaos_charges (id bigserial PRIMARY KEY, "
                   "  op text NOT NULL, amount bigint NOT NULL);"
                   "CREATE TABLE IF NOT EXISTS chaos_applied (op text NOT NULL, "
                   "  event_id text NOT NULL, amount bigint NOT NULL, delivery int NOT NULL, "
                   "  seq bigint NOT NULL);"
                   "CREATE TABLE IF NOT EXISTS chaos_rejects (op text NOT NULL, "
                   "  event_id text NOT NULL, delivery int NOT NULL, seq bigint NOT NULL);"
                   "CREATE TABLE IF NOT EXISTS chaos_attempts (op text NOT NULL, "
                   "  token text NOT NULL);"
                   "CREATE TABLE IF NOT EXISTS chaos_replays (op text NOT NULL);"
                   "CREATE TABLE IF NOT EXISTS chaos_outage_events (event_id text NOT NULL);")) {
    error = std::string("creating the chaos tables: ") + PQerrorMessage(conn);
  }
  PQfinish(conn);
  return error;
}

struct Services::Impl {
  Config config;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread accept_thread;
  Mutex mu;
  // The open client connections, by connection number, so Stop can shut them down. A handler
  // removes its own when it ends and lists its number in `finished`; the accept loop joins
  // those threads. (Keeping every connection ever accepted leaked one descriptor and one
  // unjoined thread per connection: a 16,000-operation run reached PostgreSQL's descriptor
  // floor, and the PostgreSQL it started inherited them and refused to start.)
  std::map<std::uint64_t, std::shared_ptr<tcp::socket>> sockets IDEM_GUARDED_BY(mu);
  std::map<std::uint64_t, std::thread> threads IDEM_GUARDED_BY(mu);
  std::vector<std::uint64_t> finished IDEM_GUARDED_BY(mu);
  std::uint64_t connections IDEM_GUARDED_BY(mu) = 0;
  std::atomic<bool> stopping{false};
  Mutex kill_mu;  // one consumer kill at a time
  std::set<std::string> killed_for IDEM_GUARDED_BY(kill_mu);  // ops whose consumer was killed
  std::set<std::string> hung_for IDEM_GUARDED_BY(kill_mu);  // zombie ops whose first request hung
  Services* owner = nullptr;

  std::optional<FaultMode> FaultOf(const std::string& op) const {
    auto it = config.faults.find(op);
    if (it == config.faults.end()) return std::nullopt;
    return it->second;
  }

  Reply Charge(PGconn* conn, const std::string& key, const std::string& fencing_token,
               const std::string& body) {
    const json in = json::parse(body, nullptr, false);
    if (key.empty() || !in.is_object() || !in.contains("op") || !in["op"].is_string() ||
        !in.contains("amount") || !in["amount"].is_number_integer()) {
      return {400, "expected Idempotency-Key and {\"op\", \"amount\"}"};
    }
    const std::string op = in["op"];
    const int64_t amount = in["amount"];
    if (FaultOf(op) == FaultMode::kZombie) {
      if (!Value(conn, "INSERT INTO chaos_attempts (op, token) VALUES ($1, $2)",
                 {op, fencing_token})) {
        return {503, "attempt log failed"};
      }
      bool first = false;
      {
        MutexLock lock(kill_mu);
        first = hung_for.insert(op).second;
      }
      // The first attempt hangs past the lease, then carries on as if nothing happened: its
      // write must be stopped by the key record (the retry's charge is committed by then).
      if (first) std::this_thread::sleep_for(kZombieHang);
    }
    if (!Exec(conn, "BEGIN")) return {503, "BEGIN failed"};
    const Scope scope{"chaos", "", key};
    std::optional<FencingToken> token;
    if (config.layer1) {
      auto fp = ComputeFingerprint({}, {"POST", "/charge", "", body, {}});
      if (!fp.ok()) return Rollback(conn, {500, fp.status().ToString()});
      auto begun = postgres::BeginInTransaction(conn, scope, *fp, std::chrono::seconds(30),
                                                {config.clock});
      if (!begun.ok()) return Rollback(conn, {503, begun.status().ToString()});
      if (auto* replay = std::get_if<Replay>(&*begun)) {
        Reply reply = Rollback(conn, {replay->response.status, replay->response.body});
        // The evidence that the service's key record (layer 1) stopped a second charge.
        if (!Value(conn, "INSERT INTO chaos_replays (op) VALUES ($1)", {op})) {
          return {503, "replay log failed"};
        }
        return reply;
      }
      if (std::holds_alternative<Mismatch>(*begun)) return Rollback(conn, {422, "key reused"});
      if (std::holds_alternative<InFlight>(*begun)) return Rollback(conn, {409, "in flight"});
      token = *OwnedToken(*begun);
    }
    auto id = Value(conn, "INSERT INTO chaos_charges (op, amount) VALUES ($1, $2) RETURNING id",
                    {op, std::to_string(amount)});
    if (!id) return Rollback(conn, {503, "insert failed"});
    const std::string event_id = "charge-" + *id;
    const json payload{{"op", op}, {"amount", amount}, {"event", event_id}};
    auto enqueued = outbox::Enqueue(conn, {event_id, config.subject, payload.dump(), {}, {}});
    if (!enqueued.ok()) return Rollback(conn, {503, enqueued.status().ToString()});
    const std::string response = json{{"charge", std::stoll(*id)}}.dump();
    if (token) {
      auto done = postgres::CompleteInTransaction(conn, scope, *token, {201, {}, response},
                                                  std::chrono::hours(24), {config.clock});
      if (!done.ok() || *done != CompleteOutcome::kOk) return Rollback(conn, {503, "fenced"});
    }
    if (!Exec(conn, "COMMIT")) return {503, "COMMIT failed"};
    return {201, response};
  }

  Reply Apply(PGconn* conn, const std::string& key, int delivery, const std::string& seq,
              const std::string& body) {
    const json in = json::parse(body, nullptr, false);
    if (key.empty() || !in.is_object() || !in.contains("op") || !in["op"].is_string() ||
        !in.contains("amount") || !in["amount"].is_number_integer() || !in.contains("event")) {
      return {400, "expected an Idempotency-Key and a charge event"};
    }
    const std::string op = in["op"];
    const std::string event = in["event"];
    const int64_t amount = in["amount"];
    if (!Exec(conn, "BEGIN")) return {503, "BEGIN failed"};
    bool duplicate = false;
    if (config.layer2) {
      auto claimed = worker::InboxClaim(conn, "chaos", key);
      if (!claimed.ok()) return Rollback(conn, {503, claimed.status().ToString()});
      duplicate = !*claimed;
    }
    if (duplicate) {
      Rollback(conn, {200, ""});
      if (!Value(conn,
                 "INSERT INTO chaos_rejects (op, event_id, delivery, seq) "
                 "VALUES ($1, $2, $3, $4::bigint)",
                 {op, event, std::to_string(delivery), seq.empty() ? "0" : seq})) {
        return {503, "reject log failed"};
      }
    } else {
      if (!Value(conn,
                 "INSERT INTO chaos_applied (op, event_id, amount, delivery, seq) "
                 "VALUES ($1, $2, $3, $4, $5::bigint)",
                 {op, event, std::to_string(amount), std::to_string(delivery),
                  seq.empty() ? "0" : seq})) {
        return Rollback(conn, {503, "insert failed"});
      }
      if (!Exec(conn, "COMMIT")) return {503, "COMMIT failed"};
    }
    const auto fault = FaultOf(op);
    if (fault == FaultMode::kRedeliveryStorm && delivery <= kStormDeliveries) {
      return {503, "storm"};
    }
    if (fault == FaultMode::kConsumerKill && config.kill_consumer) {
      // Once per operation, on the first delivery that reaches us (a delivery the killed
      // sidecar had fetched but not posted comes back with a higher count).
      MutexLock lock(kill_mu);
      if (killed_for.insert(op).second) {
        config.kill_consumer();
        ++owner->consumer_kills_;
      }
    }
    return {200, duplicate ? "duplicate" : "applied"};
  }

  // Joins the threads of the connections that ended.
  void JoinFinished() {
    std::vector<std::thread> done;
    {
      MutexLock lock(mu);
      for (const std::uint64_t id : finished) {
        auto it = threads.find(id);
        done.push_back(std::move(it->second));
        threads.erase(it);
      }
      finished.clear();
    }
    for (auto& t : done) t.join();
  }

  void Serve(std::uint64_t id, std::shared_ptr<tcp::socket> socket) {
    // A PostgreSQL restart (postgres_restart) may send a connection a FATAL notice; the request
    // fails and is retried, which is the point, so Connect's processor drops it.
    PGconn* conn = Connect(config.conninfo);
    beast::flat_buffer buffer;
    beast::error_code ec;
    while (!stopping) {
      http::request<http::string_body> req;
      http::read(*socket, buffer, req, ec);
      if (ec) break;
      if (PQstatus(conn) != CONNECTION_OK) PQreset(conn);
      const std::string target(req.target());
      const std::string key(req["Idempotency-Key"]);
      Reply reply{404, "not found"};
      if (req.method() == http::verb::post && target == "/charge") {
        reply = Charge(conn, key, std::string(req["Idempotency-Fencing-Token"]), req.body());
      } else if (req.method() == http::verb::post && target == "/apply") {
        reply = Apply(conn, key, std::atoi(std::string(req["Idem-Delivery-Count"]).c_str()),
                      std::string(req["Idem-Stream-Sequence"]), req.body());
      }
      http::response<http::string_body> res{static_cast<http::status>(reply.status),
                                            req.version()};
      res.set(http::field::content_type, "application/json");
      res.keep_alive(req.keep_alive());
      res.body() = reply.body;
      res.prepare_payload();
      http::write(*socket, res, ec);
      if (ec || !req.keep_alive()) break;
    }
    PQfinish(conn);
    ::shutdown(socket->native_handle(), SHUT_RDWR);
    MutexLock lock(mu);
    sockets.erase(id);
    finished.push_back(id);
  }
};

Services::Services(Config config) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  impl_->owner = this;
}

Services::~Services() { Stop(); }

std::string Services::Start() {
  beast::error_code ec;
  Impl& s = *impl_;
  s.acceptor.open(tcp::v4(), ec);
  if (!ec) s.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind({asio::ip::make_address("127.0.0.1"), 0}, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return "services: listening on 127.0.0.1: " + ec.message();
  port_ = s.acceptor.local_endpoint().port();
  s.accept_thread = std::thread([&s] {
    while (!s.stopping) {
      auto socket = std::make_shared<tcp::socket>(s.io);
      beast::error_code aec;
      s.acceptor.accept(*socket, aec);
      if (aec || s.stopping) break;
      s.JoinFinished();
      MutexLock lock(s.mu);
      const std::uint64_t id = ++s.connections;
      s.sockets.emplace(id, socket);
      // Emplaced under the lock the handler takes to list itself finished: JoinFinished
      // always finds the thread of a listed number.
      s.threads.emplace(id, std::thread([&s, id, socket] { s.Serve(id, socket); }));
    }
  });
  return "";
}

void Services::Stop() {
  Impl& s = *impl_;
  if (!s.accept_thread.joinable()) return;
  s.stopping = true;
  beast::error_code ec;
  {
    // Wake the blocking accept with a connection of our own; it then sees `stopping`.
    tcp::socket wake(s.io);
    wake.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)}, ec);
    s.accept_thread.join();
  }
  s.acceptor.close(ec);
  std::vector<std::thread> threads;
  {
    MutexLock lock(s.mu);
    // Shut the descriptors down (thread-safe at the OS level): each handler's read fails.
    for (auto& [id, socket] : s.sockets) ::shutdown(socket->native_handle(), SHUT_RDWR);
    for (auto& [id, thread] : s.threads) threads.push_back(std::move(thread));
    s.threads.clear();
    s.finished.clear();
  }
  for (auto& t : threads) t.join();
}

}  // namespace idem::chaos
