#include "worker.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>
#include <utility>

#include "ql/core/artifact.h"
#include "ql/core/ids.h"
#include "ql/core/log_source.h"
#include "ql/core/rfc3339.h"
#include "ql/core/task_spec.h"

namespace fs = std::filesystem;

namespace ql::worker {
namespace {

// A pull proposes at most this many offers.
constexpr int kMaxOffersPerPull = 16;
// The first poll of a started command's outcome; later polls back off to poll_interval_ms.
constexpr int64_t kFirstPollMs = 2;
// How long a just-launched command may take to end before its start is reported on its own.
constexpr int64_t kStartWithEndMs = 10;
// Output shipped per poll of a running command (the rest follows on the next polls).
constexpr int kLogChunksPerPoll = 4;
// Reason of the status a lease call ends with when the lease may have expired meanwhile.
constexpr char kLeaseUnconfirmed[] = "lease_unconfirmed";
// Reason of the status a lease call ends with when the run is being abandoned.
constexpr char kRunAbandoned[] = "run_abandoned";

// Returns true for failures that the same call may get past later: transport failures, 503,
// and server-side faults. Everything else is an answer the worker must act on.
bool IsRetryable(const Status& status) {
  return status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kInternal;
}

bool IsFatal(const Status& status) { return IsUnauthorized(status) || IsSessionLost(status); }

// Waits up to `ms` for the supervisor of `handle` to exit (it records the result first), then
// polls the attempt once.
std::optional<AttemptOutcome> AwaitEnd(AttemptHandle& handle, int64_t ms) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(handle.pid()), 0));
  if (pidfd >= 0) {
    pollfd exited{pidfd, POLLIN, 0};
    while (poll(&exited, 1, static_cast<int>(ms)) < 0 && errno == EINTR) {
    }
    close(pidfd);
  } else if (errno != ESRCH) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));  // no pidfds (Linux < 5.3)
  }
  return handle.Poll();
}

Completion ToCompletion(const AttemptOutcome& outcome) {
  Completion c;
  switch (outcome.kind) {
    case AttemptOutcome::Kind::kExited:
      c.outcome = "exited";
      c.exit_code = outcome.exit_code;
      break;
    case AttemptOutcome::Kind::kSignaled:
      c.outcome = "signaled";
      c.signal = outcome.signal;
      break;
    case AttemptOutcome::Kind::kTimedOut:
      c.outcome = "timed_out";
      break;
    case AttemptOutcome::Kind::kCancelled:
      c.outcome = "cancelled";
      break;
    case AttemptOutcome::Kind::kSpawnFailed:
    case AttemptOutcome::Kind::kLost:
      c.outcome = "spawn_failed";
      break;
  }
  c.message = outcome.message;
  c.confinement = outcome.confinement;
  c.descendants_ended = outcome.descendants_ended;
  c.error_code = outcome.kind == AttemptOutcome::Kind::kExited ||
                         outcome.kind == AttemptOutcome::Kind::kSignaled
                     ? outcome.limit_error_code
                     : outcome.error_code;
  c.log_truncated = outcome.log_truncated;
  return c;
}

std::string Describe(const Completion& c) {
  if (c.outcome == "exited") return "exited with code " + std::to_string(c.exit_code.value_or(0));
  if (c.outcome == "signaled") return "ended by signal " + std::to_string(c.signal.value_or(0));
  if (c.outcome == "spawn_failed") return "could not be started (" + c.message + ")";
  return c.outcome;
}

// Returns up to `max_bytes` of the file at `path` from `offset`; empty at its end or while it
// does not exist yet.
Result<std::string> ReadChunk(const std::string& path, int64_t offset, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::string();
    return Internal("worker_log_io", "cannot open " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size <= offset) {
    ::close(fd);
    return std::string();
  }
  std::string data(max_bytes, '\0');
  size_t filled = 0;
  while (filled < max_bytes) {
    const ssize_t n = ::pread(fd, data.data() + filled, max_bytes - filled,
                              static_cast<off_t>(offset + static_cast<int64_t>(filled)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Internal("worker_log_io", "cannot read " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    filled += static_cast<size_t>(n);
  }
  ::close(fd);
  data.resize(filled);
  return data;
}

// Returns `path` with its symbolic links resolved as far as it exists.
std::string ResolvedPath(const std::string& path) {
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(path, ec);
  return ec ? path : resolved.string();
}

// Whether `argv` is a script command's: the launcher, then an interpreter (execution_plan.h).
bool LaunchesScript(const std::vector<std::string>& argv) {
  return argv.size() >= 2 && argv[0] == kScriptLauncher && IsScriptInterpreter(argv[1]);
}

}  // namespace

// One leased run. The atomics are written under Worker::mu_ (so that waits on cv_ see them) and
// read anywhere; the rest belongs to the run's own thread once it has started.
struct Worker::RunContext {
  LeaseOffer offer;
  LeaseRef lease;
  std::string label;     // "run <id> attempt <n>", for log lines
  std::string log_path;  // the command's output
  int64_t lease_ttl_ms = 0;
  std::atomic<bool> cancel{false};   // a cancel request: stop the command, still report its end
  std::atomic<bool> abandon{false};  // stop the command and report nothing more
  std::atomic<bool> done{false};     // the run's thread has finished its work
  std::thread thread;                // started, joined and owned by the main thread

  int64_t valid_until_ms = 0;  // monotonic; past it the lease may have expired
  int64_t next_renew_ms = 0;
  int64_t renew_backoff_ms = 0;
  bool cancel_sent = false;
  int64_t log_offset = 0;  // bytes the control plane holds
  bool log_stopped = false;
  bool log_truncated_by_control = false;
};

std::string RunRootOf(const std::string& work_dir) { return work_dir + "/run"; }
std::string LogRootOf(const std::string& work_dir) { return work_dir + "/log"; }

int64_t SupervisorLogCap(int64_t own, int64_t offered) {
  if (offered <= 0) return own;
  return std::min(own, std::max<int64_t>(offered - kLogMarkerRoomBytes, 0));
}
std::string WorkRootOf(const std::string& work_dir) { return work_dir + "/work"; }
std::string ScriptsRootOf(const std::string& work_dir) { return work_dir + "/scripts"; }

Worker::Worker(WorkerOptions options, ControlClient& control, AttemptRunner& runner, Clock& clock,
               RandomSource& random)
    : options_(std::move(options)),
      control_(control),
      runner_(runner),
      clock_(clock),
      random_(random),
      // Resolved: the runner binds an attempt's version back at this very path in the sandbox.
      scripts_(ResolvedPath(ScriptsRootOf(options_.work_dir)), options_.script_cache_bytes) {}

Worker::~Worker() {
  // Run() joins every thread it starts before returning; this only covers an early exception.
  for (auto& [id, ctx] : runs_) {
    if (ctx->thread.joinable()) ctx->thread.join();
  }
}

void Worker::Log(const std::string& line) {
  std::lock_guard<std::mutex> lock(log_mu_);
  if (options_.log) {
    options_.log(line);
    return;
  }
  std::cerr << FormatRfc3339Utc(clock_.NowMs()) << " ql-worker: " << line << std::endl;
}

void Worker::WaitMain(int64_t ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ms > 0) cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return wake_; });
  wake_ = false;
}

void Worker::RequestDrain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    drain_requested_ = true;
    wake_ = true;
  }
  cv_.notify_all();
}

void Worker::SetFatal(const Status& status) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fatal_) {
      first = true;
      fatal_ = status;
      for (auto& [id, ctx] : runs_) ctx->abandon = true;
    }
    wake_ = true;
  }
  cv_.notify_all();
  if (first) {
    Log("stopping: the control plane answered " + status.ToString() +
        "; every command is stopped and nothing more is reported");
  }
}

int Worker::FreeSlots() {
  std::lock_guard<std::mutex> lock(mu_);
  return options_.slots - static_cast<int>(runs_.size());
}

void Worker::MarkCancel(const std::vector<std::string>& offer_ids, const char* source) {
  std::vector<std::string> marked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& id : offer_ids) {
      auto it = runs_.find(id);
      if (it == runs_.end() || it->second->cancel) continue;
      it->second->cancel = true;
      marked.push_back(it->second->label);
    }
  }
  if (marked.empty()) return;
  cv_.notify_all();
  for (const std::string& label : marked) {
    Log(label + ": cancel requested (" + source + ")");
  }
}

Status Worker::PrepareDirectories() {
  std::error_code ec;
  for (const std::string& dir :
       {options_.work_dir, RunRootOf(options_.work_dir), LogRootOf(options_.work_dir)}) {
    fs::create_directories(dir, ec);
    if (ec) return Internal("worker_dir_io", "cannot create " + dir + ": " + ec.message());
  }
  // Command output may carry secrets.
  fs::permissions(options_.work_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  return Status::Ok();
}

void Worker::StopLeftovers() {
  // An earlier incarnation's leases are fenced by the session registered next, so whatever it
  // left running can never be reported: such commands are stopped, not adopted.
  struct Leftover {
    std::string attempt_id;
    std::unique_ptr<AttemptHandle> handle;
  };
  std::vector<Leftover> running;
  const auto remove = [&](const std::string& attempt_id) {
    std::error_code ec;
    fs::remove_all(RunRootOf(options_.work_dir) + "/" + attempt_id, ec);
    fs::remove(LogRootOf(options_.work_dir) + "/" + attempt_id + ".log", ec);
  };
  std::error_code ec;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(RunRootOf(options_.work_dir), ec)) {
    if (!entry.is_directory(ec)) continue;
    const std::string attempt_id = entry.path().filename().string();
    Result<std::unique_ptr<AttemptHandle>> handle = runner_.Adopt(attempt_id);
    if (!handle.ok()) {
      remove(attempt_id);
      continue;
    }
    if ((*handle)->Poll()) {
      remove(attempt_id);
      continue;
    }
    Log("attempt " + attempt_id + " was left running by an earlier ql-worker; stopping it");
    if (Status st = (*handle)->RequestCancel(); !st.ok()) {
      Log("attempt " + attempt_id + ": cannot stop it: " + st.ToString());
    }
    running.push_back({attempt_id, std::move(handle).value()});
  }
  const int64_t deadline = clock_.MonotonicMs() + options_.stop_wait_ms;
  while (!running.empty() && clock_.MonotonicMs() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::erase_if(running, [&](Leftover& leftover) {
      if (!leftover.handle->Poll()) return false;
      remove(leftover.attempt_id);
      return true;
    });
  }
  for (const Leftover& leftover : running) {
    Log("attempt " + leftover.attempt_id + " is still running after " +
        std::to_string(options_.stop_wait_ms) + " ms; leaving it");
  }
}

Result<std::optional<SessionGrant>> Worker::RegisterSession() {
  int64_t backoff = options_.retry_initial_ms;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (drain_requested_) return std::optional<SessionGrant>();
    }
    RegisterRequest request;
    request.capabilities = options_.capabilities;
    request.max_concurrent_runs = options_.slots;
    request.available_slots = options_.slots;
    request.software_version = options_.software_version;
    request.placement = options_.placement;
    Result<SessionGrant> grant = control_.Register(request);
    if (grant.ok()) return std::optional<SessionGrant>(std::move(grant).value());
    if (!IsRetryable(grant.status())) return grant.status();
    Log("cannot register at " + control_.endpoint().url + ", retrying in " +
        std::to_string(backoff) + " ms: " + grant.status().ToString());
    WaitMain(backoff);
    backoff = std::min(backoff * 2, options_.retry_max_ms);
  }
}

void Worker::HeartbeatLoop() {
  std::string expired_session;  // the session last reported expired, logged once
  while (true) {
    SessionRef session;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(heartbeat_interval_ms_),
                   [&] { return stop_heartbeat_ || fatal_.has_value(); });
      if (stop_heartbeat_ || fatal_) return;
      session = session_;
    }
    int available = std::max(FreeSlots(), 0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (drain_requested_) available = 0;  // a draining worker takes nothing new
    }
    Result<HeartbeatAnswer> answer = control_.Heartbeat(session, available);
    if (!answer.ok()) {
      if (IsFatal(answer.status())) {
        // A heartbeat of a session this worker has replaced meanwhile (an expired or offline
        // one) can arrive after the new registration and be fenced by it: that newer session
        // is our own (or about to be), so only a fence of the current session stops the
        // worker.
        bool replaced = false;
        {
          std::lock_guard<std::mutex> lock(mu_);
          replaced = registering_ || session_.session_id != session.session_id;
        }
        if (replaced) continue;
        SetFatal(answer.status());
        return;
      }
      if (IsSessionExpired(answer.status())) {
        // The main thread replaces the session on its next pull.
        if (expired_session != session.session_id) {
          expired_session = session.session_id;
          Log("heartbeat: " + answer.status().ToString());
        }
        continue;
      }
      Log("heartbeat failed: " + answer.status().ToString());
      continue;
    }
    MarkCancel(answer->cancel, "heartbeat");
    if (!answer->status.empty() && answer->status != "active") {
      bool already = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        already = drain_requested_;
      }
      if (!already) {
        Log("the control plane reports this session " + answer->status + "; draining");
        RequestDrain();
      }
    }
  }
}

int64_t Worker::PullOnce() {
  const int free = FreeSlots();
  if (free <= 0) return options_.pull_interval_ms;
  const size_t wanted = static_cast<size_t>(std::min(free, kMaxOffersPerPull));
  const int64_t now = clock_.MonotonicMs();
  // Pairs already proposed stay as they are until an answer arrives: a retried pull whose
  // answer was lost must not lead to a second lease for the same run.
  while (pending_.size() < wanted) {
    pending_.push_back({{NewUuidV7(clock_.NowMs(), random_), RandomHex(random_, 32)}, now});
  }
  std::vector<OfferProposal> offers;
  for (const Proposal& p : pending_) offers.push_back(p.offer);
  Result<PullAnswer> answer = control_.Pull(session_, free, offers);
  if (!answer.ok()) {
    const Status& st = answer.status();
    if (IsFatal(st)) {
      SetFatal(st);
      return 0;
    }
    if (IsRetryable(st)) {
      pull_backoff_ms_ = pull_backoff_ms_ == 0
                             ? options_.retry_initial_ms
                             : std::min(pull_backoff_ms_ * 2, options_.retry_max_ms);
      Log("pull failed, retrying the same offers in " + std::to_string(pull_backoff_ms_) +
          " ms: " + st.ToString());
      return pull_backoff_ms_;
    }
    pending_.clear();
    pull_backoff_ms_ = 0;
    if (IsSessionExpired(st)) {
      bool awaiting = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        awaiting = awaiting_new_session_;
      }
      if (!awaiting) Log("the control plane gives this session no new leases: " + st.message());
      return RenewSession();
    }
    if (st.reason() == "session_inactive") {
      Log("the control plane gives this session no new leases (" + st.message() + "); draining");
      RequestDrain();
      return 0;
    }
    Log("pull refused: " + st.ToString());
    return options_.pull_interval_ms;
  }
  pull_backoff_ms_ = 0;
  MarkCancel(answer->cancel, "pull");
  size_t started = 0;
  for (const LeaseOffer& offer : answer->offers) {
    auto it = std::find_if(pending_.begin(), pending_.end(),
                           [&](const Proposal& p) { return p.offer.offer_id == offer.offer_id; });
    if (it == pending_.end()) {
      Log("ignoring offer " + offer.offer_id + ": this worker did not propose it");
      continue;
    }
    const Proposal proposal = *it;
    pending_.erase(it);
    if (!IsCanonicalUuid(offer.run_id) || !IsCanonicalUuid(offer.attempt_id)) {
      Log("ignoring offer " + offer.offer_id + ": its run or attempt id is not a UUID");
      continue;
    }
    if (FreeSlots() <= 0) {
      Log("ignoring offer " + offer.offer_id + ": no free slot");
      continue;
    }
    StartRun(offer, proposal);
    ++started;
  }
  pending_.clear();
  // Every proposal granted: more work may be waiting, so ask again at once.
  if (started == offers.size() && FreeSlots() > 0) return 0;
  return options_.pull_interval_ms;
}

int64_t Worker::RenewSession() {
  // A session that merely expired (no heartbeat reached the database for a TTL, e.g. during an
  // outage) is extended by a heartbeat and keeps its runs.
  int available = std::max(FreeSlots(), 0);
  Result<HeartbeatAnswer> beat = control_.Heartbeat(session_, available);
  if (beat.ok()) {
    MarkCancel(beat->cancel, "heartbeat");
    if (beat->status == "active") {
      Log("session " + session_.session_id + " extended by a heartbeat; pulling again");
      return 0;
    }
    Log("the control plane reports this session " + beat->status + "; draining");
    RequestDrain();
    return 0;
  }
  const Status& st = beat.status();
  if (IsFatal(st)) {
    SetFatal(st);
    return 0;
  }
  if (!IsSessionExpired(st)) {
    Log("cannot extend the session, retrying: " + st.ToString());
    return options_.pull_interval_ms;
  }
  // Offline: a new session replaces it once the runs leased under it have ended (they can still
  // be renewed and reported; registering would fence them).
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!runs_.empty()) {
      if (!awaiting_new_session_) {
        Log("session " + session_.session_id + " is offline; registering a new session once " +
            std::to_string(runs_.size()) + " run(s) leased under it have ended");
      }
      awaiting_new_session_ = true;
      return options_.pull_interval_ms;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    registering_ = true;
  }
  Result<std::optional<SessionGrant>> grant = RegisterSession();
  const std::string replaced = session_.session_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (grant.ok() && grant->has_value()) {
      session_ = SessionRef{(*grant)->session_id, (*grant)->generation};
      awaiting_new_session_ = false;
    }
    registering_ = false;
  }
  if (!grant.ok()) {
    SetFatal(grant.status());
    return 0;
  }
  if (!grant->has_value()) return 0;  // a drain was requested meanwhile
  Log("registered session " + session_.session_id + " generation " +
      std::to_string(session_.generation) + " in place of offline session " + replaced);
  return 0;
}

void Worker::StartRun(const LeaseOffer& offer, const Proposal& proposal) {
  auto ctx = std::make_shared<RunContext>();
  ctx->offer = offer;
  ctx->lease = LeaseRef{session_, offer.offer_id, proposal.offer.lease_token};
  ctx->label = "run " + offer.run_id + " attempt " + std::to_string(offer.attempt);
  ctx->log_path = LogRootOf(options_.work_dir) + "/" + offer.attempt_id + ".log";
  ctx->lease_ttl_ms = offer.lease_ttl_ms > 0 ? offer.lease_ttl_ms : session_lease_ttl_ms_;
  // The lease may have been granted by an earlier pull of the same proposal whose answer was
  // lost, so its validity is counted from the first time the pair was proposed.
  ctx->valid_until_ms = proposal.first_proposed_ms + ctx->lease_ttl_ms;
  ctx->next_renew_ms = proposal.first_proposed_ms + std::max<int64_t>(ctx->lease_ttl_ms / 3, 1);
  ctx->renew_backoff_ms = options_.retry_initial_ms;
  Log(ctx->label + ": leased (attempt " + offer.attempt_id + ", offer " + offer.offer_id + ")");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fatal_) ctx->abandon = true;
    runs_[offer.offer_id] = ctx;
  }
  RunContext* raw = ctx.get();
  ctx->thread = std::thread([this, raw] {
    RunAttempt(*raw);
    {
      std::lock_guard<std::mutex> lock(mu_);
      raw->done = true;
      wake_ = true;
    }
    cv_.notify_all();
  });
}

void Worker::ReapFinishedRuns() {
  std::vector<std::shared_ptr<RunContext>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = runs_.begin(); it != runs_.end();) {
      if (it->second->done) {
        finished.push_back(it->second);
        it = runs_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& ctx : finished) ctx->thread.join();
}

void Worker::SleepRun(RunContext& ctx, int64_t ms, bool wake_on_cancel) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] {
    return ctx.abandon.load() || (wake_on_cancel && ctx.cancel.load() && !ctx.cancel_sent);
  });
}

Status Worker::CallLease(RunContext& ctx, const char* step, const std::function<Status()>& call) {
  int64_t backoff = options_.retry_initial_ms;
  while (true) {
    Status st = call();
    if (st.ok()) return st;
    if (IsFatal(st)) {
      SetFatal(st);
      return st;
    }
    if (IsLeaseLost(st) || !IsRetryable(st)) return st;
    if (ctx.abandon) return Conflict(kRunAbandoned, "the worker is stopping every command");
    if (clock_.MonotonicMs() + backoff >= ctx.valid_until_ms) {
      return Conflict(kLeaseUnconfirmed, std::string("gave up on ") + step +
                                             ": the lease may have expired meanwhile; last "
                                             "error: " +
                                             st.ToString());
    }
    Log(ctx.label + ": " + step + " failed, retrying in " + std::to_string(backoff) +
        " ms: " + st.ToString());
    SleepRun(ctx, backoff, /*wake_on_cancel=*/false);
    backoff = std::min(backoff * 2, options_.retry_max_ms);
  }
}

bool Worker::RenewIfDue(RunContext& ctx) {
  const int64_t sent = clock_.MonotonicMs();
  if (sent >= ctx.next_renew_ms) {
    Result<RenewAnswer> answer = control_.Renew(ctx.lease);
    if (answer.ok()) {
      ctx.valid_until_ms = sent + ctx.lease_ttl_ms;
      ctx.next_renew_ms = sent + std::max<int64_t>(ctx.lease_ttl_ms / 3, 1);
      ctx.renew_backoff_ms = options_.retry_initial_ms;
      if (answer->cancel_requested && !ctx.cancel) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          ctx.cancel = true;
        }
        Log(ctx.label + ": cancel requested (renew)");
      }
      return true;
    }
    const Status& st = answer.status();
    if (IsFatal(st)) {
      SetFatal(st);
      return false;
    }
    if (IsLeaseLost(st) || !IsRetryable(st)) {
      Log(ctx.label + ": the lease is lost: " + st.ToString());
      return false;
    }
    Log(ctx.label + ": renew failed, retrying in " + std::to_string(ctx.renew_backoff_ms) +
        " ms: " + st.ToString());
    ctx.next_renew_ms = clock_.MonotonicMs() + ctx.renew_backoff_ms;
    ctx.renew_backoff_ms = std::min(ctx.renew_backoff_ms * 2, options_.retry_max_ms);
  }
  if (clock_.MonotonicMs() >= ctx.valid_until_ms) {
    Log(ctx.label + ": the lease could not be renewed before it may have expired");
    return false;
  }
  return true;
}

bool Worker::ShipLog(RunContext& ctx, bool to_end) {
  for (int chunks = 0; !ctx.log_stopped && (to_end || chunks < kLogChunksPerPoll); ++chunks) {
    Result<std::string> data = ReadChunk(ctx.log_path, ctx.log_offset, kMaxLogChunkBytes);
    if (!data.ok()) {
      Log(ctx.label + ": output no longer shipped: " + data.status().ToString());
      ctx.log_stopped = true;
      return true;
    }
    if (data->empty()) return true;
    std::optional<LogAnswer> shipped;
    const auto call = [&]() -> Status {
      Result<LogAnswer> answer = control_.Log(ctx.lease, ctx.log_offset, *data);
      if (answer.ok()) shipped = *answer;
      return answer.status();
    };
    const Status st = to_end ? CallLease(ctx, "log", call) : call();
    if (!st.ok()) {
      if (IsFatal(st)) {
        SetFatal(st);
        return false;
      }
      if (IsLeaseLost(st) || st.reason() == kLeaseUnconfirmed || st.reason() == kRunAbandoned) {
        Log(ctx.label + ": the lease is lost: " + st.ToString());
        return false;
      }
      // The next poll tries again from the same offset.
      if (IsRetryable(st)) return true;
      Log(ctx.label + ": output no longer shipped: " + st.ToString());
      ctx.log_stopped = true;
      return true;
    }
    if (shipped->truncated) {
      ctx.log_truncated_by_control = true;
      ctx.log_stopped = true;
      Log(ctx.label + ": the control plane keeps no more output of this attempt");
      return true;
    }
    if (shipped->next_offset <= ctx.log_offset) {
      Log(ctx.label + ": output no longer shipped: the control plane accepted none of it at " +
          "offset " + std::to_string(ctx.log_offset));
      ctx.log_stopped = true;
      return true;
    }
    ctx.log_offset = shipped->next_offset;
  }
  return true;
}

bool Worker::PrepareScript(RunContext& ctx, AttemptLaunch& launch) {
  const std::optional<ScriptPin>& pin = ctx.offer.plan.script;
  const auto refuse = [&](const std::string& code, const std::string& message) {
    Log(ctx.label + ": not started: " + code + ": " + message);
    AttemptOutcome failed;
    failed.kind = AttemptOutcome::Kind::kSpawnFailed;
    failed.error_code = code;
    failed.message = message;
    Report(ctx, failed);
    return false;
  };
  // A plan without a script is an argv or shell command and runs as it stands, whatever it
  // starts with (`/usr/bin/env bash -c ...` is an ordinary argv task): only a control plane that
  // knows scripts makes script plans, and it always names the pin.
  if (!pin) return true;
  const std::string named =
      "script " + pin->name + "@" + std::to_string(pin->version) + " (" + pin->digest + ")";
  if (!LaunchesScript(launch.argv) || (pin->kind != "file" && pin->kind != "tree") ||
      !IsSha256Hex(pin->digest) || !ValidateArtifactPath(pin->entry).ok()) {
    return refuse("script_plan_invalid", "the plan's " + named + " is not a script command's pin");
  }
  std::string dir;
  const Status fetched = CallLease(ctx, "fetch", [&]() -> Status {
    Result<std::string> materialized = scripts_.Materialize(
        *pin, [&](const std::string& digest, const std::function<Status(std::string_view)>& sink) {
          const int64_t sent = clock_.MonotonicMs();
          Status st = control_.FetchBlob(ctx.lease, digest, sink);
          // Every blob the control plane answers was fenced and renewed like a `renew`.
          if (st.ok()) ctx.valid_until_ms = std::max(ctx.valid_until_ms, sent + ctx.lease_ttl_ms);
          return st;
        });
    if (materialized.ok()) dir = *materialized;
    return materialized.status();
  });
  if (!fetched.ok()) {
    if (IsFatal(fetched)) return false;  // recorded; every run stops without reports
    if (IsLeaseLost(fetched) || fetched.reason() == kRunAbandoned) {
      Log(ctx.label + ": not started: " + fetched.ToString());
      RemoveFiles(ctx);
      return false;
    }
    // Retried as long as the lease could be valid (every blob the control plane answered renewed
    // it), and still failing: the end is reported while the lease may hold.
    return refuse(
        fetched.code() == StatusCode::kCorrupt ? "artifact_corrupt" : "artifact_unavailable",
        named + ": " + fetched.message());
  }
  if (ctx.abandon) return false;
  launch.script_directory = dir;
  launch.argv.insert(launch.argv.begin() + 2, dir + "/" + pin->entry);
  return true;
}

void Worker::StopCommand(RunContext& ctx, AttemptHandle& handle) {
  if (Status st = handle.RequestCancel(); !st.ok()) {
    Log(ctx.label + ": cannot stop the command: " + st.ToString());
  }
  const int64_t deadline = clock_.MonotonicMs() + options_.stop_wait_ms;
  while (clock_.MonotonicMs() < deadline) {
    if (handle.Poll()) {
      Log(ctx.label + ": command stopped; nothing more is reported");
      RemoveFiles(ctx);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(
        std::min<int64_t>(100, std::max<int64_t>(options_.poll_interval_ms, 1))));
  }
  Log(ctx.label + ": the command is still running after " + std::to_string(options_.stop_wait_ms) +
      " ms; leaving it");
}

void Worker::RemoveFiles(RunContext& ctx) {
  std::error_code ec;
  fs::remove_all(RunRootOf(options_.work_dir) + "/" + ctx.offer.attempt_id, ec);
  fs::remove(ctx.log_path, ec);
}

void Worker::Report(RunContext& ctx, const AttemptOutcome& outcome,
                    std::optional<int64_t> started_pid) {
  Completion completion = ToCompletion(outcome);
  completion.pid = started_pid;
  completion.log_truncated = completion.log_truncated || ctx.log_truncated_by_control;
  std::optional<CompleteAnswer> recorded;
  const Status st = CallLease(ctx, "complete", [&]() -> Status {
    Result<CompleteAnswer> answer = control_.Complete(ctx.lease, completion);
    if (answer.ok()) recorded = *answer;
    return answer.status();
  });
  if (st.ok()) {
    Log(ctx.label + ": " + Describe(completion) + "; run " + recorded->run_status);
  } else {
    Log(ctx.label + ": " + Describe(completion) + "; not reported: " + st.ToString());
  }
  RemoveFiles(ctx);
}

void Worker::RunAttempt(RunContext& ctx) {
  const LeaseOffer& offer = ctx.offer;
  if (Status st = CallLease(ctx, "starting", [&] { return control_.Starting(ctx.lease).status(); });
      !st.ok()) {
    Log(ctx.label + ": not started: " + st.ToString());
    return;
  }
  if (ctx.abandon) return;

  AttemptLaunch launch;
  launch.run_id = offer.run_id;
  launch.attempt_id = offer.attempt_id;
  launch.project_id = offer.project_id;
  launch.task_id = offer.task_id;
  launch.argv = offer.plan.argv;
  for (const auto& [name, value] : offer.plan.environment) {
    if (name == "QL_RUN_ID" || name == "QL_ATTEMPT_ID") continue;
    launch.environment.emplace_back(name, value);
  }
  launch.environment.emplace_back("QL_RUN_ID", offer.run_id);
  launch.environment.emplace_back("QL_ATTEMPT_ID", offer.attempt_id);
  launch.working_directory = offer.plan.working_directory;
  launch.timeout_ms = offer.plan.timeout_ms;
  launch.limits = offer.plan.limits;
  launch.network = offer.plan.network;
  launch.unconfined = offer.plan.unconfined;
  launch.log_path = ctx.log_path;
  launch.log_cap_bytes = SupervisorLogCap(options_.log_cap_bytes, offer.log_cap_bytes);
  if (!PrepareScript(ctx, launch)) return;
  // The only place a secret value exists on this side: opened here, handed to the supervisor
  // through a memory file, masked in the log.
  if (Status opened = OpenSecrets(options_.sealer, offer.secrets, launch); !opened.ok()) {
    Log(ctx.label + ": not started: " + opened.ToString());
    AttemptOutcome failed;
    failed.kind = AttemptOutcome::Kind::kSpawnFailed;
    failed.error_code = opened.reason();
    failed.message = opened.message();
    Report(ctx, failed);
    return;
  }
  Result<std::unique_ptr<AttemptHandle>> launched = runner_.Launch(launch);
  if (!launched.ok()) {
    AttemptOutcome failed;
    failed.kind = AttemptOutcome::Kind::kSpawnFailed;
    failed.message = launched.status().message();
    if (launched.status().reason() == "confinement_unavailable") {
      failed.error_code = "confinement_unavailable";
    }
    Report(ctx, failed);
    return;
  }
  AttemptHandle& handle = **launched;

  // A short command often ends before its start could be reported: it is given a moment, and
  // then its start and its end go in one `complete` call.
  std::optional<AttemptOutcome> outcome = handle.Poll();
  if (!outcome) outcome = AwaitEnd(handle, kStartWithEndMs);
  std::optional<int64_t> started_pid;
  if (outcome && outcome->kind != AttemptOutcome::Kind::kSpawnFailed &&
      outcome->kind != AttemptOutcome::Kind::kLost) {
    started_pid = handle.pid();
    Log(ctx.label + ": ran (pid " + std::to_string(handle.pid()) + ")");
  }
  // A command that could not be started never ran: it goes straight to `complete`.
  if (!outcome) {
    if (Status st = CallLease(ctx, "running",
                              [&] { return control_.Running(ctx.lease, handle.pid()).status(); });
        !st.ok()) {
      Log(ctx.label + ": cannot report it running: " + st.ToString());
      StopCommand(ctx, handle);
      return;
    }
    Log(ctx.label + ": running (pid " + std::to_string(handle.pid()) + ")");
    // Polled soon after the start, then less and less often up to poll_interval_ms: a short
    // command's slot is free again within milliseconds of its end.
    int64_t poll_wait_ms = std::min(kFirstPollMs, options_.poll_interval_ms);
    while (true) {
      if (ctx.abandon) {
        StopCommand(ctx, handle);
        return;
      }
      if (ctx.cancel && !ctx.cancel_sent) {
        ctx.cancel_sent = true;
        if (Status st = handle.RequestCancel(); !st.ok()) {
          Log(ctx.label + ": cannot cancel the command: " + st.ToString());
        }
      }
      outcome = handle.Poll();
      if (!RenewIfDue(ctx) || !ShipLog(ctx, /*to_end=*/false)) {
        StopCommand(ctx, handle);
        return;
      }
      if (outcome) break;
      SleepRun(ctx, poll_wait_ms, /*wake_on_cancel=*/true);
      poll_wait_ms = std::min(poll_wait_ms * 2, options_.poll_interval_ms);
    }
  }
  if (outcome->kind == AttemptOutcome::Kind::kLost) {
    Log(ctx.label + ": " + outcome->message + "; not reported");
    return;
  }
  if (!ShipLog(ctx, /*to_end=*/true)) {
    Log(ctx.label + ": the end is not reported");
    RemoveFiles(ctx);
    return;
  }
  Report(ctx, *outcome, started_pid);
}

Status Worker::Run() {
  QL_RETURN_IF_ERROR(PrepareDirectories());
  StopLeftovers();
  QL_ASSIGN_OR_RETURN(std::optional<SessionGrant> grant, RegisterSession());
  if (!grant) {
    Log("stopped before a session was registered");
    return Status::Ok();
  }
  session_ = SessionRef{grant->session_id, grant->generation};
  session_lease_ttl_ms_ = grant->lease_ttl_ms;
  heartbeat_interval_ms_ = grant->heartbeat_interval_ms;
  Log("registered session " + session_.session_id + " generation " +
      std::to_string(session_.generation) + " at " + control_.endpoint().url + " in pool " +
      (grant->pool.empty() ? "default" : grant->pool) + " (" + std::to_string(options_.slots) +
      " slot(s), heartbeat every " + std::to_string(heartbeat_interval_ms_) + " ms, lease TTL " +
      std::to_string(session_lease_ttl_ms_) + " ms)");
  std::thread heartbeat([this] { HeartbeatLoop(); });

  bool draining = false;
  bool drain_sent = false;
  bool drain_cancelled = false;
  int64_t drain_deadline = 0;
  while (true) {
    ReapFinishedRuns();
    bool drain_requested = false;
    bool fatal = false;
    size_t active = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      drain_requested = drain_requested_;
      fatal = fatal_.has_value();
      active = runs_.size();
    }
    if (fatal) break;
    if (!draining && drain_requested) {
      draining = true;
      drain_deadline = clock_.MonotonicMs() + options_.drain_timeout_ms;
      pending_.clear();
      Log("draining: no new runs; " + std::to_string(active) + " command(s) running");
    }
    if (!draining) {
      WaitMain(PullOnce());
      continue;
    }
    if (!drain_sent) {
      const Status st = control_.Drain(session_);
      if (IsFatal(st)) {
        SetFatal(st);
        continue;
      }
      if (st.ok() || !IsRetryable(st)) {
        drain_sent = true;
        if (!st.ok()) Log("drain refused: " + st.ToString());
      } else {
        Log("drain failed, retrying: " + st.ToString());
      }
    }
    if (active == 0) break;
    const int64_t now = clock_.MonotonicMs();
    if (!drain_cancelled && now >= drain_deadline) {
      drain_cancelled = true;
      std::vector<std::string> offer_ids;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& [id, ctx] : runs_) offer_ids.push_back(id);
      }
      Log("drain timeout: cancelling " + std::to_string(offer_ids.size()) + " command(s)");
      MarkCancel(offer_ids, "drain timeout");
    }
    WaitMain(drain_cancelled ? options_.pull_interval_ms
                             : std::min(options_.pull_interval_ms, drain_deadline - now));
  }

  // Every run thread ends on its own: after its report, or (fatal) after stopping its command.
  std::vector<std::shared_ptr<RunContext>> remaining;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, ctx] : runs_) remaining.push_back(ctx);
    runs_.clear();
  }
  for (auto& ctx : remaining) ctx->thread.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_heartbeat_ = true;
  }
  cv_.notify_all();
  heartbeat.join();

  std::optional<Status> fatal;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fatal = fatal_;
  }
  if (fatal) return *fatal;
  int64_t backoff = options_.retry_initial_ms;
  for (int attempt = 1;; ++attempt) {
    const Status st = control_.Offline(session_);
    if (st.ok()) {
      Log("session " + session_.session_id + " is offline; drained");
      break;
    }
    if (!IsRetryable(st) || attempt == 3) {
      Log("could not set the session offline (it expires on its own): " + st.ToString());
      break;
    }
    WaitMain(backoff);
    backoff = std::min(backoff * 2, options_.retry_max_ms);
  }
  return Status::Ok();
}

}  // namespace ql::worker
