// The C++ consumer runtime under test: a JetStreamConsumer that applies ledger messages
// (util/ledger_message.h). The crash tests start it with IDEM_TEST_CRASH_POINT set and see it
// SIGKILL itself at that point; SIGTERM stops it cleanly, printing its stats.
//
//   idem_ledger_consumer NATS_URL STREAM CONSUMER PG_CONNINFO [--no-inbox] [--ack-wait-ms N]
//                        [--messages-per-transaction N]
#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "idem/worker_consumer.h"
#include "util/ledger_message.h"

namespace {
idem::worker::JetStreamConsumer* g_consumer = nullptr;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: idem_ledger_consumer NATS_URL STREAM CONSUMER PG_CONNINFO [--no-inbox] "
                 "[--ack-wait-ms N] [--messages-per-transaction N]\n";
    return 2;
  }
  // SIGTERM is taken by a thread of our own (Stop takes a mutex, which a signal handler must
  // not), so block it before any thread exists: nats.c starts its own in Create.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  idem::worker::JetStreamConsumer::Options o;
  o.nats_url = argv[1];
  o.stream = argv[2];
  o.consumer = argv[3];
  o.nak_delay = std::chrono::milliseconds(20);
  o.max_nak_delay = std::chrono::milliseconds(500);
  o.fetch_wait = std::chrono::milliseconds(200);
  o.max_deliver = 0;  // backoffs this short would reach the limit within a database restart
  for (int i = 5; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-inbox") == 0) o.inbox = false;
    if (std::strcmp(argv[i], "--ack-wait-ms") == 0 && i + 1 < argc) {
      o.ack_wait = std::chrono::milliseconds(std::atoi(argv[++i]));
    }
    if (std::strcmp(argv[i], "--messages-per-transaction") == 0 && i + 1 < argc) {
      o.messages_per_transaction = std::atoi(argv[++i]);
    }
  }
  o.log = [](std::string_view level, std::string_view line) {
    std::cout << level << " " << line << std::endl;
  };
  auto consumer = idem::worker::JetStreamConsumer::Create(o, argv[4]);
  if (!consumer.ok()) {
    std::cout << "cannot create: " << consumer.status().ToString() << std::endl;
    return 2;
  }
  g_consumer = consumer->get();
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&set, &sig);
    g_consumer->Stop();
  });
  idem::Status s = (*consumer)->Run([](PGconn* conn, const idem::worker::ConsumedMessage& m) {
    return idem::testing::ApplyLedgerMessage(conn, m.key, m.data);
  });
  // Joined, not detached: the consumer must outlive the Stop() call made from that thread. If
  // Run ended by itself, this wakes the waiter (the signal is blocked, so it stays pending for
  // its sigwait); if the waiter already took a signal, this one is dropped with the thread.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  const auto st = (*consumer)->stats();
  std::cout << "stopped: applied " << st.applied << " duplicates " << st.duplicates << " naked "
            << st.naked << " termed " << st.termed << " errors " << st.errors << std::endl;
  return s.ok() ? 0 : 1;
}
