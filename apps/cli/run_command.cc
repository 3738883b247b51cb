#include "run_command.h"

#include <chrono>
#include <memory>
#include <thread>

#include "output.h"
#include "ql/core/clock.h"
#include "ql/core/placement.h"
#include "ql/core/rfc3339.h"
#include "ql/core/states.h"

namespace ql::cli {
namespace {

using nlohmann::json;

constexpr int64_t kEventPage = 500;
constexpr int64_t kLogChunk = int64_t{1} << 20;

std::string RunPath(const std::string& id) { return "/api/v1/runs/" + UrlEncode(id); }

bool IsTerminalRun(const json& run) {
  const std::optional<RunStatus> status = ParseRunStatus(JsonText(run, "status", ""));
  return status.has_value() && IsTerminal(*status);
}

int64_t LatestAttempt(const json& run) {
  int64_t latest = 0;
  if (run.contains("attempts") && run["attempts"].is_array()) {
    for (const json& attempt : run["attempts"]) {
      latest = std::max<int64_t>(latest, attempt.value("attempt", int64_t{0}));
    }
  }
  return latest;
}

int64_t HeaderInt(const HttpResponse& response, std::string_view name, int64_t fallback) {
  const std::string text = response.Header(name);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
      text.size() > 18) {
    return fallback;
  }
  return std::stoll(text);
}

std::string HeaderValue(const std::vector<std::pair<std::string, std::string>>& headers,
                        std::string_view name) {
  HttpResponse response;
  response.headers = headers;
  return response.Header(name);
}

// Where a log read stands.
struct LogCursor {
  int64_t attempt = 0;  // 0 until the server names the attempt it serves
  int64_t offset = 0;
};

std::string LogPath(const std::string& run_id, const LogCursor& cursor, bool follow,
                    int64_t limit = kLogChunk) {
  std::vector<std::pair<std::string, std::string>> query;
  if (cursor.attempt > 0) query.emplace_back("attempt", std::to_string(cursor.attempt));
  if (cursor.offset > 0) query.emplace_back("offset", std::to_string(cursor.offset));
  if (follow) {
    query.emplace_back("follow", "true");
  } else {
    query.emplace_back("limit", std::to_string(limit));
  }
  return WithQuery(RunPath(run_id) + "/log", query);
}

// Returns the lines of --tail, or a usage error unless it is a positive integer.
CliResult<int64_t> ParseTail(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 9 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoll(text) < 1) {
    return CliError::Usage("invalid_tail",
                           "--tail must be a positive integer (lines), got '" + text + "'");
  }
  return std::stoll(text);
}

// Returns the offset in `text` where its last `lines` lines begin, or nullopt when it holds
// fewer (a final line without a newline counts as a line).
std::optional<size_t> LastLinesStart(std::string_view text, int64_t lines) {
  size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;
  int64_t seen = 0;
  for (size_t i = end; i > 0; --i) {
    if (text[i - 1] == '\n' && ++seen == lines) return i;
  }
  return std::nullopt;
}

// Reads the attempt's log from `from` up to `to` (or its end when `to` < 0) into `text`,
// naming the attempt in `cursor` once the server does.
std::optional<CliError> ReadRange(ApiClient& api, const std::string& run_id, LogCursor& cursor,
                                  int64_t from, int64_t to, std::string& text) {
  LogCursor at = cursor;
  at.offset = from;
  while (to < 0 || at.offset < to) {
    const int64_t limit = to < 0 ? kLogChunk : std::min(kLogChunk, to - at.offset);
    CliResult<HttpResponse> response = api.Send("GET", LogPath(run_id, at, false, limit));
    if (!response.ok()) return response.error();
    if (response->status < 200 || response->status > 299) {
      return ErrorFromResponse(response->status, response->body);
    }
    at.attempt = cursor.attempt = HeaderInt(*response, "X-QL-Attempt", at.attempt);
    text += response->body;
    const int64_t next = HeaderInt(*response, "X-QL-Log-Next-Offset",
                                   at.offset + static_cast<int64_t>(response->body.size()));
    const bool advanced = next > at.offset;
    at.offset = next;
    if (response->Header("X-QL-Log-Eof") != "false" || !advanced) break;
  }
  return std::nullopt;
}

// Prints the last `lines` lines of the attempt's log and leaves `cursor` at the end of what it
// read, so a follow goes on from there. Reads a window from the end of the log (its size is
// the X-QL-Log-Size header), widened until it holds enough lines or the whole log.
std::optional<CliError> PrintTail(ApiClient& api, const std::string& run_id, LogCursor& cursor,
                                  int64_t lines, std::ostream& out) {
  CliResult<HttpResponse> head = api.Send("GET", LogPath(run_id, cursor, false, 1));
  if (!head.ok()) return head.error();
  if (head->status < 200 || head->status > 299) {
    return ErrorFromResponse(head->status, head->body);
  }
  cursor.attempt = HeaderInt(*head, "X-QL-Attempt", cursor.attempt);
  // Without the size header (an older server) the whole log is read.
  const int64_t size = HeaderInt(*head, "X-QL-Log-Size", -1);
  std::string text;
  int64_t start = 0;
  for (int64_t window = 64 * 1024;; window *= 4) {
    start = size < 0 ? 0 : std::max<int64_t>(0, size - window);
    text.clear();
    if (std::optional<CliError> error = ReadRange(api, run_id, cursor, start, size, text)) {
      return error;
    }
    if (start == 0 || LastLinesStart(text, lines).has_value()) break;
  }
  const size_t from = LastLinesStart(text, lines).value_or(0);
  out.write(text.data() + from, static_cast<std::streamsize>(text.size() - from));
  out.flush();
  cursor.offset = start + static_cast<int64_t>(text.size());
  return std::nullopt;
}

// Reads the log from `cursor` to the current end of the file, writing it to `out`.
std::optional<CliError> DrainLog(ApiClient& api, const std::string& run_id, LogCursor& cursor,
                                 std::ostream& out) {
  while (true) {
    CliResult<HttpResponse> response = api.Send("GET", LogPath(run_id, cursor, false));
    if (!response.ok()) return response.error();
    if (response->status < 200 || response->status > 299) {
      return ErrorFromResponse(response->status, response->body);
    }
    cursor.attempt = HeaderInt(*response, "X-QL-Attempt", cursor.attempt);
    out.write(response->body.data(), static_cast<std::streamsize>(response->body.size()));
    out.flush();
    const int64_t next = HeaderInt(*response, "X-QL-Log-Next-Offset",
                                   cursor.offset + static_cast<int64_t>(response->body.size()));
    const bool eof = response->Header("X-QL-Log-Eof") != "false";
    const bool advanced = next > cursor.offset;
    cursor.offset = next;
    if (eof || !advanced) return std::nullopt;
  }
}

void Sleep(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

std::string Summary(const json& run) { return JsonText(run, "id") + " " + JsonText(run, "status"); }

std::string ErrorText(const json& object) {
  const std::string code = JsonText(object, "error_code", "");
  const std::string summary = JsonText(object, "error_summary", "");
  if (code.empty() && summary.empty()) return "-";
  if (summary.empty()) return code;
  return code.empty() ? summary : code + ": " + summary;
}

// Prints how the run ended on stderr and returns its exit status.
int ReportOutcome(const json& run, int code, CommandContext& context) {
  context.err() << "ql: run " << JsonText(run, "id") << " " << JsonText(run, "status");
  if (!JsonText(run, "exit_code", "").empty()) {
    context.err() << " (command exit code " << JsonText(run, "exit_code") << ")";
  }
  if (const std::string error = ErrorText(run); error != "-" && code != kExitOk) {
    context.err() << ": " << error;
  }
  context.err() << "\n";
  context.err().flush();
  return code;
}

// Polls the run until it ends; returns its exit status.
int WaitForRun(ApiClient& api, const std::string& run_id, int64_t poll_ms,
               CommandContext& context) {
  while (true) {
    CliResult<json> run = api.GetJson(RunPath(run_id));
    if (!run.ok()) return context.Fail(run.error());
    if (std::optional<int> code = RunOutcomeExit(JsonText(*run, "status", ""))) {
      return ReportOutcome(*run, *code, context);
    }
    Sleep(poll_ms);
  }
}

// Why a queued run is not taken: "waiting_for_worker: pool P, labels k=v,...: DETAIL" (the
// labels part only when it names some).
std::string WaitingText(const json& waiting) {
  Placement placement;
  placement.pool = JsonText(waiting, "pool", std::string(kDefaultPool));
  const json labels = waiting.value("labels", json::object());
  if (labels.is_object()) {
    for (const auto& [key, value] : labels.items()) {
      placement.labels[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  std::string out =
      JsonText(waiting, "reason", "waiting_for_worker") + ": " + DescribePlacement(placement);
  const std::string detail = JsonText(waiting, "detail", "");
  if (!detail.empty()) out += ": " + detail;
  return out;
}

}  // namespace

std::optional<int> RunOutcomeExit(const std::string& status) {
  const std::optional<RunStatus> parsed = ParseRunStatus(status);
  if (!parsed.has_value()) return std::nullopt;
  switch (*parsed) {
    case RunStatus::kSucceeded:
      return kExitOk;
    case RunStatus::kFailed:
      return kExitRunFailed;
    case RunStatus::kTimedOut:
      return kExitRunTimedOut;
    case RunStatus::kCancelled:
      return kExitRunCancelled;
    case RunStatus::kRecoveryRequired:
      return kExitRunRecoveryRequired;
    case RunStatus::kSkipped:
      return kExitRunSkipped;
    default:
      return std::nullopt;
  }
}

int RunList(const RunListArgs& args, CommandContext& context) {
  if (args.limit < 1) {
    return context.Fail(CliError::Usage("invalid_limit", "--limit must be at least 1"));
  }
  if (args.status && !ParseRunStatus(*args.status)) {
    std::string states;
    for (RunStatus state : kAllRunStatuses) {
      if (!states.empty()) states += ", ";
      states += RunStatusName(state);
    }
    return context.Fail(CliError::Usage(
        "invalid_status", "--status '" + *args.status + "' is not a run state (" + states + ")"));
  }
  // --since / --until: an RFC 3339 time, or a duration back from now ("2h", "1d").
  const int64_t now = SystemClock().NowMs();
  std::string bounds[2];
  const std::optional<std::string>* given[2] = {&args.since, &args.until};
  const char* names[2] = {"--since", "--until"};
  for (int i = 0; i < 2; ++i) {
    if (!given[i]->has_value()) continue;
    const std::string& text = **given[i];
    if (ParseRfc3339(text).ok()) {
      bounds[i] = text;
    } else if (std::optional<int64_t> back = ParseDurationMs(text); back.has_value()) {
      bounds[i] = FormatRfc3339Utc(now - *back);
    } else {
      return context.Fail(CliError::Usage(
          "invalid_time", std::string(names[i]) + " '" + text +
                              "' is neither an RFC 3339 time (2026-12-06T08:00:00Z) nor a "
                              "duration back from now (30m, 2h, 1d)"));
    }
  }
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  std::vector<std::pair<std::string, std::string>> query = {
      {"task_id", args.task_id.value_or("")},
      {"trigger_id", args.trigger_id.value_or("")},
      {"status", args.status.value_or("")},
      {"since", bounds[0]},
      {"until", bounds[1]}};
  // A table shows each run by a prefix the server found unique in the project; a server that
  // does not know short_ids is asked again without it (the table then tells the listed runs
  // apart).
  std::vector<std::pair<std::string, std::string>> with_short_ids = query;
  if (!context.json() && !context.wide()) with_short_ids.emplace_back("short_ids", "true");
  CliResult<Listing> runs =
      ListFrom(**api, "/api/v1/runs", with_short_ids, args.limit, args.cursor);
  if (!runs.ok() && runs.error().reason() == "unknown_parameter" &&
      with_short_ids.size() > query.size()) {
    runs = ListFrom(**api, "/api/v1/runs", query, args.limit, args.cursor);
  }
  if (!runs.ok()) return context.Fail(runs.error());
  if (context.json()) {
    context.out() << JsonOutput(runs->ToJson()) << "\n";
    return kExitOk;
  }
  std::vector<std::string> ids;
  std::vector<std::string> unique;
  for (const json& run : runs->items) {
    ids.push_back(JsonText(run, "id"));
    unique.push_back(JsonText(run, "short_id", ""));
  }
  const std::vector<std::string> shown = context.wide() ? ids : ShortIds(ids, unique);
  Table table({"RUN", "TASK", "ORIGIN", "STATUS", "SCHEDULED", "STARTED", "DURATION", "EXIT"});
  for (size_t i = 0; i < runs->items.size(); ++i) {
    const json& run = runs->items[i];
    std::string task = JsonText(run, "task_name", "");
    if (task.empty() || context.wide()) {
      task = task.empty() ? JsonText(run, "task_id") : task + " (" + JsonText(run, "task_id") + ")";
    }
    std::string origin = JsonText(run, "trigger_type");
    if (!JsonText(run, "trigger_name", "").empty()) origin += " " + JsonText(run, "trigger_name");
    table.AddRow({shown[i], task, origin, JsonText(run, "status"), JsonText(run, "scheduled_for"),
                  JsonText(run, "started_at"), JsonElapsed(run, "started_at", "finished_at"),
                  JsonText(run, "exit_code")});
  }
  table.Print(context.out());
  return kExitOk;
}

int RunShow(const std::string& run_id, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> run = (*api)->GetJson(RunPath(run_id));
  if (!run.ok()) return context.Fail(run.error());
  json events = json::array();
  int64_t after = 0;
  while (true) {
    CliResult<json> page = (*api)->GetJson(
        WithQuery(RunPath(run_id) + "/events",
                  {{"after", std::to_string(after)}, {"limit", std::to_string(kEventPage)}}));
    if (!page.ok()) return context.Fail(page.error());
    const json items = page->value("items", json::array());
    for (const json& event : items) events.push_back(event);
    const int64_t next = page->value("next_after", after);
    if (static_cast<int64_t>(items.size()) < kEventPage || next <= after) break;
    after = next;
  }
  if (context.json()) {
    json out = *run;
    out["events"] = std::move(events);
    context.out() << JsonOutput(out) << "\n";
    return kExitOk;
  }
  const json& r = *run;
  Table fields({"FIELD", "VALUE"});
  fields.AddRow({"id", JsonText(r, "id")});
  const std::string task_name = JsonText(r, "task_name", "");
  fields.AddRow(
      {"task", (task_name.empty() ? JsonText(r, "task_id") : task_name) + " revision " +
                   JsonText(r, "task_revision") +
                   (context.wide() && !task_name.empty() ? " (" + JsonText(r, "task_id") + ")"
                                                         : std::string())});
  std::string origin = JsonText(r, "trigger_type");
  if (!JsonText(r, "trigger_id", "").empty()) {
    const std::string trigger_name = JsonText(r, "trigger_name", "");
    origin += " trigger " + (trigger_name.empty() ? JsonText(r, "trigger_id") : trigger_name);
  }
  fields.AddRow({"origin", origin});
  fields.AddRow({"status", JsonText(r, "status")});
  fields.AddRow({"scheduled for", JsonText(r, "scheduled_for")});
  fields.AddRow({"created", JsonText(r, "created_at")});
  fields.AddRow({"started", JsonText(r, "started_at")});
  fields.AddRow({"finished", JsonText(r, "finished_at")});
  fields.AddRow({"duration", JsonElapsed(r, "started_at", "finished_at")});
  fields.AddRow({"exit code", JsonText(r, "exit_code")});
  fields.AddRow({"error", ErrorText(r)});
  if (!JsonText(r, "cancel_requested_at", "").empty()) {
    fields.AddRow({"cancel requested",
                   JsonText(r, "cancel_requested_at") + " (" + JsonText(r, "cancel_reason") + ")"});
  }
  if (!JsonText(r, "retry_of_run_id", "").empty()) {
    fields.AddRow({"retry of", JsonText(r, "retry_of_run_id")});
  }
  if (!JsonText(r, "retry_at", "").empty()) fields.AddRow({"retry at", JsonText(r, "retry_at")});
  fields.AddRow({"priority", JsonText(r, "priority")});
  fields.AddRow({"idempotency key", JsonText(r, "idempotency_key")});
  fields.Print(context.out());
  if (r.contains("waiting") && r["waiting"].is_object()) {
    context.out() << PrintableCell(WaitingText(r["waiting"])) << "\n";
  }

  context.out() << "\n";
  Table attempts({"ATTEMPT", "STATUS", "EXECUTOR", "PID", "STARTED", "DURATION", "EXIT", "ERROR"});
  for (const json& a : r.value("attempts", json::array())) {
    attempts.AddRow({JsonText(a, "attempt"), JsonText(a, "status"), JsonText(a, "executor_type"),
                     JsonText(a, "pid"), JsonText(a, "started_at"),
                     JsonElapsed(a, "started_at", "finished_at"), JsonText(a, "exit_code"),
                     Ellipsize(ErrorText(a), 60)});
  }
  attempts.Print(context.out());

  context.out() << "\n";
  Table table({"SEQ", "TIME", "EVENT", "ACTOR", "DETAIL"});
  for (const json& e : events) {
    const json payload = e.value("payload", json::object());
    const std::string detail = payload.is_object() && payload.empty()
                                   ? ""
                                   : payload.dump(-1, ' ', false, json::error_handler_t::replace);
    table.AddRow({JsonText(e, "sequence"), JsonText(e, "created_at"), JsonText(e, "type"),
                  JsonText(e, "actor_type"), Ellipsize(PrintableCell(detail), 80)});
  }
  table.Print(context.out());
  return kExitOk;
}

int RunLog(const RunLogArgs& args, CommandContext& context) {
  if (args.attempt < 0) {
    return context.Fail(CliError::Usage("invalid_attempt", "--attempt must be 1 or more"));
  }
  std::optional<int64_t> tail;
  if (args.tail.has_value()) {
    CliResult<int64_t> lines = ParseTail(*args.tail);
    if (!lines.ok()) return context.Fail(lines.error());
    tail = *lines;
  }
  CliResult<ApiClient*> api_result = context.Api();
  if (!api_result.ok()) return context.Fail(api_result.error());
  ApiClient& api = **api_result;
  LogCursor cursor;
  cursor.attempt = args.attempt;
  if (tail.has_value()) {
    std::optional<CliError> error = PrintTail(api, args.run_id, cursor, *tail, context.out());
    // A followed run that has no attempt yet has no lines to skip.
    if (error && !(args.follow && error->reason() == "attempt_not_found")) {
      return context.Fail(*error);
    }
    if (!args.follow) return kExitOk;
  }
  if (!args.follow) {
    std::optional<CliError> error = DrainLog(api, args.run_id, cursor, context.out());
    return error ? context.Fail(*error) : kExitOk;
  }

  bool use_stream = true;
  while (true) {
    const LogCursor before = cursor;
    std::optional<CliError> error;
    if (use_stream) {
      CliResult<int> streamed = api.GetStream(
          LogPath(args.run_id, cursor, true),
          [&](const std::vector<std::pair<std::string, std::string>>& headers) {
            const std::string attempt = HeaderValue(headers, "X-QL-Attempt");
            if (!attempt.empty() && attempt.size() < 10 &&
                attempt.find_first_not_of("0123456789") == std::string::npos) {
              cursor.attempt = std::stoll(attempt);
            }
          },
          [&](const char* data, size_t size) {
            context.out().write(data, static_cast<std::streamsize>(size));
            context.out().flush();
            cursor.offset += static_cast<int64_t>(size);
            return true;
          },
          args.follow_read_timeout_s);
      if (!streamed.ok()) error = streamed.error();
    } else {
      error = DrainLog(api, args.run_id, cursor, context.out());
    }
    if (error) {
      if (error->reason() == "overloaded") {
        // Every follow stream of the server is taken: poll instead.
        use_stream = false;
      } else if (error->reason() != "connection_lost" && error->reason() != "attempt_not_found") {
        // A lost connection is picked up again from the offset; a run that has no attempt yet
        // is waited for.
        return context.Fail(*error);
      }
    }

    CliResult<json> run = api.GetJson(RunPath(args.run_id));
    if (!run.ok()) return context.Fail(run.error());
    const int64_t latest = LatestAttempt(*run);
    const bool terminal = IsTerminalRun(*run);
    const int outcome = RunOutcomeExit(JsonText(*run, "status", "")).value_or(kExitOk);
    if (terminal && cursor.attempt == 0) {
      if (latest == 0) return outcome;  // ended before any attempt started
      cursor.attempt = latest;
    }
    const bool newer_attempt = args.attempt == 0 && cursor.attempt > 0 && latest > cursor.attempt;
    if (terminal || newer_attempt) {
      // The attempt being followed is over: print what it wrote after the stream's last read.
      std::optional<CliError> drain = DrainLog(api, args.run_id, cursor, context.out());
      if (drain && !(args.attempt == 0 && drain->reason() == "attempt_not_found")) {
        return context.Fail(*drain);
      }
      if (newer_attempt) {
        // The run was retried: the new attempt has a log of its own, read from its start.
        cursor.attempt = latest;
        cursor.offset = 0;
        context.err() << "ql: attempt " << cursor.attempt << " of run " << args.run_id << "\n";
        context.err().flush();
        continue;
      }
      return outcome;
    }
    // Nothing new arrived (the attempt is between retries, or not started): do not spin.
    if (cursor.offset == before.offset && cursor.attempt == before.attempt) Sleep(args.poll_ms);
  }
}

int RunCancel(const std::string& run_id, const std::optional<std::string>& reason,
              CommandContext& context) {
  json body = json::object();
  if (reason) body["reason"] = *reason;
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> run = (*api)->PostJson(RunPath(run_id) + "/cancel", body);
  if (!run.ok()) return context.Fail(run.error());
  if (context.json()) {
    context.out() << JsonOutput(*run) << "\n";
  } else {
    context.out() << Summary(*run) << " cancel requested\n";
  }
  return kExitOk;
}

int RunStart(const RunStartArgs& args, CommandContext& context) {
  json body = {{"task_id", args.task_id}};
  if (args.idempotency_key) body["idempotency_key"] = *args.idempotency_key;
  if (args.priority) body["priority"] = *args.priority;
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> run = (*api)->PostJson("/api/v1/runs", body);
  if (!run.ok()) return context.Fail(run.error());
  if (JsonText(*run, "code", "") == "approval_required") {
    // The task requires approval: no run yet, the request waits for another principal.
    if (context.json()) context.out() << JsonOutput(*run) << "\n";
    context.err() << "ql: approval required: request " << JsonText(*run, "approval_id", "")
                  << " waits for another person (ql approval approve ID); no run was started\n";
    return kExitApprovalRequired;
  }
  const std::string run_id = JsonText(*run, "id", "");
  if (args.follow) {
    // The log is the output; the run id goes to stderr.
    context.err() << "ql: run " << run_id << "\n";
    context.err().flush();
    RunLogArgs log;
    log.run_id = run_id;
    log.follow = true;
    log.poll_ms = args.poll_ms;
    const int followed = RunLog(log, context);
    if (followed == kExitFailure || followed == kExitUsage || followed == kExitUnreachable) {
      return followed;
    }
    return WaitForRun(**api, run_id, args.poll_ms, context);
  }
  if (context.json()) {
    context.out() << JsonOutput(*run) << "\n";
  } else {
    context.out() << run_id << "\n";
  }
  context.out().flush();
  if (!args.wait) return kExitOk;
  return WaitForRun(**api, run_id, args.poll_ms, context);
}

int RunResolve(const std::string& run_id, const std::string& as, const std::string& reason,
               CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> resolved = (*api)->PostJson(RunPath(run_id) + "/resolve",
                                              json{{"resolution", as}, {"reason", reason}});
  if (!resolved.ok()) return context.Fail(resolved.error());
  if (context.json()) {
    context.out() << JsonOutput(*resolved) << "\n";
  } else {
    context.out() << "run " << run_id << " resolved as " << as;
    if (resolved->contains("retry_run_id") && (*resolved)["retry_run_id"].is_string()) {
      context.out() << "; new run " << (*resolved)["retry_run_id"].get<std::string>();
    }
    context.out() << "\n";
  }
  return kExitOk;
}

int RunRetry(const std::string& run_id, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> run = (*api)->PostJson(RunPath(run_id) + "/retry", json::object());
  if (!run.ok()) return context.Fail(run.error());
  if (context.json()) {
    context.out() << JsonOutput(*run) << "\n";
  } else {
    context.out() << JsonText(*run, "id", "") << "\n";
  }
  return kExitOk;
}

void RegisterRunCommands(CLI::App& app) {
  AddGlobalOptions(app);
  CLI::App* run = app.add_subcommand("run", "Inspect, start, cancel and retry runs");
  run->require_subcommand(1);
  run->fallthrough();

  auto list_args = std::make_shared<RunListArgs>();
  CLI::App* list = run->add_subcommand("list", "List runs, newest first");
  list->fallthrough();
  list->add_option_function<std::string>(
      "--task", [list_args](const std::string& v) { list_args->task_id = v; },
      "Only runs of this task");
  list->add_option_function<std::string>(
      "--trigger", [list_args](const std::string& v) { list_args->trigger_id = v; },
      "Only runs admitted by this trigger");
  list->add_option_function<std::string>(
      "--status", [list_args](const std::string& v) { list_args->status = v; },
      "Only runs in this state (queued, running, succeeded, failed, ...)");
  list->add_option_function<std::string>(
      "--since", [list_args](const std::string& v) { list_args->since = v; },
      "Only runs created at or after this time: RFC 3339, or a duration back from now (2h, 1d)");
  list->add_option_function<std::string>(
      "--until", [list_args](const std::string& v) { list_args->until = v; },
      "Only runs created before this time (as --since)");
  list->add_option("--limit", list_args->limit, "Show at most N runs")->capture_default_str();
  list->add_option("--cursor", list_args->cursor,
                   "Continue a listing where a --json listing's next_cursor says");
  list->callback([list, list_args] {
    RunCommand(*list, [&](CommandContext& context) { return RunList(*list_args, context); });
  });

  auto show_id = std::make_shared<std::string>();
  CLI::App* show = run->add_subcommand("show", "Show a run with its attempts and events");
  show->fallthrough();
  show->add_option("id", *show_id, "Run id, or a unique prefix of it (8 characters or more)")
      ->required();
  show->callback([show, show_id] {
    RunCommand(*show, [&](CommandContext& context) { return RunShow(*show_id, context); });
  });

  auto log_args = std::make_shared<RunLogArgs>();
  CLI::App* log =
      run->add_subcommand("log", "Print a run's log (stdout and stderr of the command)");
  log->fallthrough();
  log->add_option("id", log_args->run_id, "Run id, or a unique prefix of it (8 characters or more)")
      ->required();
  log->add_flag("-f,--follow", log_args->follow, "Keep printing new output until the run ends");
  log->add_option("--attempt", log_args->attempt, "Attempt number (default: the latest)");
  log->add_option_function<std::string>(
      "--tail", [log_args](const std::string& v) { log_args->tail = v; },
      "Print only the last N lines (with -f, then follow from there)");
  log->callback([log, log_args] {
    RunCommand(*log, [&](CommandContext& context) { return RunLog(*log_args, context); });
  });

  auto cancel_id = std::make_shared<std::string>();
  auto cancel_reason = std::make_shared<std::optional<std::string>>();
  CLI::App* cancel = run->add_subcommand("cancel", "Ask a run to stop");
  cancel->fallthrough();
  cancel->add_option("id", *cancel_id, "Run id, or a unique prefix of it (8 characters or more)")
      ->required();
  cancel->add_option_function<std::string>(
      "--reason", [cancel_reason](const std::string& v) { *cancel_reason = v; },
      "Why (recorded with the run; default \"user\")");
  cancel->callback([cancel, cancel_id, cancel_reason] {
    RunCommand(*cancel, [&](CommandContext& context) {
      return RunCancel(*cancel_id, *cancel_reason, context);
    });
  });

  auto start_args = std::make_shared<RunStartArgs>();
  CLI::App* start = run->add_subcommand("start", "Run a task now and print the run id");
  start->fallthrough();
  start->add_option("task", start_args->task_id, "Task name or id")->required();
  start->add_option_function<std::string>(
      "--idempotency-key", [start_args](const std::string& v) { start_args->idempotency_key = v; },
      "Start at most one run for this key; repeating it prints the first run");
  start->add_option_function<int64_t>(
      "--priority", [start_args](const int64_t& v) { start_args->priority = v; },
      "Dispatch priority, -1000..1000 (default 0; higher first)");
  start->add_flag("--wait", start_args->wait,
                  "Wait until the run ends and exit with its outcome: 0 succeeded, 10 failed, "
                  "11 timed out, 12 cancelled, 14 recovery required (13: approval required)");
  start->add_flag("--follow", start_args->follow,
                  "Print the run's log as it is written (the run id goes to stderr), then exit "
                  "as --wait does");
  start->callback([start, start_args] {
    RunCommand(*start, [&](CommandContext& context) { return RunStart(*start_args, context); });
  });

  auto resolve_id = std::make_shared<std::string>();
  auto resolve_as = std::make_shared<std::string>();
  auto resolve_reason = std::make_shared<std::string>();
  CLI::App* resolve = run->add_subcommand(
      "resolve", "Resolve a run in recovery_required: succeeded, failed, or retry (a new run)");
  resolve->fallthrough();
  resolve->add_option("id", *resolve_id, "Run id, or a unique prefix of it (8 characters or more)")
      ->required();
  resolve->add_option("--as", *resolve_as, "succeeded, failed or retry")
      ->required()
      ->check(CLI::IsMember({"succeeded", "failed", "retry"}));
  resolve->add_option("--reason", *resolve_reason, "Why (recorded with the resolution)")
      ->required();
  resolve->callback([resolve, resolve_id, resolve_as, resolve_reason] {
    RunCommand(*resolve, [&](CommandContext& context) {
      return RunResolve(*resolve_id, *resolve_as, *resolve_reason, context);
    });
  });

  auto retry_id = std::make_shared<std::string>();
  CLI::App* retry =
      run->add_subcommand("retry", "Start a new run of a finished run's task and print its id");
  retry->fallthrough();
  retry->add_option("id", *retry_id, "Run id, or a unique prefix of it (8 characters or more)")
      ->required();
  retry->callback([retry, retry_id] {
    RunCommand(*retry, [&](CommandContext& context) { return RunRetry(*retry_id, context); });
  });
}

}  // namespace ql::cli
