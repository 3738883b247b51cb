#pragma once

// Human-facing values of the ql client: aligned tables, durations, and cells made safe to print.
// Pure functions; nothing here does I/O beyond the ostream it is handed.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "client.h"

namespace ql::cli {

// An aligned text table: a header row and data rows, columns separated by two spaces, each
// column as wide as its widest cell in terminal columns (East Asian wide characters count two).
// Cells are sanitised with PrintableCell, so a value with newlines or escape sequences cannot
// break the layout or drive the terminal. The last column is not padded and no line has
// trailing spaces.
class Table {
 public:
  explicit Table(std::vector<std::string> headers);

  // Appends one row; missing cells print empty and extra cells are dropped.
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }

  // Writes the header and every row, one line each, ending with a newline.
  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// Returns the number of terminal columns `text` (UTF-8) occupies: one per code point, two for
// East Asian wide and fullwidth characters, zero for combining marks. Invalid bytes count one.
size_t DisplayWidth(std::string_view text);

// Returns `text` with control characters replaced by visible escapes ("\n", "\t", "\x1b"), so
// that it stays on one line and cannot emit terminal control sequences. Invalid UTF-8 bytes are
// escaped the same way.
std::string PrintableCell(std::string_view text);

// Returns `text` cut to at most `max_width` terminal columns, ending in "…" when cut.
std::string Ellipsize(std::string_view text, size_t max_width);

// Parses a duration: a whole number followed by a unit — "500ms", "30s", "5m", "2h", "1d" — or
// several such parts in decreasing units ("1h30m", "2m30s"), or a plain whole number of
// milliseconds ("1500"). Returns milliseconds, or nullopt when `text` is empty, has a sign,
// spaces, a fraction, an unknown unit, a unit repeated or out of order, or overflows int64.
std::optional<int64_t> ParseDurationMs(std::string_view text);

// ParseDurationMs for the value of `flag`; a usage error invalid_duration naming the flag and
// the accepted forms when it is not a duration.
CliResult<int64_t> DurationFlag(const std::string& flag, const std::string& text);

// Parses the value of `flag` as whole seconds: a plain whole number is seconds ("90"), anything
// else is read by ParseDurationMs ("90s", "10m", "2h", "1d", "1h30m") and must come to whole
// seconds. Returns the seconds, or a usage error invalid_duration naming the flag and the
// accepted forms.
CliResult<int64_t> SecondsFlag(const std::string& flag, const std::string& text);

// Formats non-negative milliseconds as an exact duration that ParseDurationMs reads back, largest
// unit first and zero parts left out: 0 -> "0ms", 1500 -> "1s500ms", 5400000 -> "1h30m",
// 86400000 -> "1d". Negative values are written as plain milliseconds ("-5ms").
std::string FormatDurationMs(int64_t ms);

// Formats an elapsed time for humans, rounded: "850ms", "4.2s", "3m07s", "2h05m", "3d04h".
std::string FormatElapsedMs(int64_t ms);

// Returns the string value of `object[key]`, the decimal text of a number, "true"/"false" for a
// boolean, and `fallback` when the key is absent or null (or `object` is not an object).
std::string JsonText(const nlohmann::json& object, std::string_view key,
                     std::string_view fallback = "-");

// Returns the elapsed time between two RFC 3339 fields of `object` (for example "started_at" and
// "finished_at") formatted with FormatElapsedMs, or `fallback` when either is absent or invalid.
std::string JsonElapsed(const nlohmann::json& object, std::string_view from_key,
                        std::string_view to_key, std::string_view fallback = "-");

// Returns `word` as the shell would need it typed: unchanged when it is made only of characters
// no shell treats specially ([A-Za-z0-9_@%+=:,./-], non-empty), else in single quotes with
// embedded single quotes written '\''.
std::string ShellQuote(std::string_view word);

// Returns a one-line summary of a `qinglong/command@v1` spec as the API returns it: the shell
// command prefixed with "bash: " when the shell is /bin/bash, or the argv file and arguments
// shell-quoted. "?" when the spec has neither form.
std::string CommandSummary(const nlohmann::json& spec);

// Returns object[name_key] when the server named the object, else object[id_key] (JsonText).
std::string NameOr(const nlohmann::json& object, std::string_view name_key,
                   std::string_view id_key);

// Returns the members of a JSON object as "key=value,key=value" in key order (a value that is not
// a string as its JSON text), or "" when `object` is empty or not an object.
std::string KeyValueList(const nlohmann::json& object);

// Returns the common shapes of a cron expression in words ("every 5 minutes", "daily at 08:00",
// "at 09:30 on Mon-Fri", "hourly at :15"); "" for any other shape (show the expression).
std::string DescribeCron(std::string_view expression);

// Returns the time from now to an RFC 3339 instant for people: "in 4m12s", "3h05m ago", "now";
// `fallback` when `iso` is not a time.
std::string RelativeTime(std::string_view iso, int64_t now_ms, std::string_view fallback = "-");

// Returns, for canonical ids, the prefixes a table shows: one length for all, the shortest of at
// least 8 characters that tells them apart (and never ends on a dash) and is at least as long as
// each of `unique` (same order as `ids`, "" where unknown: prefixes the server found unique among
// all runs of the project, so each shown prefix addresses its run).
std::vector<std::string> ShortIds(const std::vector<std::string>& ids,
                                  const std::vector<std::string>& unique = {});

}  // namespace ql::cli
