// A child process for crash tests: opens a store, drives one scope, reports on stdout, then
// waits to be killed with SIGKILL.
//
//   idem_store_child URL TENANT KEY complete   begin + complete, print "completed TOKEN"
//   idem_store_child URL TENANT KEY begin      begin only,       print "began TOKEN"
//   idem_store_child URL TENANT KEY purge      purge only,       print "purged 1" (or 0: no
//                                              live record)
// A sixth argument names the durable store of a tiered store (StoreOptions::durable_store).
#include <unistd.h>

#include <cstdio>
#include <string>

#include "idem/fingerprint.h"
#include "idem/store.h"

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: %s URL TENANT KEY begin|complete|purge [DURABLE_URL]\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[4];
  idem::StoreOptions options;
  if (argc == 6) options.durable_store = argv[5];
  auto store = idem::OpenStore(argv[1], options);
  if (!store.ok()) {
    std::printf("error %s\n", store.status().ToString().c_str());
    return 1;
  }
  const idem::Scope scope{argv[2], "", argv[3]};
  if (mode == "purge") {
    auto purged = (*store)->Purge(scope);
    if (!purged.ok()) {
      std::printf("error purge %s\n", purged.status().ToString().c_str());
      return 1;
    }
    std::printf("purged %d\n", *purged ? 1 : 0);
    std::fflush(stdout);
    for (;;) pause();  // the parent kills us here
  }
  auto fp = idem::ComputeFingerprint({}, {"POST", "/crash", "", "body", {}});
  auto begun = (*store)->Begin(scope, *fp, std::chrono::seconds(30));
  if (!begun.ok() || !idem::OwnedToken(*begun)) {
    std::printf("error begin %s\n", begun.ok() ? "not acquired" : begun.status().ToString().c_str());
    return 1;
  }
  const idem::FencingToken token = *idem::OwnedToken(*begun);
  if (mode == "complete") {
    const idem::StoredResponse response{201, {{"Location", "/crash/1"}}, "created"};
    auto done = (*store)->Complete(scope, token, response, std::chrono::hours(1));
    if (!done.ok() || *done != idem::CompleteOutcome::kOk) {
      std::printf("error complete\n");
      return 1;
    }
    std::printf("completed %llu\n", static_cast<unsigned long long>(token));
  } else {
    std::printf("began %llu\n", static_cast<unsigned long long>(token));
  }
  std::fflush(stdout);
  for (;;) pause();  // the parent kills us here
}
