// An anonymous client cannot exhaust ql-local's HTTP front: hostile requests are refused from
// their headers, cost the daemon almost no memory and do not delay authenticated calls.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "ql/testing/raw_http.h"

namespace ql::itest {
namespace {

using Clock = std::chrono::steady_clock;
using testing::SendAll;

// Reads until the peer closes, an error, or `ms` without data.
std::string ReadAll(int fd, int ms) { return testing::ReadAnswer(fd, ms).answer; }

int64_t RssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

int PortOf(const std::string& server) { return std::stoi(server.substr(server.rfind(':') + 1)); }

std::string ReadToken(const std::string& data_dir) {
  std::ifstream in(data_dir + "/owner.token");
  std::string token;
  std::getline(in, token);
  return token;
}

// One authenticated GET /api/v1/status on a new connection; returns the status line.
std::string AuthenticatedStatus(int port, const std::string& token) {
  const int fd = testing::ConnectLoopback(port);
  if (fd < 0) return "connect failed";
  const std::string request = "GET /api/v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                              token + "\r\nConnection: close\r\n\r\n";
  SendAll(fd, request.data(), request.size());
  const std::string answer = ReadAll(fd, 5000);
  ::close(fd);
  return answer.substr(0, answer.find("\r\n"));
}

TEST(HttpAttack, AnonymousFloodsCostLittleMemoryAndDoNotDelayAuthenticatedCalls) {
  TempDir tmp;
  LocalDaemon daemon(tmp.path() + "/data");
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  const int port = PortOf(daemon.server());
  const std::string token = ReadToken(daemon.data_dir());
  // Warm up every worker thread so the idle figure includes their stacks.
  for (int i = 0; i < 16; ++i) ASSERT_EQ(AuthenticatedStatus(port, token), "HTTP/1.1 200 OK");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int64_t idle_kib = RssKib(daemon.pid());
  ASSERT_GT(idle_kib, 0);

  const std::string body(20u << 20, 'x');
  std::string long_line = "GET /" + std::string(50u << 20, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n";
  std::atomic<bool> attacking{true};
  std::atomic<int64_t> peak_kib{idle_kib};
  std::atomic<int> body_attacks{0}, line_attacks{0};
  std::vector<std::string> failures;
  std::mutex failures_mu;
  auto fail = [&](std::string what) {
    std::lock_guard<std::mutex> lock(failures_mu);
    if (failures.size() < 20) failures.push_back(std::move(what));
  };

  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    while (attacking) {
      int64_t rss = RssKib(daemon.pid());
      int64_t seen = peak_kib.load();
      while (rss > seen && !peak_kib.compare_exchange_weak(seen, rss)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  // Like curl --data-binary @20MB: ask first, send the body on 100 Continue or after 1 s.
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      while (attacking) {
        const int fd = testing::ConnectLoopback(port);
        if (fd < 0) continue;
        const std::string head =
            "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: " +
            std::to_string(body.size()) + "\r\nExpect: 100-continue\r\n\r\n";
        SendAll(fd, head.data(), head.size());
        std::string answer = ReadAll(fd, 1000);
        if (answer.empty() || answer.rfind("HTTP/1.1 100", 0) == 0) {
          SendAll(fd, body.data(), body.size());
          answer += ReadAll(fd, 2000);
          fail("the body was invited: " + answer.substr(0, 60));
        } else if (answer.rfind("HTTP/1.1 401", 0) != 0 ||
                   answer.find("Connection: close") == std::string::npos) {
          fail("expect answer: " + answer.substr(0, 200));
        }
        ::close(fd);
        ++body_attacks;
      }
    });
  }
  // A 50 MB request line: the daemon must stop reading long before its end.
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      while (attacking) {
        const int fd = testing::ConnectLoopback(port);
        if (fd < 0) continue;
        const size_t sent = SendAll(fd, long_line.data(), long_line.size());
        if (sent == long_line.size()) fail("the whole 50 MB request line was accepted");
        ::close(fd);
        ++line_attacks;
      }
    });
  }

  std::vector<double> latencies_ms;
  const auto attack_end = Clock::now() + std::chrono::seconds(3);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  while (Clock::now() < attack_end) {
    const auto start = Clock::now();
    const std::string status = AuthenticatedStatus(port, token);
    latencies_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    EXPECT_EQ(status, "HTTP/1.1 200 OK");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const int64_t during_kib = peak_kib.load();
  attacking = false;
  for (std::thread& t : threads) t.join();
  const int64_t after_kib = RssKib(daemon.pid());

  const double worst_ms = *std::max_element(latencies_ms.begin(), latencies_ms.end());
  std::printf(
      "idle RSS %lld KiB, peak during attack %lld KiB, after %lld KiB; %d body and %d "
      "request-line attacks; %zu status calls, slowest %.1f ms\n",
      static_cast<long long>(idle_kib), static_cast<long long>(during_kib),
      static_cast<long long>(after_kib), body_attacks.load(), line_attacks.load(),
      latencies_ms.size(), worst_ms);
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_GE(body_attacks.load(), 4);
  EXPECT_GE(line_attacks.load(), 4);
  EXPECT_GE(latencies_ms.size(), 20u);
  EXPECT_LE(during_kib - idle_kib, 16 * 1024);
  EXPECT_LE(after_kib - idle_kib, 16 * 1024);
  EXPECT_LT(worst_ms, 100.0);
  EXPECT_EQ(daemon.Stop(), 0);
}

}  // namespace
}  // namespace ql::itest
