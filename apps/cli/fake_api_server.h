#pragma once

// A scripted HTTP server on loopback for the command tests: register handlers on http(), point
// a command at url(), and read back what it was sent.

#include <httplib.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ql::cli {

class FakeServer {
 public:
  FakeServer() {
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  httplib::Server& http() { return server_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Records the request target (path + query) of every request, in order.
  void Record(const httplib::Request& req) {
    std::lock_guard lock(mu_);
    std::string target = req.path;
    if (!req.params.empty()) {
      target += "?";
      bool first = true;
      for (const auto& [key, value] : req.params) {
        target += (first ? "" : "&") + key + "=" + value;
        first = false;
      }
    }
    requests_.push_back(req.method + " " + target);
    bodies_.push_back(req.body);
  }
  std::vector<std::string> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  std::vector<std::string> bodies() {
    std::lock_guard lock(mu_);
    return bodies_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> requests_;
  std::vector<std::string> bodies_;
};

}  // namespace ql::cli
