// Using an idem store directly from a C++ service: run a side effect at most once per key,
// however often the caller retries.
//
//   embed_store [STORE_URL]      (default: memory)
#include <iostream>
#include <string>

#include "idem/fingerprint.h"
#include "idem/store.h"

namespace {

int charges_made = 0;

// The side effect we must not repeat.
idem::StoredResponse ChargeCard(std::string_view body) {
  ++charges_made;
  return {201, {{"Content-Type", "application/json"}}, R"({"charge":"ch_1","request":)" +
                                                           std::string(body) + "}"};
}

// One attempt of the operation, as a retrying caller would make it.
idem::StoredResponse Handle(idem::Store& store, const idem::Scope& scope, std::string_view body) {
  const auto fp = idem::ComputeFingerprint({}, {"POST", "/charges", "", body, {}});
  if (!fp.ok()) return {500, {}, fp.status().ToString()};
  auto begun = store.Begin(scope, *fp, std::chrono::seconds(30));
  if (!begun.ok()) return {503, {}, begun.status().ToString()};  // store down: fail closed

  if (auto* replay = std::get_if<idem::Replay>(&*begun)) return replay->response;
  if (std::holds_alternative<idem::InFlight>(*begun)) return {409, {}, "in flight, retry later"};
  if (std::holds_alternative<idem::Mismatch>(*begun)) return {422, {}, "key reused"};

  const idem::FencingToken token = *idem::OwnedToken(*begun);
  idem::StoredResponse response = ChargeCard(body);
  auto completed = store.Complete(scope, token, response, std::chrono::hours(24));
  if (!completed.ok()) std::cerr << "complete failed: " << completed.status().ToString() << "\n";
  return response;
}

}  // namespace

int main(int argc, char** argv) {
  auto store = idem::OpenStore(argc > 1 ? argv[1] : "memory");
  if (!store.ok()) {
    std::cerr << store.status().ToString() << "\n";
    return 2;
  }
  auto scope = idem::Scope::Make("tenant-a", "", "order-123-charge");
  if (!scope.ok()) return 2;

  for (int attempt = 1; attempt <= 3; ++attempt) {
    const auto response = Handle(**store, *scope, R"({"amount":250})");
    std::cout << "attempt " << attempt << ": " << response.status << " " << response.body << "\n";
  }
  const auto reused = Handle(**store, *scope, R"({"amount":9000})");
  std::cout << "same key, other body: " << reused.status << " " << reused.body << "\n";
  std::cout << "charges made: " << charges_made << "\n";
  return charges_made == 1 ? 0 : 1;
}
