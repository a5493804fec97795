// chaos::Pipeline's processes: `idem relay`, `idem consume` and `idem gateway` launched as
// children of the supervisor thread, and brought back by it when they die.
#include "chaos/pipeline_impl.h"

namespace idem::chaos {

std::string Pipeline::Impl::LaunchGateway() {
  std::vector<std::string> argv = {config.idem_binary, "gateway", "--listen", gateway_listen,
                                   "--upstream",
                                   "http://127.0.0.1:" + std::to_string(service_port),
                                   "--store",  store_url, "--config", dir.File("gateway.toml")};
  if (!durable_url.empty()) {
    argv.push_back("--durable-store");
    argv.push_back(durable_url);
  }
  if (config.movable_clock) {
    argv.push_back("--unsafe-clock-offset-file");
    argv.push_back(ClockOffsetFile());
  }
  gateway = std::make_unique<Process>(argv, Log("gateway"));
  if (!gateway->WaitForLine("gateway on", 15s)) return "idem gateway did not start:\n" + gateway->Output();
  return "";
}

std::string Pipeline::Impl::LaunchRelay(bool crash) {
  std::vector<std::string> argv;
  // The crash point goes through env(1): setenv in this multi-threaded process would race
  // with libpq reading the environment on another thread.
  if (crash) argv = {"/usr/bin/env", "IDEM_TEST_CRASH_POINT=relay.after_publish"};
  for (std::string a : {config.idem_binary, std::string("relay"), std::string("--store"),
                        db_url, std::string("--nats"), nats_url,
                        std::string("--create-stream"), stream,
                        std::string("--subjects"), subject,
                        std::string("--duplicate-window"),
                        std::to_string(config.duplicate_window.count()) + "ms",
                        std::string("--claim-lease"), std::string("1s"),
                        std::string("--poll-interval"), std::string("200ms"),
                        std::string("--admin-listen"), std::string("127.0.0.1:0")}) {
    argv.push_back(a);
  }
  relay = std::make_unique<Process>(argv, Log("relay"));
  relay_armed = crash;
  if (!relay->WaitForLine("admin on", 15s)) return "idem relay did not start:\n" + relay->Output();
  return "";
}

std::vector<std::string> Pipeline::Impl::ConsumeArgv(const std::string& name) const {
  return {config.idem_binary, "consume", "--nats", nats_url, "--stream", stream,
          "--consumer", name, "--deliver",
          "http://127.0.0.1:" + std::to_string(service_port) + "/apply",
          "--ack-wait", "2s", "--timeout", "1s", "--nak-delay", "10ms",
          "--max-nak-delay", "50ms", "--max-in-flight", "8",
          // 50 ms backoffs would reach the default delivery limit within a PostgreSQL
          // restart; the run checks exactly-once effects, not poison messages.
          "--max-deliver", "0"};
}

bool Pipeline::Impl::StreamExists() {
  return Poll(kNatsComeback, [&] {
    auto admin = Admin();
    if (!admin.ok()) return false;
    jsStreamInfo* info = nullptr;
    natsStatus s = js_GetStreamInfo(&info, (*admin)->js(), stream.c_str(), nullptr, nullptr);
    if (info != nullptr) jsStreamInfo_Destroy(info);
    return s == NATS_OK;
  });
}

std::string Pipeline::Impl::LaunchConsumer() {
  // idem consume exits at start when its stream does not exist: start it once the relay
  // has created the stream.
  if (!StreamExists()) {
    return "the stream " + stream + " was not reachable within 60 s" +
           (relay ? "\nidem relay:\n" + relay->Output() : "");
  }
  consumer = std::make_unique<Process>(ConsumeArgv("chaos-apply"), Log("consume"));
  if (!consumer->WaitForLine("pulling from", 15s)) {
    // The relay creates the stream; when it could not, its log says why.
    return "idem consume did not start:\n" + consumer->Output() +
           (relay ? "\nidem relay:\n" + relay->Output() : "");
  }
  return "";
}

void Pipeline::Impl::Supervise(Pipeline* owner) {
  while (!stopping) {
    std::this_thread::sleep_for(20ms);
    MutexLock lock(mu);
    while (!tasks.empty()) {
      tasks.front()();
      tasks.pop_front();
    }
    if (stopping) break;
    if (relay && !relay->Running() && !relay_held) RestartDeadRelay(owner);
    if (consumer && !consumer->Running()) {
      if (auto e = LaunchConsumer(); !e.empty()) error = e;
    }
    if (gateway_down) RestartGatewayLocked();
  }
}

void Pipeline::Impl::RestartDeadRelay(Pipeline* owner) {
  if (relay_armed) {
    ++owner->relay_crashes_;
    relay_armed = false;
    relay_held = hold_after_crash;
    relay_crashed_at = std::chrono::steady_clock::now();
  }
  // A crashed relay's rows are free at once (its transaction dies with it). With layer 3
  // off (a window of 100 ms) the next relay starts three windows later, so that the
  // broker has surely forgotten what the crashed one published.
  const auto wait = config.duplicate_window < 1s ? 3 * config.duplicate_window : 0ms;
  if (!relay_held && std::chrono::steady_clock::now() - relay_crashed_at >= wait) {
    if (auto e = LaunchRelay(false); !e.empty()) error = e;
  }
}

void Pipeline::Impl::RestartGatewayLocked() {
  const auto now = std::chrono::steady_clock::now();
  if (now - gateway_last_start < kGatewayRestartGap) return;
  gateway_last_start = now;
  const std::string e = LaunchGateway();
  if (e.empty()) {
    gateway_down = false;
    return;
  }
  if (now - gateway_down_since >= config.gateway_comeback) {
    gateway_down = false;
    GiveUp("the killed gateway did not start again within " +
           std::to_string(config.gateway_comeback.count()) + " ms; its last attempt: " + e);
  }
}

}  // namespace idem::chaos
