#include "util/gateway_process.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "util/http_client.h"

namespace idem::testing {

using namespace std::chrono_literals;

GatewayProcess StartGatewayProcess(const std::string& idem_binary,
                                   const std::string& upstream_address, const std::string& store,
                                   const std::string& log_path,
                                   const std::vector<std::string>& extra_args,
                                   std::optional<long> max_open_files) {
  std::vector<std::string> argv = {idem_binary, "gateway", "--listen", "127.0.0.1:0",
                                   "--upstream", "http://" + upstream_address, "--store", store};
  if (std::find(extra_args.begin(), extra_args.end(), "--admin-listen") == extra_args.end()) {
    argv.insert(argv.end(), {"--admin-listen", "127.0.0.1:0"});
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  GatewayProcess gateway;
  gateway.process = std::make_unique<Process>(argv, log_path, std::nullopt, max_open_files);
  auto line = gateway.process->WaitForLine("gateway on", 10s);
  if (!line) {
    gateway.address = gateway.process->Output();
    gateway.process.reset();
    return gateway;
  }
  gateway.address = AddressAfter(*line, "gateway on ");
  gateway.admin_address = AddressAfter(*line, "admin on ");
  return gateway;
}

std::pair<std::unique_ptr<Process>, std::string> StartExampleService(
    const std::string& service_binary, const std::string& log_path) {
  auto service = std::make_unique<Process>(std::vector<std::string>{service_binary, "127.0.0.1:0"},
                                           log_path);
  auto line = service->WaitForLine("listening on", 10s);
  if (!line) return {nullptr, service->Output()};
  return {std::move(service), AddressAfter(*line, "listening on ")};
}

std::string GatewayFleet::Start(const std::string& idem_binary, const std::string& service_binary,
                                const std::string& dir, const std::string& store, int count,
                                const std::vector<std::string>& extra_args) {
  dir_ = dir;
  auto [started, address] = StartExampleService(service_binary, dir_ + "/service.log");
  if (started == nullptr) return "the example service did not start: " + address;
  service = std::move(started);
  service_address = address;
  for (int i = 0; i < count; ++i) {
    gateways.push_back(StartGatewayProcess(idem_binary, service_address, store, LogPath(i), extra_args));
    if (gateways.back().process == nullptr) {
      return "gateway " + std::to_string(i) + " did not start: " + gateways.back().address;
    }
  }
  return "";
}

std::string GatewayFleet::LogPath(int gateway) const {
  return dir_ + "/gateway-" + std::to_string(gateway) + ".log";
}

int GatewayFleet::Executions(const std::string& key) const {
  const HttpResponse r = Http(service_address, "GET", "/executions?key=" + key);
  if (r.status != 200) ADD_FAILURE() << "the service's /executions answered " << r.status << " " << r.error;
  return r.status == 200 ? std::stoi(r.body) : -1;
}

}  // namespace idem::testing
