#pragma once

// `ql run list|show|log|cancel|start|retry`: runs over the HTTP API (/api/v1/runs).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "client.h"

namespace ql::cli {

struct RunListArgs {
  std::optional<std::string> task_id;     // --task
  std::optional<std::string> trigger_id;  // --trigger
  std::optional<std::string> status;      // --status
  std::optional<std::string> since;       // --since: RFC 3339 time or a duration back from now
  std::optional<std::string> until;       // --until: the same
  int64_t limit = 50;                     // --limit
  std::string cursor;                     // --cursor: a next_cursor printed before
};

struct RunLogArgs {
  std::string run_id;
  int64_t attempt = 0;  // --attempt N; 0 = the latest attempt
  bool follow = false;  // --follow
  // --tail N: print only the last N lines (then follow from there with --follow); checked by
  // RunLog, which refuses anything but a positive integer.
  std::optional<std::string> tail;
  // Pause between polls while following without a stream (run not started yet, or the server's
  // follow streams are all taken).
  int64_t poll_ms = 500;
  // How long a follow stream may stay silent before it is reopened from the offset reached (a
  // quiet command is normal; a reopened stream loses nothing).
  int follow_read_timeout_s = 30;
};

struct RunStartArgs {
  std::string task_id;
  std::optional<std::string> idempotency_key;
  std::optional<int64_t> priority;
  bool wait = false;    // --wait: exit with the run's outcome
  bool follow = false;  // --follow: print its log as it is written, then exit as --wait
  int64_t poll_ms = 500;
};

// The exit status of a run in `status` (a wire name): 0 succeeded, kExitRunFailed,
// kExitRunTimedOut, kExitRunCancelled, kExitRunRecoveryRequired, kExitRunSkipped; nullopt while
// the run may still change.
std::optional<int> RunOutcomeExit(const std::string& status);

// GET /api/v1/runs with the filters, from --cursor (default: the newest run), following
// next_cursor until `limit` runs are collected. Prints a table; with --json the API's page shape
// {"items": [...], "next_cursor": ...}: the server's run objects (id, task_id, trigger_id,
// status, scheduled_for, exit_code, ...), newest first, and where the listing continues (null
// once it has ended). An unknown
// --status is a usage error (exit 2) naming the valid states.
int RunList(const RunListArgs& args, CommandContext& context);
// GET /api/v1/runs/{id} (with attempts) and every page of /api/v1/runs/{id}/events. Prints the
// run, its attempts and its events; with --json one object: the run plus an `events` array.
int RunShow(const std::string& run_id, CommandContext& context);
// Writes the log of the run's latest attempt (or --attempt N) to the output byte for byte.
// With --follow it keeps streaming until the run ends: across reconnects (the server bounds a
// stream's length), across retries of the run (attempts append to the run's one log file, so
// the output continues where the last attempt ended; the new attempt is noted on stderr), and by
// polling when the server has no follow stream free.
int RunLog(const RunLogArgs& args, CommandContext& context);
// POST /api/v1/runs/{id}/cancel; prints "<id> <status> cancel requested" (--json: the run).
int RunCancel(const std::string& run_id, const std::optional<std::string>& reason,
              CommandContext& context);
// POST /api/v1/runs; prints the new run id (--json: the run). Replaying an idempotency key
// prints the run it created the first time.
int RunStart(const RunStartArgs& args, CommandContext& context);
// POST /api/v1/runs/{id}/retry; prints the new run id (--json: the run).
int RunRetry(const std::string& run_id, CommandContext& context);

// Registers the `run` command group on `app` (and the global options on its root).
void RegisterRunCommands(CLI::App& app);

}  // namespace ql::cli
