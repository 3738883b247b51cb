#pragma once

// Helpers for integration tests: temporary directories, child processes, a real ql-local
// daemon and the ql client, driven exactly as a user would drive them.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ql::itest {

// Returns the directory holding the built executables (build/bin).
std::string BinDir();

// A directory under /tmp removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Makes `dir` (and its parents) a directory every command's uid may write (mode 1777): commands
// run confined, and a test that needs a command to leave a file for it names such a directory
// with --command-writable.
void MakeExchangeDirectory(const std::string& dir);

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `argv` to completion with extra environment entries; captures stdout and stderr.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& extra_env = {},
                         int timeout_ms = 30'000);

// Polls `condition` every 50 ms until it holds or `timeout` passes; returns whether it held.
bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

// A ql-local daemon on a temporary data directory and a free port.
class LocalDaemon {
 public:
  LocalDaemon(std::string data_dir, std::string profile = "standalone");
  ~LocalDaemon();
  // Starts the daemon and waits until /readyz answers 200. Returns false on failure.
  bool Start(const std::vector<std::string>& extra_args = {});
  // The CA that signed the daemon's TLS certificate, for its readiness check (https).
  void set_ca_file(std::string ca_file) { ca_file_ = std::move(ca_file); }
  // Sends the daemon's stderr (its daemon log) to a file of its own (`daemon.err` beside the
  // data directory) instead of daemon.log, so that it can be read apart from the banner.
  void set_separate_stderr(bool separate) { separate_stderr_ = separate; }
  void Kill();           // SIGKILL, then reap
  int Stop();            // SIGTERM, wait, return exit status
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& server() const { return server_; }
  const std::string& data_dir() const { return data_dir_; }
  std::string log() const;  // the daemon's own stdout/stderr so far
  std::string err() const;  // its stderr so far, with set_separate_stderr
  // Runs `ql` against this daemon (finds server and token through --data).
  CommandResult Ql(std::vector<std::string> args) const;

 private:
  std::string data_dir_;
  std::string profile_;
  pid_t pid_ = -1;
  std::string server_;
  std::string ca_file_;
  bool separate_stderr_ = false;
};

// The forms a leaked secret value could take in a file, a row or an answer: the value itself,
// its lowercase hex, and its base64 and base64url text at each of the three alignments it can
// have inside a longer encoded string (only the characters that depend on the value alone).
std::vector<std::string> LeakForms(const std::string& value);

// Returns the first of LeakForms(value) found in `text`, or an empty string.
std::string FindLeak(const std::string& text, const std::string& value);

// Returns the HTTP status of GET url (0 when unreachable).
int HttpGetStatus(const std::string& url, const std::string& ca_file = "");

// Sends one HTTP/1.1 request to 127.0.0.1:`port` as a slow client does: the head, then a pause
// of `pause_ms`, then `body` (JSON), with `token` as bearer token when not empty. Returns the
// answer's HTTP status (0 when there is none within 15 s).
int SlowBodyRequest(int port, const std::string& method, const std::string& path,
                    const std::string& body, const std::string& token, int pause_ms);

// `s` without its trailing line feeds and spaces (a command's output, for comparing).
std::string Trim(std::string s);

// A whole file's bytes ("" when it cannot be read).
std::string ReadFile(const std::string& path);

// Runs one SQL query against a SQLite database file and returns the rows, columns joined by '|'.
std::vector<std::string> SqliteQuery(const std::string& db_path, const std::string& sql);

}  // namespace ql::itest
