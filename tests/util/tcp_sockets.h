// The IPv4 TCP sockets of this machine as /proc/net/tcp lists them (the tests' servers listen
// on 127.0.0.1), for tests that wait until a server has read what a client sent it before the
// client died or stopped, or until a peer's close has reached the other end.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace idem::testing {

struct TcpSocket {
  // The kernel's states (include/net/tcp_states.h) that the tests look at.
  static constexpr int kEstablished = 0x01;
  static constexpr int kCloseWait = 0x08;  // the peer closed; the owner has not yet
  static constexpr int kListen = 0x0A;

  int local_port = 0;
  int remote_port = 0;
  int state = 0;
  long unsent = 0;  // written, not yet acknowledged by the peer (tx_queue)
  long unread = 0;  // received, not yet read by the owner (rx_queue)
};

inline std::vector<TcpSocket> TcpSockets() {
  std::vector<TcpSocket> sockets;
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  // "  0: 0100007F:1F90 0100007F:D2C4 01 00000000:00000000 ..."
  auto port = [](const std::string& address) {
    return std::stoi(address.substr(address.find(':') + 1), nullptr, 16);
  };
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues;
    if (!(fields >> slot >> local >> remote >> state >> queues)) continue;
    TcpSocket s;
    s.local_port = port(local);
    s.remote_port = port(remote);
    s.state = std::stoi(state, nullptr, 16);
    s.unsent = std::stol(queues.substr(0, queues.find(':')), nullptr, 16);
    s.unread = std::stol(queues.substr(queues.find(':') + 1), nullptr, 16);
    sockets.push_back(s);
  }
  return sockets;
}

// True when the server listening on `port` has read every byte its clients sent: no
// connection to it holds bytes in flight or unread, and none that its client closed (or whose
// client was killed) still waits for the server to read up to the end.
inline bool ServerHasReadEverything(int port) {
  for (const TcpSocket& s : TcpSockets()) {
    if (s.state == TcpSocket::kListen) continue;
    if (s.local_port == port && (s.unread > 0 || s.state == TcpSocket::kCloseWait)) return false;
    if (s.remote_port == port && s.unsent > 0) return false;
  }
  return true;
}

// True when no connection to `port` is open from the client's side: every one was closed by
// the server, and the client's kernel has its FIN (or the connection is gone).
inline bool NoOpenConnectionTo(int port) {
  for (const TcpSocket& s : TcpSockets()) {
    if (s.remote_port == port && s.state == TcpSocket::kEstablished) return false;
  }
  return true;
}

}  // namespace idem::testing
