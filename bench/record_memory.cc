// Bytes a stored record costs, against its payload: RSS growth per record for the memory store,
// and RSS plus database file (with its WAL) per record for SQLite.
//
//   build/release/bench/idem_record_memory_bench STORE_URL RECORDS BODY_BYTES
//   build/release/bench/idem_record_memory_bench memory 100000 256
//   build/release/bench/idem_record_memory_bench sqlite:/tmp/r.db 100000 4096
//
// Each record is what the gateway stores for a first execution: scope (a 64-character tenant
// digest, no client, a 36-character key), fingerprint, a 201 with Content-Type and Location,
// and a body of BODY_BYTES. The payload is the body plus the header names and values. Prints
// one line: store, records, body, payload, bytes per record (RSS; for SQLite also the files),
// and the ratio to the aim of 2 x payload + 200 bytes. bench/record-memory.sh runs
// the four cases. Not part of the test suite.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "idem/fingerprint.h"
#include "idem/store.h"

namespace {

using namespace idem;

long ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

long FileBytes(const std::string& path) {
  long total = 0;
  for (const char* suffix : {"", "-wal"}) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(path + suffix, ec);
    if (!ec) total += static_cast<long>(n);
  }
  return total;
}

std::string Key(long i) {
  char key[64];
  std::snprintf(key, sizeof key, "0190b6a2-%04lx-7%03lx-8%03lx-%012lx", (i >> 24) & 0xffff,
                (i >> 12) & 0xfff, i & 0xfff, i);
  return key;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s STORE_URL RECORDS BODY_BYTES\n", argv[0]);
    return 2;
  }
  const std::string url = argv[1];
  const long records = std::atol(argv[2]);
  const long body_bytes = std::atol(argv[3]);
  std::string path;
  if (url.rfind("sqlite:", 0) == 0) {
    path = url.substr(7, url.find('?') == std::string::npos ? std::string::npos
                                                            : url.find('?') - 7);
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  }
  auto store = OpenStore(url);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 2;
  }
  const Fingerprint fp = *ComputeFingerprint({}, {"POST", "/v1/payments", "", "{}", {}});
  const StoredResponse response{201,
                                {{"Content-Type", "application/json"},
                                 {"Location", "/v1/payments/pay_0190b6a2"}},
                                std::string(static_cast<size_t>(body_bytes), 'x')};
  long payload = static_cast<long>(response.body.size());
  for (const auto& [name, value] : response.headers) payload += name.size() + value.size();
  const std::string tenant(64, 'a');

  // A first batch warms up the allocator and the store's fixed structures.
  const long warm = records / 10;
  long rss_before = 0, files_before = 0;
  for (long i = 0; i < records + warm; ++i) {
    if (i == warm) {
      rss_before = ResidentBytes();
      files_before = path.empty() ? 0 : FileBytes(path);
    }
    const Scope scope{tenant, "", Key(i)};
    auto begun = (*store)->Begin(scope, fp, std::chrono::seconds(60));
    if (!begun.ok() || !std::holds_alternative<Acquired>(*begun)) {
      std::fprintf(stderr, "begin %ld failed\n", i);
      return 1;
    }
    auto done = (*store)->Complete(scope, std::get<Acquired>(*begun).token, response,
                                   std::chrono::hours(24));
    if (!done.ok() || *done != CompleteOutcome::kOk) {
      std::fprintf(stderr, "complete %ld failed\n", i);
      return 1;
    }
  }
  const double rss_per = static_cast<double>(ResidentBytes() - rss_before) / records;
  const double files_per =
      path.empty() ? 0 : static_cast<double>(FileBytes(path) - files_before) / records;
  const double aim = 2.0 * payload + 200;
  std::printf("%-8s records %ld  body %5ld  payload %5ld  RSS/record %7.0f", url.substr(0, 6).c_str(),
              records, body_bytes, payload, rss_per);
  if (!path.empty()) std::printf("  file/record %7.0f", files_per);
  std::printf("  aim (2 x payload + 200) %6.0f  RSS %.2fx aim", aim, rss_per / aim);
  if (!path.empty()) std::printf(", file %.2fx aim", files_per / aim);
  std::printf("\n");
  if (!path.empty()) {
    store->reset();
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  }
  return 0;
}
