#include "ql/core/migration_stream.h"

#include "ql/core/digest.h"

#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>

namespace ql {
namespace {

struct StreamScheme {
  std::string_view name;
  std::string_view dialect;
  std::string_view id_prefix;
};

constexpr StreamScheme kSchemes[] = {
    {kSqliteMainStream, kSqliteDialect, ""},
    {kPostgresqlMainStream, kPostgresqlDialect, "pg-"},
};

const StreamScheme* FindScheme(std::string_view name) {
  for (const StreamScheme& s : kSchemes) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// Quotes text that may come from a database row, bounded so a corrupt row cannot produce an
// unbounded message.
std::string Quote(std::string_view s) {
  constexpr std::size_t kMax = kMaxMigrationIdLength;
  if (s.size() <= kMax) return "'" + std::string(s) + "'";
  return "'" + std::string(s.substr(0, kMax)) + "...' (" + std::to_string(s.size()) + " bytes)";
}

// Joins quoted items, naming at most five and counting the rest.
std::string JoinBounded(const std::vector<std::string>& items) {
  constexpr std::size_t kShown = 5;
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += items[i];
  }
  if (items.size() > kShown) out += " and " + std::to_string(items.size() - kShown) + " more";
  return out;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLowerAlnum(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z'); }

// Returns the migration number when `id` fits the scheme "<prefix>NNNN-lower-kebab-name" with
// NNNN >= 0001, else nullopt.
std::optional<int> MigrationNumber(const StreamScheme& scheme, std::string_view id) {
  if (id.size() > kMaxMigrationIdLength) return std::nullopt;
  if (id.substr(0, scheme.id_prefix.size()) != scheme.id_prefix) return std::nullopt;
  id.remove_prefix(scheme.id_prefix.size());
  if (id.size() < 6) return std::nullopt;  // "NNNN-x"
  int number = 0;
  for (int i = 0; i < 4; ++i) {
    if (!IsDigit(id[i])) return std::nullopt;
    number = number * 10 + (id[i] - '0');
  }
  if (number == 0 || id[4] != '-') return std::nullopt;
  std::string_view name = id.substr(5);
  if (name.front() == '-' || name.back() == '-') return std::nullopt;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '-') {
      if (name[i - 1] == '-') return std::nullopt;
    } else if (!IsLowerAlnum(name[i])) {
      return std::nullopt;
    }
  }
  return number;
}

bool IsChecksumShaped(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(),
                                       [](char c) { return IsDigit(c) || (c >= 'a' && c <= 'f'); });
}

std::string FourDigits(std::size_t n) {
  std::string s = std::to_string(n);
  return std::string(s.size() < 4 ? 4 - s.size() : 0, '0') + s;
}

Status StreamError(std::string_view reason, std::string message) {
  return InvalidArgument(std::string(reason), std::move(message));
}

Status HistoryFault(std::string_view reason, std::string message) {
  return Corrupt(std::string(reason), std::move(message));
}

constexpr std::string_view kPrepareSuffix = "-prepare";
constexpr std::string_view kCommitSuffix = "-commit";

// The migration's name without its number and its prepare/commit suffix.
std::string_view PairStem(std::string_view id, std::string_view suffix) {
  id.remove_suffix(suffix.size());
  const std::size_t dash = id.find('-', id.find_first_of("0123456789"));
  return dash == std::string_view::npos ? id : id.substr(dash + 1);
}

}  // namespace

bool IsPrepareMigration(std::string_view id) { return id.ends_with(kPrepareSuffix); }
bool IsCommitMigration(std::string_view id) { return id.ends_with(kCommitSuffix); }

std::string MigrationChecksum(std::string_view sql) { return Sha256Hex(sql); }

Status ValidateStream(const MigrationStream& stream) {
  const StreamScheme* scheme = FindScheme(stream.name);
  if (scheme == nullptr) {
    return StreamError(kReasonMigrationStreamUnknown,
                       "migration stream " + Quote(stream.name) +
                           " is neither 'sqlite-main' nor 'postgresql-main'");
  }
  if (stream.dialect != scheme->dialect) {
    return StreamError(kReasonMigrationDialectMismatch,
                       "migration stream '" + std::string(scheme->name) + "' has dialect " +
                           Quote(stream.dialect) + ", expected '" + std::string(scheme->dialect) +
                           "'");
  }
  std::set<int> seen;
  for (std::size_t i = 0; i < stream.migrations.size(); ++i) {
    const Migration& m = stream.migrations[i];
    std::optional<int> number = MigrationNumber(*scheme, m.id);
    if (!number.has_value()) {
      return StreamError(kReasonMigrationIdMalformed,
                         "migration id " + Quote(m.id) + " in stream '" +
                             std::string(scheme->name) + "' does not match '" +
                             std::string(scheme->id_prefix) + "NNNN-lower-kebab-name'");
    }
    if (!seen.insert(*number).second) {
      return StreamError(kReasonMigrationDuplicate, "migration id " + Quote(m.id) + " in stream '" +
                                                        std::string(scheme->name) +
                                                        "' reuses number " + FourDigits(*number));
    }
    if (static_cast<std::size_t>(*number) != i + 1) {
      return StreamError(kReasonMigrationGap, "migration id " + Quote(m.id) + " is at position " +
                                                  std::to_string(i + 1) + " of stream '" +
                                                  std::string(scheme->name) +
                                                  "', expected number " + FourDigits(i + 1));
    }
    if (!IsChecksumShaped(m.checksum)) {
      return StreamError(kReasonMigrationChecksumMalformed,
                         "migration " + Quote(m.id) + " has checksum " + Quote(m.checksum) +
                             ", expected 64 lowercase hex digits");
    }
    if (m.checksum != MigrationChecksum(m.sql)) {
      return StreamError(kReasonMigrationChecksumMismatch,
                         "migration " + Quote(m.id) + " has checksum " + m.checksum +
                             " but its SQL hashes to " + MigrationChecksum(m.sql));
    }
  }
  for (std::size_t i = 0; i < stream.migrations.size(); ++i) {
    const std::string& id = stream.migrations[i].id;
    if (IsPrepareMigration(id)) {
      const bool paired = i + 1 < stream.migrations.size() &&
                          IsCommitMigration(stream.migrations[i + 1].id) &&
                          PairStem(stream.migrations[i + 1].id, kCommitSuffix) ==
                              PairStem(id, kPrepareSuffix);
      if (!paired) {
        return StreamError(kReasonMigrationPrepareUnpaired,
                           "prepare migration " + Quote(id) +
                               " is not followed directly by its commit migration");
      }
    } else if (IsCommitMigration(id)) {
      const bool paired = i > 0 && IsPrepareMigration(stream.migrations[i - 1].id) &&
                          PairStem(stream.migrations[i - 1].id, kPrepareSuffix) ==
                              PairStem(id, kCommitSuffix);
      if (!paired) {
        return StreamError(kReasonMigrationPrepareUnpaired,
                           "commit migration " + Quote(id) +
                               " does not follow its prepare migration");
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<const Migration*>> PendingMigrations(const MigrationStream& code,
                                                        const std::vector<HistoryRow>& history) {
  QL_RETURN_IF_ERROR(ValidateStream(code));
  const StreamScheme& scheme = *FindScheme(code.name);
  const std::string stream_label = "'" + code.name + "'";

  std::unordered_map<std::string_view, std::size_t> code_index;
  for (std::size_t i = 0; i < code.migrations.size(); ++i) code_index[code.migrations[i].id] = i;

  // Classify every row first; the report then follows the documented precedence.
  std::vector<std::string> wrong_stream, malformed, duplicate, unknown, checksum;
  std::set<std::string_view> seen, reported_duplicate;
  std::vector<std::size_t> applied;  // code indices of well-formed, unique, known rows, in order
  for (const HistoryRow& row : history) {
    if (row.stream != code.name || row.dialect != code.dialect) {
      wrong_stream.push_back(Quote(row.id) + " (stream " + Quote(row.stream) + ", dialect " +
                             Quote(row.dialect) + ")");
      continue;
    }
    if (!MigrationNumber(scheme, row.id).has_value()) {
      malformed.push_back(Quote(row.id));
      continue;
    }
    if (!seen.insert(row.id).second) {
      if (reported_duplicate.insert(row.id).second) duplicate.push_back(Quote(row.id));
      continue;
    }
    auto it = code_index.find(row.id);
    if (it == code_index.end()) {
      unknown.push_back(Quote(row.id));
      continue;
    }
    applied.push_back(it->second);
    if (row.checksum != code.migrations[it->second].checksum) {
      checksum.push_back(Quote(row.id) + " (database " + Quote(row.checksum) + ", code " +
                         code.migrations[it->second].checksum + ")");
    }
  }

  if (!wrong_stream.empty()) {
    return HistoryFault(
        kReasonMigrationWrongStream,
        "migration history for stream " + stream_label + " (dialect '" + code.dialect +
            "') holds rows of another stream or dialect: " + JoinBounded(wrong_stream));
  }
  if (!malformed.empty()) {
    return HistoryFault(kReasonMigrationIdMalformed,
                        "migration history for stream " + stream_label +
                            " holds ids that do not match '" + std::string(scheme.id_prefix) +
                            "NNNN-lower-kebab-name': " + JoinBounded(malformed));
  }
  if (!duplicate.empty()) {
    return HistoryFault(kReasonMigrationDuplicate,
                        "migration history for stream " + stream_label +
                            " records more than once: " + JoinBounded(duplicate));
  }
  if (!unknown.empty()) {
    return HistoryFault(kReasonMigrationUnknown,
                        "migration history for stream " + stream_label +
                            " holds migrations this build does not know (the database is newer "
                            "or was migrated by another build): " +
                            JoinBounded(unknown));
  }
  // Rows are now unique known ids, so there are at most code.migrations.size() of them.
  std::size_t highest = 0;
  for (std::size_t index : applied) highest = std::max(highest, index);
  std::vector<std::string> missing;
  if (!applied.empty()) {
    std::set<std::size_t> applied_set(applied.begin(), applied.end());
    for (std::size_t i = 0; i < highest; ++i) {
      if (applied_set.count(i) == 0) missing.push_back(Quote(code.migrations[i].id));
    }
  }
  if (!missing.empty()) {
    return HistoryFault(kReasonMigrationGap, "migration history for stream " + stream_label +
                                                 " has a gap: " + JoinBounded(missing) +
                                                 " not applied although later " +
                                                 Quote(code.migrations[highest].id) + " is");
  }
  for (std::size_t pos = 0; pos < applied.size(); ++pos) {
    if (applied[pos] != pos) {
      return HistoryFault(kReasonMigrationGap, "migration history for stream " + stream_label +
                                                   " is out of order: position " +
                                                   std::to_string(pos + 1) + " holds " +
                                                   Quote(code.migrations[applied[pos]].id) +
                                                   ", expected " + Quote(code.migrations[pos].id));
    }
  }
  if (!checksum.empty()) {
    return HistoryFault(
        kReasonMigrationChecksumMismatch,
        "migration history for stream " + stream_label +
            " records checksums that differ from the code: " + JoinBounded(checksum));
  }

  std::vector<const Migration*> pending;
  for (std::size_t i = applied.size(); i < code.migrations.size(); ++i) {
    pending.push_back(&code.migrations[i]);
  }
  return pending;
}

bool IsMigrationHistoryFault(const Status& status) {
  if (status.code() != StatusCode::kCorrupt) return false;
  return std::find(kMigrationHistoryFaultReasons.begin(), kMigrationHistoryFaultReasons.end(),
                   status.reason()) != kMigrationHistoryFaultReasons.end();
}

}  // namespace ql
