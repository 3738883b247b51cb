#include "ql/storage/sqlite/sqlite_migrations.h"

#include <string>

namespace ql::sqlite {

const MigrationStream& SqliteMainStream() {
  static const MigrationStream* const kStream = [] {
    auto* stream = new MigrationStream;
    stream->name = std::string(kSqliteMainStream);
    stream->dialect = std::string(kSqliteDialect);
    for (const EmbeddedSql& file : EmbeddedMigrationFiles()) {
      stream->migrations.push_back(
          Migration{std::string(file.id), MigrationChecksum(file.sql), std::string(file.sql)});
    }
    return stream;
  }();
  return *kStream;
}

std::span<const SchemaCapability> CapabilitySteps() {
  // Version 1 is the complete local control core: it becomes true only once the run tables
  // exist, so it is written by the last migration of the baseline.
  static constexpr SchemaCapability kSteps[] = {
      {kLocalControlCore, 1,
       R"({"attempts":1,"definitions":1,"events":1,"projects":1,"retry_policies":1,"runs":1,)"
       R"("schedules":1})",
       "0004-runs"},
      {kLocalControlCore, 2,
       R"({"attempts":1,"definitions":1,"events":1,"governance":1,"projects":1,)"
       R"("retry_policies":1,"runs":1,"schedules":1})",
       "0005-governance"},
      {kLocalControlCore, 3,
       R"({"approvals":1,"attempts":1,"definitions":1,"events":1,"governance":1,"projects":1,)"
       R"("retry_policies":1,"runs":2,"schedules":1})",
       "0006-approvals"},
      {kLocalControlCore, 4,
       R"({"approvals":1,"attempts":1,"definitions":1,"events":1,"governance":1,"projects":1,)"
       R"("retention":1,"retry_policies":1,"runs":2,"schedules":1})",
       "0007-retention"},
      {kLocalControlCore, 5,
       R"({"approvals":1,"attempts":1,"definitions":1,"events":1,"governance":1,"projects":1,)"
       R"("retention":1,"retry_policies":1,"runs":2,"schedules":1,"secrets":1})",
       "0008-secrets"},
      {kLocalControlCore, 6,
       R"({"approvals":2,"attempts":1,"definitions":1,"events":1,"governance":1,"projects":1,)"
       R"("retention":1,"retry_policies":1,"runs":2,"schedules":1,"secrets":1})",
       "0009-approval-evidence-and-retries"},
      {kLocalControlCore, 7,
       R"({"approvals":2,"attempts":1,"definitions":2,"events":1,"governance":1,"projects":1,)"
       R"("retention":1,"retry_policies":1,"runs":3,"schedules":1,"secrets":1})",
       "0010-overlap"},
      {kLocalControlCore, 8,
       R"({"approvals":2,"attempts":1,"definitions":3,"events":1,"governance":1,"projects":1,)"
       R"("retention":1,"retry_policies":1,"runs":3,"schedules":1,"secrets":1})",
       "0011-names-and-tombstones"},
      {kLocalControlCore, 9,
       R"({"approvals":2,"attempts":1,"definitions":4,"events":1,"governance":1,"projects":1,)"
       R"("retention":1,"retry_policies":1,"runs":3,"schedules":1,"secrets":1})",
       "0012-trigger-jitter"},
      {kLocalControlCore, 10,
       R"({"approvals":2,"attempts":1,"definitions":4,"events":1,"governance":2,"projects":1,)"
       R"("retention":1,"retry_policies":1,"runs":3,"schedules":1,"secrets":1})",
       "0013-sign-in"},
      {kLocalControlCore, 11,
       R"({"approvals":2,"attempts":1,"definitions":5,"events":1,"governance":2,"projects":1,)"
       R"("retention":1,"retry_policies":1,"runs":3,"schedules":1,"secrets":1})",
       "0014-published-by"},
      {kLocalControlCore, 12,
       R"({"approvals":2,"attempts":1,"definitions":5,"events":1,"governance":3,"projects":1,)"
       R"("retention":1,"retry_policies":1,"runs":3,"schedules":1,"secrets":1})",
       "0015-sign-in-policies"},
      {kLocalControlCore, 13,
       R"({"approvals":2,"attempts":1,"definitions":5,"events":1,"governance":3,)"
       R"("notifications":1,"projects":1,"retention":1,"retry_policies":1,"runs":3,)"
       R"("schedules":1,"secrets":1})",
       "0016-notifications"},
      {kLocalControlCore, 14,
       R"({"approvals":2,"attempts":1,"definitions":5,"events":1,"governance":3,)"
       R"("notifications":1,"projects":1,"retention":1,"retry_policies":2,"runs":3,)"
       R"("schedules":1,"secrets":1})",
       "0017-retry-on-timeout"},
      {kLocalControlCore, 15,
       R"({"approvals":2,"attempts":2,"definitions":5,"events":1,"governance":3,)"
       R"("notifications":1,"projects":1,"retention":1,"retry_policies":2,"runs":3,)"
       R"("schedules":1,"secrets":1})",
       "0018-relative-log-paths"},
      {kLocalControlCore, 16,
       R"({"approvals":2,"artifacts":1,"attempts":2,"definitions":5,"events":1,"governance":3,)"
       R"("notifications":1,"projects":1,"retention":1,"retry_policies":2,"runs":3,)"
       R"("schedules":1,"secrets":1})",
       "0019-artifacts"},
  };
  return kSteps;
}

const SchemaCapability& ExpectedCapability() { return CapabilitySteps().back(); }

}  // namespace ql::sqlite
