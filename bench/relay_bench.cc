// The helper of bench/relay-bench.sh, with three modes:
//
//   relay_bench raw NATS_URL SUBJECT COUNT PAYLOAD_BYTES MAX_PENDING
//       The reference: a bare nats.c asynchronous JetStream publisher sending COUNT messages
//       with a Nats-Msg-Id each, at most MAX_PENDING unacknowledged, waiting for every PubAck.
//       Prints "raw <events/s>" and "cpu_us <its own CPU time, user + system>".
//   relay_bench stream NATS_URL NAME SUBJECTS
//       Creates file-backed stream NAME over SUBJECTS with a 2-minute duplicate window.
//   relay_bench drain NATS_URL STREAM COUNT TIMEOUT_S
//       Waits until STREAM holds COUNT messages; prints "drain <events/s>" measured from the
//       first message stored to the last.
//   relay_bench latency DB_CONNINFO NATS_URL SUBJECT RATE SECONDS
//       Enqueues RATE events/s for SECONDS (one transaction each, idem.outbox_enqueue), and a
//       subscriber on SUBJECT notes when each arrives; prints p50/p99/max of commit-to-consume.
#include <libpq-fe.h>
#include <nats/nats.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int64_t SelfCpuMicros() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1'000'000LL + u.ru_utime.tv_usec +
         u.ru_stime.tv_usec;
}

std::atomic<int64_t> acked{0};
std::atomic<int64_t> failed{0};

void OnAck(jsCtx*, natsMsg* msg, jsPubAck* ack, jsPubAckErr*, void*) {
  (ack != nullptr ? acked : failed).fetch_add(1);
  natsMsg_Destroy(msg);
}

int Raw(const char* url, const std::string& subject, int64_t count, int payload_bytes,
        int max_pending) {
  natsConnection* nc = nullptr;
  if (natsConnection_ConnectTo(&nc, url) != NATS_OK) return std::fprintf(stderr, "connect failed\n"), 1;
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.PublishAsync.AckHandler = &OnAck;
  jo.PublishAsync.MaxPending = max_pending;
  jsCtx* js = nullptr;
  natsConnection_JetStream(&js, nc, &jo);
  const std::string payload(payload_bytes, 'p');
  jsPubOptions po;
  jsPubOptions_Init(&po);
  const auto start = Clock::now();
  for (int64_t i = 0; i < count; ++i) {
    const std::string id = "raw-" + std::to_string(i);
    natsMsg* msg = nullptr;
    natsMsg_Create(&msg, subject.c_str(), nullptr, payload.data(), payload_bytes);
    po.MsgId = id.c_str();
    while (js_PublishMsgAsync(js, &msg, &po) == NATS_TIMEOUT) {
    }
    natsMsg_Destroy(msg);
  }
  jsPubOptions done;
  jsPubOptions_Init(&done);
  done.MaxWait = 60000;
  js_PublishAsyncComplete(js, &done);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("raw %.0f acked=%lld failed=%lld\n", count / seconds, static_cast<long long>(acked.load()),
              static_cast<long long>(failed.load()));
  std::printf("cpu_us %lld\n", static_cast<long long>(SelfCpuMicros()));
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return 0;
}

int CreateStream(const char* url, const char* name, const char* subjects) {
  natsConnection* nc = nullptr;
  if (natsConnection_ConnectTo(&nc, url) != NATS_OK) return std::fprintf(stderr, "connect failed\n"), 1;
  jsCtx* js = nullptr;
  natsConnection_JetStream(&js, nc, nullptr);
  const char* subject_list[] = {subjects};
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  config.Name = name;
  config.Subjects = subject_list;
  config.SubjectsLen = 1;
  config.Storage = js_FileStorage;
  config.Duplicates = 120LL * 1'000'000'000LL;
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_AddStream(&info, js, &config, nullptr, &code);
  if (info != nullptr) jsStreamInfo_Destroy(info);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  if (s != NATS_OK) return std::fprintf(stderr, "stream %s: %s (%d)\n", name, natsStatus_GetText(s), code), 1;
  return 0;
}

uint64_t StreamMessages(jsCtx* js, const char* stream) {
  jsStreamInfo* si = nullptr;
  if (js_GetStreamInfo(&si, js, stream, nullptr, nullptr) != NATS_OK) return 0;
  const uint64_t n = si->State.Msgs;
  jsStreamInfo_Destroy(si);
  return n;
}

int Drain(const char* url, const char* stream, uint64_t count, int timeout_s) {
  natsConnection* nc = nullptr;
  if (natsConnection_ConnectTo(&nc, url) != NATS_OK) return std::fprintf(stderr, "connect failed\n"), 1;
  jsCtx* js = nullptr;
  natsConnection_JetStream(&js, nc, nullptr);
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  Clock::time_point first{};
  uint64_t first_count = 0;
  for (;;) {
    const uint64_t n = StreamMessages(js, stream);
    const auto now = Clock::now();
    if (n > 0 && first == Clock::time_point{}) {
      first = now;
      first_count = n;
    }
    if (n >= count) {
      const double seconds = std::chrono::duration<double>(now - first).count();
      std::printf("drain %.0f\n", (n - first_count) / std::max(seconds, 1e-3));
      break;
    }
    if (now > deadline) return std::fprintf(stderr, "drain: %llu of %llu\n",
                                            static_cast<unsigned long long>(n),
                                            static_cast<unsigned long long>(count)), 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // few polls: they cost the server CPU
  }
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return 0;
}

struct Latency {
  std::mutex mu;
  std::unordered_map<std::string, Clock::time_point> committed;
  std::unordered_map<std::string, Clock::time_point> received;
};

void OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  auto* lat = static_cast<Latency*>(closure);
  const auto now = Clock::now();
  {
    std::lock_guard lock(lat->mu);
    lat->received.emplace(std::string(natsMsg_GetData(msg), natsMsg_GetDataLength(msg)), now);
  }
  natsMsg_Destroy(msg);
}

int LatencyMode(const char* conninfo, const char* url, const char* subject, int rate, int seconds) {
  PGconn* pg = PQconnectdb(conninfo);
  if (PQstatus(pg) != CONNECTION_OK) return std::fprintf(stderr, "%s", PQerrorMessage(pg)), 1;
  natsConnection* nc = nullptr;
  if (natsConnection_ConnectTo(&nc, url) != NATS_OK) return std::fprintf(stderr, "connect failed\n"), 1;
  Latency lat;
  natsSubscription* sub = nullptr;
  natsConnection_Subscribe(&sub, nc, subject, &OnMessage, &lat);
  natsConnection_Flush(nc);
  const int64_t total = static_cast<int64_t>(rate) * seconds;
  const auto start = Clock::now();
  const auto interval = std::chrono::nanoseconds(1'000'000'000LL / rate);
  for (int64_t i = 0; i < total; ++i) {
    std::this_thread::sleep_until(start + interval * i);
    const std::string id = "lat-" + std::to_string(i);
    const char* values[] = {id.c_str(), subject, id.c_str()};
    PQclear(PQexec(pg, "BEGIN"));
    PGresult* r = PQexecParams(pg, "SELECT idem.outbox_enqueue($1, $2, convert_to($3, 'UTF8'))", 3, nullptr,
                     values, nullptr, nullptr, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) std::fprintf(stderr, "%s", PQresultErrorMessage(r));
    PQclear(r);
    PQclear(PQexec(pg, "COMMIT"));
    const auto now = Clock::now();
    std::lock_guard lock(lat.mu);
    lat.committed.emplace(id, now);
  }
  const auto wait_until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < wait_until) {
    {
      std::lock_guard lock(lat.mu);
      if (static_cast<int64_t>(lat.received.size()) >= total) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<double> ms;
  {
    std::lock_guard lock(lat.mu);
    for (const auto& [id, t] : lat.received) {
      auto c = lat.committed.find(id);
      if (c != lat.committed.end()) ms.push_back(std::chrono::duration<double, std::milli>(t - c->second).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  const double achieved = total / std::chrono::duration<double>(Clock::now() - start).count();
  if (ms.empty()) return std::fprintf(stderr, "latency: nothing received\n"), 1;
  std::printf("latency received=%zu of %lld p50=%.2f p99=%.2f max=%.2f (enqueue rate %d/s)\n", ms.size(),
              static_cast<long long>(total), ms[ms.size() / 2], ms[ms.size() * 99 / 100], ms.back(),
              rate);
  (void)achieved;
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
  PQfinish(pg);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "raw" && argc == 7) {
    return Raw(argv[2], argv[3], std::atoll(argv[4]), std::atoi(argv[5]), std::atoi(argv[6]));
  }
  if (mode == "stream" && argc == 5) return CreateStream(argv[2], argv[3], argv[4]);
  if (mode == "drain" && argc == 6) return Drain(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10), std::atoi(argv[5]));
  if (mode == "latency" && argc == 7) {
    return LatencyMode(argv[2], argv[3], argv[4], std::atoi(argv[5]), std::atoi(argv[6]));
  }
  std::fprintf(stderr,
               "usage: relay_bench raw NATS_URL SUBJECT COUNT PAYLOAD_BYTES MAX_PENDING\n"
               "       relay_bench stream NATS_URL NAME SUBJECTS\n"
               "       relay_bench drain NATS_URL STREAM COUNT TIMEOUT_S\n"
               "       relay_bench latency DB_CONNINFO NATS_URL SUBJECT RATE SECONDS\n");
  return 2;
}
