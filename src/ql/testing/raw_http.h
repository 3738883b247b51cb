#pragma once

// Raw HTTP/1.1 over loopback sockets for tests that must send what a well-behaved client never
// would (oversized lines, bodies that do not come, Expect headers) and see exactly what the
// server answers and whether it ended the connection.

#include <cstddef>
#include <string>

namespace ql::testing {

// Connects to 127.0.0.1:`port`; returns the socket, or -1 on failure.
int ConnectLoopback(int port);

// Sends all of `data` unless the peer stops reading; returns the bytes sent.
size_t SendAll(int fd, const char* data, size_t size);

struct Exchanged {
  std::string answer;
  bool closed = false;  // the server ended the connection (rather than the wait running out)
};

// Reads from `fd` until the server closes it or `wait_ms` pass without data.
Exchanged ReadAnswer(int fd, int wait_ms);

// Sends `request` on a new connection (all of it, unless the server stops reading) and reads
// the answer as ReadAnswer does; then closes the connection.
Exchanged Exchange(int port, const std::string& request, int wait_ms = 2000);

}  // namespace ql::testing
