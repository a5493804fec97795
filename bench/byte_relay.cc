// idem_byte_relay: the least any proxy in front of an upstream can do, as a latency reference
// for bench/gateway-bench.sh. For each client connection it opens one connection to the upstream
// and copies bytes both ways, each way on a thread of its own that blocks in recv and sends what
// it got: no HTTP parsing, no event loop, no buffering beyond one recv. A request through it
// costs one recv and one send each way and two more thread wake-ups than going direct, which any
// proxy pays too; the time it adds over the upstream alone is the floor of the time a proxy adds.
//
//   idem_byte_relay UPSTREAM_HOST:PORT     listens on 127.0.0.1 (a free port) and prints
//                                          "relay on 127.0.0.1:PORT"; runs until killed
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Copies from `from` to `to` until either side ends, then shuts both down so the other
// direction's thread ends as well.
void Copy(int from, int to) {
  std::array<char, 16384> buffer{};
  for (;;) {
    const ssize_t got = ::recv(from, buffer.data(), buffer.size(), 0);
    if (got <= 0) break;
    ssize_t sent = 0;
    while (sent < got) {
      const ssize_t n = ::send(to, buffer.data() + sent, static_cast<size_t>(got - sent),
                               MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += n;
    }
    if (sent < got) break;
  }
  ::shutdown(from, SHUT_RDWR);
  ::shutdown(to, SHUT_RDWR);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s UPSTREAM_HOST:PORT\n", argv[0]);
    return 2;
  }
  const std::string upstream = argv[1];
  const auto colon = upstream.rfind(':');
  sockaddr_in target{};
  target.sin_family = AF_INET;
  const int port = colon == std::string::npos ? 0 : std::atoi(upstream.c_str() + colon + 1);
  if (port < 1 || port > 65535 ||
      ::inet_pton(AF_INET, upstream.substr(0, colon).c_str(), &target.sin_addr) != 1) {
    std::fprintf(stderr, "%s: want an IPv4 HOST:PORT, got %s\n", argv[0], argv[1]);
    return 2;
  }
  target.sin_port = htons(static_cast<uint16_t>(port));

  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof local;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::listen(listener, 128) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    std::perror("listen");
    return 1;
  }
  std::printf("relay on 127.0.0.1:%d\n", ntohs(local.sin_port));
  std::fflush(stdout);

  for (;;) {
    const int client = ::accept(listener, nullptr, nullptr);
    if (client < 0) continue;
    const int server = ::socket(AF_INET, SOCK_STREAM, 0);
    if (server < 0 ||
        ::connect(server, reinterpret_cast<const sockaddr*>(&target), sizeof target) != 0) {
      std::perror("connect to the upstream");
      ::close(client);
      if (server >= 0) ::close(server);
      continue;
    }
    NoDelay(client);
    NoDelay(server);
    // The two copies share the descriptors; the second to finish closes them.
    std::thread([client, server] {
      std::thread back([client, server] { Copy(server, client); });
      Copy(client, server);
      back.join();
      ::close(client);
      ::close(server);
    }).detach();
  }
}
