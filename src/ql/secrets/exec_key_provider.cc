#include "ql/secrets/exec_key_provider.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "ql/core/canonical_json.h"

extern char** environ;

namespace ql::secrets {
namespace {

constexpr std::string_view kProtocol = "qinglong-key-provider/v1";
constexpr int64_t kMaxTimeoutMs = 600'000;
// Requests are far below this, so one write into an empty pipe always takes all of it.
constexpr size_t kMaxRequestBytes = 4096;
constexpr size_t kMaxStderrKept = 4096;
// How often the helper's exit is checked once it has closed its output.
constexpr int64_t kExitPollMs = 2;

// What one helper run produced.
struct HelperRun {
  bool exited = false;
  int status = 0;  // exit status when exited, else the signal
  std::string out;
  bool out_overflow = false;
  std::string err;
};

// Closes a descriptor on scope exit.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Close(); }
  int get() const { return fd_; }
  int* out() { return &fd_; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Wipes a string that held key material before it is freed.
void Wipe(std::string& s) {
  if (!s.empty()) sodium_memzero(s.data(), s.size());
  s.clear();
}

std::string Base64(std::string_view bytes) {
  std::string out(sodium_base64_encoded_len(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                    bytes.size(), sodium_base64_VARIANT_ORIGINAL);
  out.pop_back();  // the terminating NUL written by libsodium
  return out;
}

// Decodes standard padded base64 into at most `max_bytes` bytes; nullopt when it is not exactly
// that (other characters, missing padding, or too long).
std::optional<SecretBytes> FromBase64(const std::string& text, size_t max_bytes) {
  SecretBytes buffer(max_bytes);
  size_t length = 0;
  const char* end = nullptr;
  if (sodium_base642bin(buffer.data(), buffer.size(), text.data(), text.size(), nullptr, &length,
                        &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
      end != text.data() + text.size()) {
    return std::nullopt;
  }
  return SecretBytes::CopyOf(buffer.view().substr(0, length));
}

class HelperRunner {
 public:
  HelperRunner(const ExecKeyProviderOptions& options, Clock& clock)
      : options_(options), clock_(clock) {}

  // Runs the helper with `request` on stdin. Errors: key_provider_timeout, key_provider_failed
  // (cannot start).
  Result<HelperRun> Run(std::string_view request, std::string_view op) {
    op_ = op;
    Fd in_read, in_write, out_read, out_write, err_read, err_write;
    int fds[2];
    for (auto [r, w] : {std::pair{&in_read, &in_write}, std::pair{&out_read, &out_write},
                        std::pair{&err_read, &err_write}}) {
      if (pipe2(fds, O_CLOEXEC) != 0) return Failed("cannot create a pipe: " + Errno(errno));
      *r->out() = fds[0];
      *w->out() = fds[1];
    }
    fcntl(in_write.get(), F_SETFL, O_NONBLOCK);
    if (request.size() > kMaxRequestBytes ||
        write(in_write.get(), request.data(), request.size()) !=
            static_cast<ssize_t>(request.size())) {
      return Failed("cannot hand the request to the helper");
    }
    in_write.Close();

    pid_t pid = -1;
    QL_RETURN_IF_ERROR(Spawn(in_read.get(), out_write.get(), err_write.get(), pid));
    in_read.Close();
    out_write.Close();
    err_write.Close();

    const int64_t deadline = clock_.MonotonicMs() + options_.timeout_ms;
    HelperRun run;
    if (!ReadUntilClosed(out_read.get(), err_read.get(), deadline, run) ||
        !WaitForExit(pid, deadline, run)) {
      kill(-pid, SIGKILL);
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      Wipe(run.out);
      return Unavailable("key_provider_timeout", Name() + " did not answer within " +
                                                     std::to_string(options_.timeout_ms) +
                                                     " ms; it was killed");
    }
    return run;
  }

  std::string Name() const {
    return "key provider helper " + QuoteForMessage(options_.command[0], 128) + " (" +
           std::string(op_) + ")";
  }

  Status Failed(std::string why) const {
    return Unavailable("key_provider_failed", Name() + " failed: " + std::move(why));
  }

 private:
  static std::string Errno(int err) { return std::strerror(err); }

  Status Spawn(int in, int out, int err, pid_t& pid) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_adddup2(&actions, in, 0);
    posix_spawn_file_actions_adddup2(&actions, out, 1);
    posix_spawn_file_actions_adddup2(&actions, err, 2);
    // Its own process group, so a timeout kills whatever the helper started; default signal
    // dispositions and an empty mask, whatever this process ignores or blocks.
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    std::vector<char*> argv;
    for (const std::string& a : options_.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int rc = posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) return Failed("cannot start it: " + Errno(rc));
    return Status::Ok();
  }

  // Reads stdout and stderr until both are closed; false when the deadline passes first.
  bool ReadUntilClosed(int out, int err, int64_t deadline, HelperRun& run) {
    fcntl(out, F_SETFL, O_NONBLOCK);
    fcntl(err, F_SETFL, O_NONBLOCK);
    bool out_open = true, err_open = true;
    char buffer[4096];
    while (out_open || err_open) {
      const int64_t left = deadline - clock_.MonotonicMs();
      if (left <= 0) return false;
      pollfd fds[2] = {{out_open ? out : -1, POLLIN, 0}, {err_open ? err : -1, POLLIN, 0}};
      if (poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 60'000))) < 0 && errno != EINTR) {
        return false;
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {
          (i == 0 ? out_open : err_open) = false;
          continue;
        }
        std::string& sink = i == 0 ? run.out : run.err;
        size_t limit = i == 0 ? kMaxKeyProviderReplyBytes : kMaxStderrKept;
        size_t keep = std::min(static_cast<size_t>(n), limit - std::min(limit, sink.size()));
        sink.append(buffer, keep);
        if (i == 0 && keep < static_cast<size_t>(n)) run.out_overflow = true;
      }
    }
    sodium_memzero(buffer, sizeof(buffer));
    return true;
  }

  // Reaps the helper; false when it is still running at the deadline.
  bool WaitForExit(pid_t pid, int64_t deadline, HelperRun& run) {
    while (true) {
      int status = 0;
      pid_t got = waitpid(pid, &status, WNOHANG);
      if (got == pid) {
        run.exited = WIFEXITED(status);
        run.status = run.exited ? WEXITSTATUS(status) : WTERMSIG(status);
        return true;
      }
      if (got < 0 && errno != EINTR) {
        // Someone else reaped it (a process reaping every child): the outcome is unknown.
        run.exited = true;
        run.status = -1;
        return true;
      }
      const int64_t left = deadline - clock_.MonotonicMs();
      if (left <= 0) return false;
      poll(nullptr, 0, static_cast<int>(std::min(left, kExitPollMs)));
    }
  }

  const ExecKeyProviderOptions& options_;
  Clock& clock_;
  std::string_view op_;
};

// Returns the string field `field` of the helper's JSON reply, wiping the reply text.
Result<std::string> ReplyField(HelperRunner& runner, HelperRun& run, const char* field) {
  auto protocol = [&](std::string why) {
    return Corrupt("key_provider_protocol", runner.Name() + " " + why);
  };
  if (!run.exited || run.status != 0) {
    std::string stderr_text = QuoteForMessage(run.err, kMaxKeyProviderStderrQuoted);
    Wipe(run.out);
    if (!run.exited) {
      const char* name = sigdescr_np(run.status);
      return runner.Failed("killed by signal " + std::to_string(run.status) +
                           (name != nullptr ? " (" + std::string(name) + ")" : "") +
                           "; stderr: " + stderr_text);
    }
    return runner.Failed(run.status < 0 ? "its exit status was lost"
                                        : "exited with status " + std::to_string(run.status) +
                                              "; stderr: " + stderr_text);
  }
  if (run.out_overflow) {
    Wipe(run.out);
    return protocol("answered with more than " + std::to_string(kMaxKeyProviderReplyBytes) +
                    " bytes");
  }
  Result<nlohmann::json> reply = ParseJsonStrict(run.out);
  Wipe(run.out);
  if (!reply.ok() || !reply->is_object()) {
    return protocol("did not answer with one JSON object on stdout");
  }
  auto it = reply->find(field);
  if (it == reply->end() || !it->is_string()) {
    return protocol(std::string("answered without the string field ") + field);
  }
  std::string value = std::move(it->get_ref<std::string&>());
  return value;
}

std::string Request(std::string_view op, const std::string& key_id, std::string_view field,
                    std::string_view base64) {
  std::string request = "{\"protocol\":\"" + std::string(kProtocol) + "\",\"op\":\"" +
                        std::string(op) + "\",\"key_id\":" + nlohmann::json(key_id).dump() + ",\"" +
                        std::string(field) + "\":\"";
  request += base64;
  request += "\"}\n";
  return request;
}

}  // namespace

Result<std::unique_ptr<ExecKeyProvider>> ExecKeyProvider::Create(ExecKeyProviderOptions options,
                                                                 Clock& clock) {
  auto bad = [](std::string why) {
    return InvalidArgument("key_provider_bad_config", "exec key provider: " + std::move(why));
  };
  if (options.command.empty() || options.command[0].empty()) return bad("the command is empty");
  for (const std::string& arg : options.command) {
    if (arg.find('\0') != std::string::npos) return bad("a command argument holds a NUL byte");
  }
  if (options.timeout_ms < 1 || options.timeout_ms > kMaxTimeoutMs) {
    return bad("the timeout must be 1.." + std::to_string(kMaxTimeoutMs) + " ms, got " +
               std::to_string(options.timeout_ms));
  }
  QL_RETURN_IF_ERROR(ValidateKeyId(options.key_id));
  return std::unique_ptr<ExecKeyProvider>(new ExecKeyProvider(std::move(options), clock));
}

Result<WrappedKey> ExecKeyProvider::Wrap(const SecretBytes& data_key) {
  if (data_key.size() != kDataKeyBytes) {
    return InvalidArgument("secret_bad_key", "a data key is " + std::to_string(kDataKeyBytes) +
                                                 " bytes, got " + std::to_string(data_key.size()));
  }
  HelperRunner runner(options_, clock_);
  std::string plaintext_b64 = Base64(data_key.view());
  std::string request = Request("wrap", options_.key_id, "plaintext_b64", plaintext_b64);
  Wipe(plaintext_b64);
  Result<HelperRun> run = runner.Run(request, "wrap");
  Wipe(request);
  if (!run.ok()) return run.status();
  QL_ASSIGN_OR_RETURN(std::string ciphertext_b64, ReplyField(runner, *run, "ciphertext_b64"));
  std::optional<SecretBytes> ciphertext = FromBase64(ciphertext_b64, kMaxWrappedKeyBytes);
  if (!ciphertext.has_value() || ciphertext->empty()) {
    return Corrupt("key_provider_protocol",
                   runner.Name() + " answered a ciphertext_b64 that is not base64 of 1.." +
                       std::to_string(kMaxWrappedKeyBytes) + " bytes");
  }
  return WrappedKey{options_.key_id, std::string(ciphertext->view())};
}

Result<SecretBytes> ExecKeyProvider::Unwrap(const WrappedKey& wrapped) {
  HelperRunner runner(options_, clock_);
  std::string request =
      Request("unwrap", wrapped.key_id, "ciphertext_b64", Base64(wrapped.ciphertext));
  Result<HelperRun> run = runner.Run(request, "unwrap");
  if (!run.ok()) return run.status();
  QL_ASSIGN_OR_RETURN(std::string plaintext_b64, ReplyField(runner, *run, "plaintext_b64"));
  // One byte of room beyond a data key tells "too long" apart from "exactly right".
  std::optional<SecretBytes> plaintext = FromBase64(plaintext_b64, kDataKeyBytes + 1);
  Wipe(plaintext_b64);
  if (!plaintext.has_value() || plaintext->size() != kDataKeyBytes) {
    return Corrupt("key_provider_protocol",
                   runner.Name() + " answered a plaintext_b64 that is not base64 of a " +
                       std::to_string(kDataKeyBytes) + "-byte data key");
  }
  return std::move(*plaintext);
}

}  // namespace ql::secrets
