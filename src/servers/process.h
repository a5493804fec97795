// A child process for end-to-end tests and `idem chaos`: started with fork/exec, its output
// captured to a file, stopped by PID (SIGTERM or SIGKILL) when the object goes away.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace idem::servers {

// A user to run a child as (PostgreSQL refuses to run as root).
struct RunAs {
  uid_t uid;
  gid_t gid;
};

class Process {
 public:
  // Starts `argv[0]` with `argv`; stdout and stderr go to `log_path`. With `run_as`, the child
  // drops to that user and group before exec (the caller must be root).
  // With `max_open_files`, the child lowers its RLIMIT_NOFILE to it before exec.
  // With `own_process_group`, the child leads a new process group, so KillGroup() reaches the
  // children it forks too (a server's worker processes).
  Process(std::vector<std::string> argv, std::string log_path,
          std::optional<RunAs> run_as = std::nullopt,
          std::optional<long> max_open_files = std::nullopt, bool own_process_group = false);
  ~Process();  // SIGKILL if still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Waits until the output contains `needle`; returns the whole line, or nullopt on timeout or
  // if the process exits first.
  std::optional<std::string> WaitForLine(const std::string& needle,
                                         std::chrono::milliseconds timeout);
  std::string Output() const;
  // Sends `signal` and waits for the exit; returns the wait status, or -1 on timeout.
  int Stop(int signal, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // SIGKILLs the process, its direct children (also those that left its group with setsid, as
  // PostgreSQL's backends do) and its whole process group (started with own_process_group) at
  // once, as a machine crash would, and reaps the leader. Nothing if it is no longer running.
  void KillGroup();
  // Waits for the process to exit by itself; returns the wait status, or nullopt on timeout.
  std::optional<int> WaitForExit(std::chrono::milliseconds timeout);
  bool Running();

 private:
  pid_t pid_ = -1;
  std::string log_path_;
  bool own_process_group_ = false;
  bool reaped_ = false;
  int status_ = 0;
};

// "127.0.0.1:PORT" from a line such as "... gateway on 127.0.0.1:43605, ..." after `marker`.
std::string AddressAfter(const std::string& line, const std::string& marker);

}  // namespace idem::servers
