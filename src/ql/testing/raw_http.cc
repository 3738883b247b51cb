#include "ql/testing/raw_http.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace ql::testing {

int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

size_t SendAll(int fd, const char* data, size_t size) {
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return sent;
}

Exchanged ReadAnswer(int fd, int wait_ms) {
  timeval tv{wait_ms / 1000, (wait_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  Exchanged out;
  char buf[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      out.answer.append(buf, static_cast<size_t>(n));
      continue;
    }
    out.closed = n == 0 || errno == ECONNRESET;
    return out;
  }
}

Exchanged Exchange(int port, const std::string& request, int wait_ms) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return {};
  SendAll(fd, request.data(), request.size());
  Exchanged out = ReadAnswer(fd, wait_ms);
  ::close(fd);
  return out;
}

}  // namespace ql::testing
