// The worker layer's consume-side benchmarks, driven by bench/consume-bench.sh:
//
//   consume_bench publish NATS STREAM N [KEYS]   a file stream on STREAM.> with N messages;
//                                                with KEYS, message i carries the header
//                                                Idem-Ordering-Key: k<i % KEYS>
//   consume_bench runtime NATS STREAM PG N inbox|noinbox|guard [GROUP]
//        JetStreamConsumer, a one-row INSERT per message as the business write, with or
//        without the inbox claim (or with the cheapest guard there is: see Runtime), GROUP
//        messages per transaction (default 1); prints "msgs/s X"
//   consume_bench raw NATS STREAM N              a bare nats.c pull-and-ack loop; "msgs/s X",
//                                                "cpu_us X"
//   consume_bench sink [loop|threads]            a trivial HTTP service answering 200 on one
//                                                event-loop thread (default) or a thread per
//                                                connection (a batch from idem consume
//                                                --batch-size: every item acked); prints
//                                                "listening on 127.0.0.1:PORT"
//   consume_bench drain NATS STREAM CONSUMER N   waits until CONSUMER (created by someone
//                                                else) has acked all N messages; "msgs/s X"
#include <libpq-fe.h>
#include <nats/nats.h>
#include <sys/resource.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "idem/worker_consumer.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// This process's CPU time so far (user + system), in microseconds.
int64_t SelfCpuMicros() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1'000'000LL + u.ru_utime.tv_usec +
         u.ru_stime.tv_usec;
}

int Fail(const std::string& what, natsStatus s) {
  std::cerr << what << ": " << natsStatus_GetText(s) << "\n";
  return 1;
}

struct Nats {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  natsStatus Connect(const char* url) {
    natsStatus s = natsConnection_ConnectTo(&nc, url);
    if (s == NATS_OK) s = natsConnection_JetStream(&js, nc, nullptr);
    return s;
  }
  ~Nats() {
    if (js) jsCtx_Destroy(js);
    if (nc) natsConnection_Destroy(nc);
  }
};

int Publish(const char* url, const std::string& stream, int n, int keys) {
  Nats c;
  if (natsStatus s = c.Connect(url); s != NATS_OK) return Fail("connect", s);
  const std::string subjects = stream + ".>";
  const char* subs[] = {subjects.c_str()};
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = stream.c_str();
  cfg.Subjects = subs;
  cfg.SubjectsLen = 1;
  cfg.Storage = js_FileStorage;
  if (natsStatus s = js_AddStream(nullptr, c.js, &cfg, nullptr, nullptr); s != NATS_OK) {
    return Fail("add stream", s);
  }
  const std::string subject = stream + ".pay";
  for (int i = 0; i < n; ++i) {
    const std::string id = stream + "-" + std::to_string(i);
    const std::string body = "acct-" + std::to_string(i % 16) + " 100 " + id;
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = id.c_str();
    natsStatus s;
    if (keys > 0) {
      natsMsg* msg = nullptr;
      s = natsMsg_Create(&msg, subject.c_str(), nullptr, body.data(), static_cast<int>(body.size()));
      if (s == NATS_OK) {
        s = natsMsgHeader_Set(msg, "Idem-Ordering-Key", ("k" + std::to_string(i % keys)).c_str());
      }
      if (s == NATS_OK) s = js_PublishMsgAsync(c.js, &msg, &po);
      if (msg != nullptr) natsMsg_Destroy(msg);  // left to us only when the publish failed
    } else {
      s = js_PublishAsync(c.js, subject.c_str(), body.data(), static_cast<int>(body.size()), &po);
    }
    if (s != NATS_OK) return Fail("publish", s);
    if (i % 1000 == 999) js_PublishAsyncComplete(c.js, nullptr);
  }
  jsPubOptions done;
  jsPubOptions_Init(&done);
  done.MaxWait = 30000;
  if (natsStatus s = js_PublishAsyncComplete(c.js, &done); s != NATS_OK) {
    return Fail("publish complete", s);
  }
  return 0;
}

// mode: "inbox" (the runtime's inbox claim), "noinbox" (none), or "guard": no inbox claim, and
// the business write guarded by the cheapest same-transaction guard there is, a bare
// INSERT ... ON CONFLICT DO NOTHING into an unpartitioned table with a primary key, in the
// same statement (no round trip of its own) -- a ceiling for what any inbox can reach here.
int Runtime(const char* url, const std::string& stream, const char* pg, int n,
            const std::string& mode, int group) {
  {
    PGconn* conn = PQconnectdb(pg);
    PQclear(PQexec(conn, "SET client_min_messages = warning; "
                            "CREATE TABLE IF NOT EXISTS bench_effects (k text NOT NULL); "
                            "CREATE TABLE IF NOT EXISTS bench_guard (consumer text, "
                            "message_id text, PRIMARY KEY (consumer, message_id))"));
    PQfinish(conn);
  }
  const bool inbox = mode == "inbox";
  const char* write = mode == "guard"
                          ? "WITH g AS (INSERT INTO bench_guard VALUES ($2, $1) ON CONFLICT DO "
                            "NOTHING RETURNING 1) INSERT INTO bench_effects (k) SELECT $1 FROM g"
                          : "INSERT INTO bench_effects (k) VALUES ($1)";
  const int n_params = mode == "guard" ? 2 : 1;
  idem::worker::JetStreamConsumer::Options o;
  o.nats_url = url;
  o.stream = stream;
  o.consumer = "runtime";
  o.inbox_consumer = stream;
  o.inbox = inbox;
  o.batch = 256;
  o.messages_per_transaction = group;
  o.max_ack_pending = 10000;
  o.log = [](std::string_view level, std::string_view line) {
    if (level != "info") std::cerr << level << " " << line << "\n";
  };
  auto consumer = idem::worker::JetStreamConsumer::Create(o, pg);
  if (!consumer.ok()) {
    std::cerr << consumer.status().ToString() << "\n";
    return 1;
  }
  std::atomic<int> done{0};
  Clock::time_point start{};
  idem::Status s = (*consumer)->Run([&](PGconn* conn, const idem::worker::ConsumedMessage& m) {
    if (done.load() == 0 && start == Clock::time_point{}) start = Clock::now();
    const std::string key(m.key);
    const char* params[] = {key.c_str(), stream.c_str()};
    PGresult* r = PQexecParams(conn, write, n_params, nullptr, params, nullptr, nullptr, 0);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (++done >= n) (*consumer)->Stop();
    return ok ? idem::Status::Ok() : idem::UnavailableError(PQerrorMessage(conn));
  });
  const double secs = Seconds(start);
  std::cout << "msgs/s " << static_cast<int64_t>(n / secs) << "\n";
  std::cout << "cpu_us " << SelfCpuMicros() << "\n";
  return s.ok() ? 0 : 1;
}

int Raw(const char* url, const std::string& stream, int n) {
  Nats c;
  if (natsStatus s = c.Connect(url); s != NATS_OK) return Fail("connect", s);
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream.c_str();
  so.Config.AckPolicy = js_AckExplicit;
  so.Config.MaxAckPending = 10000;
  natsSubscription* sub = nullptr;
  const std::string subject = stream + ".>";
  if (natsStatus s = js_PullSubscribe(&sub, c.js, subject.c_str(), "raw", nullptr, &so, nullptr);
      s != NATS_OK) {
    return Fail("pull subscribe", s);
  }
  int got = 0;
  Clock::time_point start{};
  while (got < n) {
    natsMsgList list{};
    natsStatus s = natsSubscription_Fetch(&list, sub, 256, 1000, nullptr);
    if (s != NATS_OK && s != NATS_TIMEOUT) return Fail("fetch", s);
    if (list.Count > 0 && start == Clock::time_point{}) start = Clock::now();
    for (int i = 0; i < list.Count; ++i) natsMsg_Ack(list.Msgs[i], nullptr);
    got += list.Count;
    natsMsgList_Destroy(&list);
  }
  natsConnection_FlushTimeout(c.nc, 5000);
  std::cout << "msgs/s " << static_cast<int64_t>(n / Seconds(start)) << "\n";
  std::cout << "cpu_us " << SelfCpuMicros() << "\n";
  natsSubscription_Destroy(sub);
  return 0;
}

// The trivial service's answer to every request: 200 "ok"; to a batch (header Idem-Batch), the
// envelope read as a service would read it, and every item acked.
boost::beast::http::response<boost::beast::http::string_body> SinkAnswer(
    const boost::beast::http::request<boost::beast::http::string_body>& req) {
  boost::beast::http::response<boost::beast::http::string_body> res{
      boost::beast::http::status::ok, 11};
  res.keep_alive(req.keep_alive());
  if (req.find("Idem-Batch") != req.end()) {
    const auto batch = nlohmann::json::parse(req.body(), nullptr, false);
    nlohmann::json results = nlohmann::json::array();
    if (batch.is_object() && batch.contains("messages")) {
      for (const auto& m : batch["messages"]) {
        results.push_back({{"idempotency_key", m["idempotency_key"]}, {"outcome", "ack"}});
      }
    }
    res.set(boost::beast::http::field::content_type, "application/json");
    res.body() = nlohmann::json{{"results", std::move(results)}}.dump();
  } else {
    res.body() = "ok\n";
  }
  res.prepare_payload();
  return res;
}

// One event-loop thread serving every connection, the way most services answer: a request
// that arrives while the loop is busy is read on its next turn, with no thread to wake.
boost::asio::awaitable<void> SinkSession(boost::asio::ip::tcp::socket s) {
  namespace asio = boost::asio;
  namespace http = boost::beast::http;
  boost::beast::flat_buffer buffer;
  boost::system::error_code ec;
  for (;;) {
    http::request<http::string_body> req;
    co_await http::async_read(s, buffer, req, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    auto res = SinkAnswer(req);
    co_await http::async_write(s, res, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
  }
}

// A trivial HTTP service answering 200. "loop": one event-loop thread; "threads": a blocking
// thread per connection (each request then wakes its connection's thread).
int Sink(const std::string& kind) {
  namespace asio = boost::asio;
  namespace http = boost::beast::http;
  using tcp = asio::ip::tcp;
  asio::io_context io(1);
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  std::cout << "listening on 127.0.0.1:" << acceptor.local_endpoint().port() << std::endl;
  if (kind == "loop") {
    asio::co_spawn(
        io,
        [&acceptor]() -> asio::awaitable<void> {
          for (;;) {
            tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
            socket.set_option(tcp::no_delay(true));
            asio::co_spawn(acceptor.get_executor(), SinkSession(std::move(socket)),
                           asio::detached);
          }
        },
        asio::detached);
    io.run();
    return 0;
  }
  for (;;) {
    tcp::socket socket(io);
    acceptor.accept(socket);
    std::thread([s = std::move(socket)]() mutable {
      boost::beast::flat_buffer buffer;
      boost::system::error_code ec;
      for (;;) {
        http::request<http::string_body> req;
        http::read(s, buffer, req, ec);
        if (ec) return;
        auto res = SinkAnswer(req);
        http::write(s, res, ec);
        if (ec) return;
      }
    }).detach();
  }
}

int Drain(const char* url, const std::string& stream, const std::string& consumer, int n) {
  Nats c;
  if (natsStatus s = c.Connect(url); s != NATS_OK) return Fail("connect", s);
  Clock::time_point start{};
  for (;;) {
    jsConsumerInfo* ci = nullptr;
    if (js_GetConsumerInfo(&ci, c.js, stream.c_str(), consumer.c_str(), nullptr, nullptr) ==
        NATS_OK) {
      const uint64_t acked = ci->AckFloor.Stream;
      const uint64_t delivered = ci->Delivered.Stream;
      jsConsumerInfo_Destroy(ci);
      if (delivered > 0 && start == Clock::time_point{}) start = Clock::now();
      if (acked >= static_cast<uint64_t>(n)) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::cout << "msgs/s " << static_cast<int64_t>(n / Seconds(start)) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "publish" && (argc == 5 || argc == 6)) {
    return Publish(argv[2], argv[3], std::atoi(argv[4]), argc == 6 ? std::atoi(argv[5]) : 0);
  }
  if (mode == "runtime" && (argc == 7 || argc == 8)) {
    return Runtime(argv[2], argv[3], argv[4], std::atoi(argv[5]), argv[6],
                   argc == 8 ? std::atoi(argv[7]) : 1);
  }
  if (mode == "raw" && argc == 5) return Raw(argv[2], argv[3], std::atoi(argv[4]));
  if (mode == "sink" && (argc == 2 || argc == 3)) return Sink(argc == 3 ? argv[2] : "loop");
  if (mode == "drain" && argc == 6) return Drain(argv[2], argv[3], argv[4], std::atoi(argv[5]));
  std::cerr << "usage: see the comment at the top of bench/consume_bench.cc\n";
  return 2;
}
