#include "util/gateway_process.h"

#include <algorithm>

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

}  // namespace idem::testing
