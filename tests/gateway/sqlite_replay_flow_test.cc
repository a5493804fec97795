// The gateway's request flow on the SQLite store: a replay the store holds in its replay cache
// is answered on the event loop (WriteQueue::BeginAtOnce), never reaching the store executor's
// threads, with the same bytes as a replay read from the file; and another process's write to
// the file between two replays is seen. A FakeUpstream, the real SQLite store on a temporary
// file, and a StoreExecutor; requests run on one io_context, on the test's thread.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <sstream>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include "gateway/proxy.h"
#include "idem/keys.h"
#include "idem/store.h"
#include "store/sqlite/sqlite_store.h"
#include "util/build_tree.h"
#include "util/fake_upstream.h"
#include "util/process.h"
#include "util/temp_dir.h"

namespace idem::gateway {
namespace {

using namespace std::chrono_literals;
using testing::FakeUpstream;

// One gateway without listeners on the SQLite store at `url`.
class SqliteFlow {
 public:
  explicit SqliteFlow(const std::string& url) {
    options.upstream = "http://127.0.0.1:1";
    RoutePolicy rest;
    rest.method = "POST";
    rest.path_prefix = "/";
    rest.lease = 10s;
    options.routes = {rest};
    auto opened = OpenStore(url);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    store = std::move(*opened);
    executor = std::make_unique<StoreExecutor>(*store, StoreExecutor::Options{2, 4096});
    services = std::make_unique<Services>(
        Services{options, *executor, upstream, metrics, log, waiters, pending});
  }

  static Request Post(std::string key) {
    Request req{http::verb::post, "/payments", 11};
    req.set(http::field::host, "gateway.test");
    req.set(http::field::content_type, "application/json");
    req.set(kKeyHeader, key);
    req.body() = R"({"amount":1})";
    req.keep_alive(true);
    req.prepare_payload();
    return req;
  }

  // Runs a request to its end, and the store writes after its response.
  Response Send(Request request) {
    std::future<Response> response =
        asio::co_spawn(io, Handle(*services, std::move(request)), asio::use_future);
    io.run();
    io.restart();
    return response.get();
  }

  internal::SqliteStats stats() { return *internal::GetSqliteStats(*store); }

  GatewayOptions options;
  FakeUpstream upstream;
  Metrics metrics;
  Log log{false};
  KeyWaiters waiters{16};
  PendingCompletions pending{16};
  asio::io_context io;
  std::unique_ptr<Store> store;
  std::unique_ptr<StoreExecutor> executor;  // after the store and io: destroyed before them
  std::unique_ptr<Services> services;

 private:
  static Task<Response> Handle(Services& s, Request request) {
    Response response = co_await HandleProxyRequest(s, request, nullptr);
    co_return std::move(response);
  }
};

// The response as it goes on the wire: status line, every header in order, body.
std::string Wire(const Response& response) {
  std::ostringstream out;
  out << response;
  return out.str();
}

FakeUpstream::Step Created() {
  FakeUpstream::Step step = FakeUpstream::Answer(201, std::string("binary\0body\xff\n", 14));
  step.headers = {{"Content-Type", "application/octet-stream"}, {"Location", "/payments/1"}};
  return step;
}

class SqliteReplayFlowTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
  std::string path_ = dir_.File("idem.db");
};

TEST_F(SqliteReplayFlowTest, ACachedReplayIsAnsweredOnTheEventLoopWithTheFilesBytes) {
  SqliteFlow cached("sqlite:" + path_);
  cached.upstream.Script(Created());
  const Response first = cached.Send(SqliteFlow::Post("k-1"));
  ASSERT_EQ(first.result_int(), 201u);

  // The first replay reads the file, on a store thread, and fills the cache.
  const Response from_file = cached.Send(SqliteFlow::Post("k-1"));
  EXPECT_EQ(cached.stats().begins_at_once, 0u);
  EXPECT_EQ(cached.stats().replay_cache_entries, 1u);

  // The next ones are answered by BeginAtOnce, on this thread: no call reached the executor.
  for (int i = 0; i < 3; ++i) {
    const Response at_once = cached.Send(SqliteFlow::Post("k-1"));
    EXPECT_EQ(Wire(at_once), Wire(from_file));
  }
  EXPECT_EQ(cached.stats().begins_at_once, 3u);
  EXPECT_EQ(cached.stats().replay_cache_hits, 3u);
  EXPECT_EQ(cached.upstream.calls(), 1);
  EXPECT_EQ(cached.metrics.count(Outcome::kReplayed), 4u);

  // A gateway without the cache, on the same file, replays the same bytes.
  SqliteFlow uncached("sqlite:" + path_ + "?replay_cache_entries=0");
  const Response uncached_replay = uncached.Send(SqliteFlow::Post("k-1"));
  EXPECT_EQ(Wire(uncached_replay), Wire(from_file));
  EXPECT_EQ(uncached.stats().begins_at_once, 0u);
  EXPECT_NE(Wire(from_file).find("Idempotent-Replayed: true"), std::string::npos)
      << Wire(from_file);
  EXPECT_NE(Wire(from_file).find(std::string("binary\0body\xff\n", 14)), std::string::npos);

  // Another request's body under the key: 422 at once too, the same as from the file.
  Request other = SqliteFlow::Post("k-1");
  other.body() = R"({"amount":2})";
  other.prepare_payload();
  const Response mismatch = cached.Send(Request(other));
  EXPECT_EQ(mismatch.result_int(), 422u);
  EXPECT_EQ(cached.stats().begins_at_once, 4u);
  EXPECT_EQ(Wire(mismatch), Wire(uncached.Send(Request(other))));
  EXPECT_EQ(cached.stats().busy_connection_found, 0u);
}

TEST_F(SqliteReplayFlowTest, AnotherProcesssPurgeBetweenTwoReplaysRunsTheKeyAgain) {
  SqliteFlow flow("sqlite:" + path_);
  ASSERT_EQ(flow.Send(SqliteFlow::Post("k-2")).result_int(), 201u);
  flow.Send(SqliteFlow::Post("k-2"));  // read from the file: now cached
  const Response at_once = flow.Send(SqliteFlow::Post("k-2"));
  EXPECT_EQ(at_once.at(kReplayedHeader), "true");
  ASSERT_EQ(flow.stats().begins_at_once, 1u);

  // The gateway's scope: no tenant header, so the anonymous tenant "".
  testing::Process child({build_tree::kStoreChild, "sqlite:" + path_, "", "k-2", "purge"},
                         dir_.File("child.log"));
  auto said = child.WaitForLine("purged", 30s);
  ASSERT_TRUE(said.has_value()) << child.Output();
  EXPECT_EQ(*said, "purged 1");

  const Response again = flow.Send(SqliteFlow::Post("k-2"));
  EXPECT_EQ(again.at(kReplayedHeader), "false") << "executed again, not replayed from memory";
  EXPECT_EQ(flow.upstream.calls(), 2);
  EXPECT_EQ(flow.stats().begins_at_once, 1u);
  EXPECT_GE(flow.stats().other_writers_seen, 1u);
}

}  // namespace
}  // namespace idem::gateway
