#include "servers/process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <grp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace idem::servers {

Process::Process(std::vector<std::string> argv, std::string log_path,
                 std::optional<RunAs> run_as, std::optional<long> max_open_files,
                 bool own_process_group)
    : log_path_(std::move(log_path)), own_process_group_(own_process_group) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  // The log is truncated here, before the fork, so WaitForLine never reads what an earlier
  // process wrote to the same file.
  const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_ = fork();
  if (pid_ == 0) {
    // If the test process dies (an assertion aborts it), the child dies with it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (own_process_group) setpgid(0, 0);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    // Nothing else of the parent's crosses over: sockets and files it opened without
    // O_CLOEXEC (libraries do) would count against the child's descriptor limit, and
    // PostgreSQL refuses to start with fewer than about 50 to spare.
    close_range(3, ~0U, 0);
    if (run_as && (setgroups(0, nullptr) != 0 || setgid(run_as->gid) != 0 ||
                   setuid(run_as->uid) != 0)) {
      _exit(126);
    }
    // A change of credentials clears the parent-death signal: set it again.
    if (run_as) prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (max_open_files) {
      const rlimit limit{static_cast<rlim_t>(*max_open_files), static_cast<rlim_t>(*max_open_files)};
      if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(125);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  // Both sides set the group (the usual idiom), so it exists whichever runs first.
  if (pid_ > 0 && own_process_group) setpgid(pid_, pid_);
  if (fd >= 0) close(fd);
}

Process::~Process() {
  if (Running()) Stop(SIGKILL);
}

bool Process::Running() {
  if (pid_ <= 0 || reaped_) return false;
  const pid_t r = waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    return false;
  }
  return true;
}

std::string Process::Output() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::string> Process::WaitForLine(const std::string& needle,
                                                std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string out = Output();
    const size_t at = out.find(needle);
    if (at != std::string::npos) {
      const size_t begin = out.rfind('\n', at);
      const size_t end = out.find('\n', at);
      const size_t from = begin == std::string::npos ? 0 : begin + 1;
      return out.substr(from, end == std::string::npos ? std::string::npos : end - from);
    }
    if (!Running()) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

int Process::Stop(int signal, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  if (reaped_) return status_;
  kill(pid_, signal);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid_, &status_, WNOHANG) == pid_) {
      reaped_ = true;
      return status_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status_, 0);
  reaped_ = true;
  return -1;
}

namespace {

// The processes whose parent is `parent`, read from /proc.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    long ppid = 0;
    if (rest >> state >> ppid && ppid == parent) children.push_back(std::stoi(name));
  }
  return children;
}

}  // namespace

void Process::KillGroup() {
  // Running() first: the pid of a child already reaped may belong to another process by now.
  if (pid_ <= 0 || !Running()) return;
  // Stopped, the leader forks nothing between the scan and the kill. Its direct children die
  // too, even those that left its group: PostgreSQL's each call setsid(), and a backend whose
  // postmaster alone was killed can still answer its connection's next query for a moment.
  // kill() only queues SIGSTOP: wait until the leader has really stopped, or a fork it was
  // about to make would land after the scan, and that child would outlive the kill. (A
  // PostgreSQL backend left so, holding the server's shared memory, kept every restart of a
  // chaos run's PostgreSQL from starting.)
  kill(pid_, SIGSTOP);
  int status = 0;
  const bool exited = waitpid(pid_, &status, WUNTRACED) == pid_ && !WIFSTOPPED(status);
  for (pid_t child : ChildrenOf(pid_)) kill(child, SIGKILL);
  if (own_process_group_) killpg(pid_, SIGKILL);
  if (exited) {
    status_ = status;
  } else {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
  reaped_ = true;
}

std::optional<int> Process::WaitForExit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reaped_) {
    if (waitpid(pid_, &status_, WNOHANG) == pid_) {
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

std::string AddressAfter(const std::string& line, const std::string& marker) {
  const size_t at = line.find(marker);
  if (at == std::string::npos) return {};
  size_t begin = at + marker.size();
  size_t end = begin;
  while (end < line.size() && (std::isdigit(static_cast<unsigned char>(line[end])) ||
                               line[end] == '.' || line[end] == ':')) {
    ++end;
  }
  return line.substr(begin, end - begin);
}

}  // namespace idem::servers
