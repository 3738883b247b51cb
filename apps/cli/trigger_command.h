#pragma once

// `ql trigger add|list|show|enable|disable|repin|next`: cron triggers over the HTTP API
// (/api/v1/triggers).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "client.h"

namespace ql::cli {

struct TriggerAddArgs {
  std::string task_id;
  std::string expression;  // --cron
  std::string timezone;    // --tz
  std::string misfire;     // --misfire skip|fire_once (empty: the server default, skip)
  std::string overlap;     // --overlap allow|forbid|replace (empty: the server default, allow)
  std::optional<std::string> jitter;  // --jitter DURATION (0 .. 1h; default none)
  bool disabled = false;   // --disabled
  std::optional<std::string> mutation_id;
  std::optional<std::string> name;  // --name (default: the server's, after the task)
};

// What `trigger edit` changes; a flag left out keeps the trigger's current value.
struct TriggerEditArgs {
  std::string trigger_id;
  std::optional<std::string> expression;  // --cron
  std::optional<std::string> timezone;    // --tz
  std::optional<std::string> misfire;     // --misfire
  std::optional<std::string> overlap;     // --overlap
  std::optional<std::string> jitter;      // --jitter DURATION (0s: none)
  std::optional<std::string> name;        // --name: rename
};

struct TriggerListArgs {
  std::optional<std::string> task_id;  // --task
  int64_t limit = 1000;
  std::string cursor;  // --cursor: a next_cursor printed before
};

// What `trigger enable|disable|repin` asks for.
enum class TriggerAction { kEnable, kDisable, kRepin };

struct TriggerNextArgs {
  std::string trigger_id;
  int64_t count = 5;  // 1..100
};

// POST /api/v1/triggers; prints the new trigger id (--json: the trigger object).
int TriggerAdd(const TriggerAddArgs& args, CommandContext& context);
// GET /api/v1/triggers[?task_id=] following cursors; prints a table (--json: an array).
int TriggerList(const TriggerListArgs& args, CommandContext& context);
// GET /api/v1/triggers/{id}; prints its fields (--json: the trigger object).
int TriggerShow(const std::string& trigger_id, CommandContext& context);
// POST /api/v1/triggers/{id}/{enable|disable|repin}; prints "<id> <state> revision <n>", noting
// when nothing changed (--json: the trigger object).
int TriggerChange(const std::string& trigger_id, TriggerAction action, CommandContext& context);
// GET /api/v1/triggers/{id} for its revision, then POST /api/v1/triggers/{id}/revisions with the
// changed fields: a new revision whose schedule follows the new expression from now on. Prints
// as TriggerChange. Nothing to change is a usage error (nothing_to_edit).
int TriggerEdit(const TriggerEditArgs& args, CommandContext& context);
// GET /api/v1/triggers/{id}/next?count=N; prints the next fire times the scheduler will admit,
// one RFC 3339 line each with the trigger zone's offset (--json: the server's answer). When the
// trigger is not active (disabled, stale pin, exhausted) a note on stderr says nothing will be
// admitted.
int TriggerNext(const TriggerNextArgs& args, CommandContext& context);
// DELETE /api/v1/triggers/{id or name}; prints "<id> deleted" (--json: the trigger object).
int TriggerRemove(const std::string& trigger_ref, CommandContext& context);

// Registers the `trigger` command group on `app` (and the global options on its root).
void RegisterTriggerCommands(CLI::App& app);

}  // namespace ql::cli
