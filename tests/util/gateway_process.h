// Starting the real `idem gateway` binary (and the example service behind it) for end-to-end
// tests: each on a free loopback port, its output in a log file, stopped by PID.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "util/process.h"

namespace idem::testing {

struct GatewayProcess {
  std::unique_ptr<Process> process;
  std::string address;        // clients
  std::string admin_address;  // /healthz, /readyz, /metrics, /v1/records
};

// Starts `idem_binary gateway` in front of `upstream_address` on `store`, with `extra_args`
// (the admin listener on a free port unless they name --admin-listen); output goes to
// `log_path`. On failure `process` is null and `address` holds the output.
GatewayProcess StartGatewayProcess(const std::string& idem_binary,
                                   const std::string& upstream_address, const std::string& store,
                                   const std::string& log_path,
                                   const std::vector<std::string>& extra_args = {},
                                   std::optional<long> max_open_files = std::nullopt);

// Starts the example service; returns the process and "HOST:PORT", or null and its output.
std::pair<std::unique_ptr<Process>, std::string> StartExampleService(
    const std::string& service_binary, const std::string& log_path);

// The example service with several gateways in front of it sharing one store: the set-up of
// the tests that race duplicates across gateways. Logs go to service.log and gateway-N.log in
// the directory given to Start.
struct GatewayFleet {
  std::unique_ptr<Process> service;
  std::string service_address;
  std::vector<GatewayProcess> gateways;

  // Starts `service_binary`, then `count` gateways of `idem_binary` on `store` with
  // `extra_args`. "" on success, else the output of the process that did not start.
  std::string Start(const std::string& idem_binary, const std::string& service_binary,
                    const std::string& dir, const std::string& store, int count,
                    const std::vector<std::string>& extra_args = {});
  // Where gateway `gateway` logs.
  std::string LogPath(int gateway) const;
  // How many times the service executed `key`; -1 (and a test failure) when it did not answer.
  int Executions(const std::string& key) const;

 private:
  std::string dir_;
};

}  // namespace idem::testing
