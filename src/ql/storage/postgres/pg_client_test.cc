#include "ql/storage/postgres/pg_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_test_support.h"
#include "ql/testing/postgres_server.h"
#include "ql/testing/unique_index_contract.h"

namespace ql::pg {
namespace {

using testing::PgTestCluster;

TEST(DatabaseUrlTest, MissingSslmodeBecomesVerifyFull) {
  Result<std::string> uri = CheckDatabaseUrl("postgresql://ql3_runtime@db.example/qinglong", false);
  ASSERT_TRUE(uri.ok()) << uri.status().ToString();
  EXPECT_EQ(*uri, "postgresql://ql3_runtime@db.example/qinglong?sslmode=verify-full");
  Result<std::string> with_query =
      CheckDatabaseUrl("postgresql://db.example/qinglong?connect_timeout=3", false);
  ASSERT_TRUE(with_query.ok());
  EXPECT_EQ(*with_query, "postgresql://db.example/qinglong?connect_timeout=3&sslmode=verify-full");
  Result<std::string> kv = CheckDatabaseUrl("host=db.example dbname=qinglong", false);
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(*kv, "host=db.example dbname=qinglong sslmode=verify-full");
  EXPECT_TRUE(CheckDatabaseUrl("postgresql://db.example/q?sslmode=verify-ca", false).ok());
}

TEST(DatabaseUrlTest, UnverifiedTlsNeedsTheInsecureSwitch) {
  for (const char* mode : {"disable", "allow", "prefer", "require"}) {
    std::string url = std::string("postgresql://u:s3cret@127.0.0.1/q?sslmode=") + mode;
    Result<std::string> refused = CheckDatabaseUrl(url, false);
    ASSERT_FALSE(refused.ok()) << mode;
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(refused.status().reason(), "insecure_database_url");
    EXPECT_NE(refused.status().message().find("QL3_POSTGRES_ALLOW_INSECURE"), std::string::npos);
    EXPECT_EQ(refused.status().message().find("s3cret"), std::string::npos);
    EXPECT_TRUE(CheckDatabaseUrl(url, true).ok()) << mode;
  }
}

TEST(DatabaseUrlTest, MalformedUrlsAreRejectedWithoutQuotingThem) {
  for (const char* url : {"", "postgresql://u:s3cret@[::1/q", "host=a = b s3cret",
                          "postgresql://u:s3cret@h/q?sslmode=sometimes"}) {
    Result<std::string> r = CheckDatabaseUrl(url, true);
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_EQ(r.status().reason(), "invalid_database_url") << url;
    EXPECT_EQ(r.status().message().find("s3cret"), std::string::npos) << url;
  }
}

TEST(DatabaseUrlTest, UserIsReadFromTheUrl) {
  EXPECT_EQ(DatabaseUrlUser("postgresql://ql3_admin@h/q"), "ql3_admin");
  EXPECT_EQ(DatabaseUrlUser("host=h user=ql3_runtime"), "ql3_runtime");
  EXPECT_EQ(DatabaseUrlUser("postgresql://h/q"), "");
}

TEST(StatusFromPgTest, MapsEveryClassInOnePlace) {
  auto map = [](const char* state, const char* constraint = "", bool lost = false,
                PgPhase phase = PgPhase::kStatement) {
    return StatusFromPg(state, constraint, lost, "op", phase);
  };
  EXPECT_EQ(map("40001").code(), StatusCode::kBusy);
  EXPECT_EQ(map("40001").reason(), "serialization_failure");
  EXPECT_EQ(map("40P01").reason(), "deadlock_detected");
  EXPECT_EQ(map("55P03").reason(), "lock_timeout");
  EXPECT_EQ(map("57014").reason(), "statement_timeout");
  EXPECT_EQ(map("23505", "runs_idempotency_key_key").code(), StatusCode::kDuplicate);
  EXPECT_EQ(map("23505", "runs_idempotency_key_key").reason(), "idempotency_key_duplicate");
  EXPECT_EQ(map("23505", "task_revisions_mutation_id_key").code(), StatusCode::kConflict);
  EXPECT_EQ(map("23505", "run_events_pkey").reason(), "fence_conflict");
  EXPECT_EQ(map("23505", "made_up_key").code(), StatusCode::kCorrupt);
  EXPECT_EQ(map("23505", "made_up_key").reason(), "unknown_constraint");
  EXPECT_EQ(map("23505", "principals_name_key").code(), StatusCode::kDuplicate);
  EXPECT_EQ(map("23505", "principals_name_key").reason(), "principal_name_duplicate");
  EXPECT_EQ(map("23505", "run_log_chunks_pkey").reason(), "log_offset_mismatch");
  EXPECT_EQ(map("23503", "runs_project_fkey").code(), StatusCode::kNotFound);
  EXPECT_EQ(map("23503", "runs_project_fkey").reason(), "reference_not_found");
  EXPECT_EQ(map("23503", "schema_capabilities_migration_fkey").reason(), "capability_invalid");
  EXPECT_EQ(map("23503", "made_up_fkey").reason(), "unknown_constraint");
  EXPECT_EQ(map("23514", "runs_status_check").reason(), "constraint_violated");
  EXPECT_NE(map("23514", "runs_status_check").message().find("runs_status_check"),
            std::string::npos);
  EXPECT_EQ(map("23514", "principals_name_check").reason(), "invalid_principal_name");
  EXPECT_EQ(map("23514", "made_up_check").code(), StatusCode::kCorrupt);
  EXPECT_EQ(map("23502").reason(), "constraint_violated");
  EXPECT_EQ(map("22003").reason(), "value_too_large");
  EXPECT_EQ(map("QL001").reason(), "row_immutable");
  EXPECT_EQ(map("QL002").reason(), "run_not_finished");
  EXPECT_EQ(map("08006").code(), StatusCode::kUnavailable);
  EXPECT_EQ(map("57P01").code(), StatusCode::kUnavailable);
  EXPECT_EQ(map("", "", true).reason(), "database_unavailable");
  EXPECT_EQ(map("", "", true, PgPhase::kCommit).code(), StatusCode::kOutcomeUnknown);
  EXPECT_EQ(map("08006", "", false, PgPhase::kCommit).reason(), "commit_outcome_unknown");
  EXPECT_EQ(map("25006").reason(), "database_read_only");
  EXPECT_EQ(map("42501").reason(), "insufficient_privilege");
  EXPECT_EQ(map("XX000").reason(), "database_error");
  // A serialization failure at COMMIT is still a serialization failure (retried).
  EXPECT_EQ(map("40001", "", false, PgPhase::kCommit).reason(), "serialization_failure");
}

// Every unique, foreign-key and CHECK constraint the schema contract names maps to a stable
// code of its own; one the mapping does not know would surface as Corrupt.
TEST(StatusFromPgTest, EveryConstraintOfTheSchemaContractHasARule) {
  std::string_view contract;
  for (const EmbeddedSql& file : EmbeddedMigrationFiles()) {
    if (file.id == "schema_contract") contract = file.sql;
  }
  ASSERT_FALSE(contract.empty());
  const std::map<std::string, std::string> sqlstate_of = {
      {"UNIQUE", "23505"}, {"PRIMARY", "23505"}, {"FOREIGN", "23503"}, {"CHECK", "23514"}};
  std::istringstream lines{std::string(contract)};
  int checked = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("constraint ", 0) != 0) continue;
    std::istringstream fields(line);
    std::string word, qualified, kind;
    fields >> word >> qualified >> kind;
    const std::string name = qualified.substr(qualified.find('.') + 1);
    SCOPED_TRACE(line);
    auto sqlstate = sqlstate_of.find(kind);
    if (sqlstate == sqlstate_of.end()) {
      ADD_FAILURE() << "a constraint of kind " << kind << " that StatusFromPg does not map";
      continue;
    }
    Status status = StatusFromPg(sqlstate->second, name, false, "op", PgPhase::kStatement);
    EXPECT_NE(status.reason(), "unknown_constraint") << name << " has no rule";
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find(name), std::string::npos) << status.ToString();
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

// A unique index that is no constraint (a partial one, say runs_cron_occurrence_key) is
// reported by its own name on a violation: each has a rule of its own too, the one the
// repository contract expects of both stores.
TEST(StatusFromPgTest, EveryUniqueIndexOfTheSchemaContractHasARule) {
  std::string_view contract;
  for (const EmbeddedSql& file : EmbeddedMigrationFiles()) {
    if (file.id == "schema_contract") contract = file.sql;
  }
  ASSERT_FALSE(contract.empty());
  std::set<std::string> constraints;
  std::vector<std::string> unique_indexes;
  std::istringstream lines{std::string(contract)};
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string kind, name, create, unique;
    fields >> kind >> name >> create >> unique;
    if (kind == "constraint") constraints.insert(name.substr(name.find('.') + 1));
    if (kind == "index" && unique == "UNIQUE") unique_indexes.push_back(name);
  }
  int indexes_only = 0;
  for (const std::string& name : unique_indexes) {
    if (constraints.contains(name)) continue;  // checked with the constraints
    SCOPED_TRACE(name);
    ++indexes_only;
    Status status = StatusFromPg("23505", name, false, "op", PgPhase::kStatement);
    EXPECT_NE(status.reason(), "unknown_constraint") << name << " has no rule";
    EXPECT_NE(status.message().find(name), std::string::npos) << status.ToString();
    bool listed = false;
    for (const ::ql::testing::ConditionalUniqueIndex& index :
         ::ql::testing::kConditionalUniqueIndexes) {
      if (index.postgres_index != name) continue;
      listed = true;
      EXPECT_EQ(status.code(), index.code) << status.ToString();
      EXPECT_EQ(status.reason(), index.reason) << status.ToString();
    }
    EXPECT_TRUE(listed) << name << " is missing from testing::kConditionalUniqueIndexes";
  }
  EXPECT_EQ(indexes_only, std::size(::ql::testing::kConditionalUniqueIndexes));
}

// Live tests run as the superuser on a scratch database of their own.
class PgClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = PgTestCluster::Get().NewEmptyDatabase();
    url_ = PgTestCluster::Get().Url(::ql::testing::PostgresServer::kSuperuser, db_);
    ASSERT_TRUE(PgTestCluster::Get()
                    .server()
                    .Psql(db_,
                          "CREATE TABLE public.kv (k int PRIMARY KEY, v int NOT NULL);"
                          "INSERT INTO public.kv VALUES (1, 0), (2, 0);")
                    .ok());
  }

  std::unique_ptr<Pool> MakePool(int max, int lock_timeout_ms = 2000,
                                 int statement_timeout_ms = 5000) {
    PoolOptions options;
    options.url = url_;
    options.max_connections = max;
    options.acquire_timeout_ms = 300;
    options.session.lock_timeout_ms = lock_timeout_ms;
    options.session.statement_timeout_ms = statement_timeout_ms;
    Result<std::unique_ptr<Pool>> pool = Pool::Create(options);
    EXPECT_TRUE(pool.ok()) << pool.status().ToString();
    return pool.ok() ? std::move(pool).value() : nullptr;
  }

  // The backend pid of the pool's next connection (0 when none could be had).
  static int BackendPidOf(Pool& pool) {
    int pid = 0;
    EXPECT_TRUE(pool.WithConnection("pid",
                                    [&](Connection& c) {
                                      pid = c.BackendPid();
                                      return Status::Ok();
                                    })
                    .ok());
    return pid;
  }

  std::string db_;
  std::string url_;
};

TEST_F(PgClientTest, SessionsAreUtcWithAnExplicitSearchPathAndBoundedTransactions) {
  auto pool = MakePool(1, 1234, 4321);
  std::string tz, path, app, statement, lock, idle;
  Status st = pool->Transact({}, "settings", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(
        Rows rows, tx.Exec("SELECT current_setting('TimeZone'), current_setting('search_path'),"
                           " current_setting('application_name'),"
                           " current_setting('statement_timeout'),"
                           " current_setting('lock_timeout'),"
                           " current_setting('idle_in_transaction_session_timeout')"));
    tz = rows.Text(0, 0);
    path = rows.Text(0, 1);
    app = rows.Text(0, 2);
    statement = rows.Text(0, 3);
    lock = rows.Text(0, 4);
    idle = rows.Text(0, 5);
    return rows.status();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(tz, "UTC");
  EXPECT_EQ(path, "ql3");
  EXPECT_EQ(app, "qinglong");
  EXPECT_EQ(statement, "4321ms");
  EXPECT_EQ(lock, "1234ms");
  EXPECT_EQ(idle, "10s");
}

TEST_F(PgClientTest, DecodingFailsClosed) {
  auto pool = MakePool(1);
  auto decode = [&](const char* sql, auto getter) {
    Status result;
    Status st = pool->Transact({}, "decode", [&](Tx& tx) -> Status {
      QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(sql));
      getter(rows);
      result = rows.status();
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return result;
  };
  auto as_int = [](Rows& r) { (void)r.Int(0, 0); };
  EXPECT_TRUE(decode("SELECT 9007199254740991::bigint", as_int).ok());
  EXPECT_EQ(decode("SELECT 9007199254740992::bigint", as_int).reason(), "integer_out_of_range");
  EXPECT_EQ(decode("SELECT -9007199254740992::bigint", as_int).reason(), "integer_out_of_range");
  EXPECT_EQ(decode("SELECT NULL::bigint", as_int).reason(), "decode_drift");
  EXPECT_EQ(decode("SELECT 'x'::text", as_int).reason(), "decode_drift");
  EXPECT_EQ(decode("SELECT 1::numeric", as_int).reason(), "decode_drift");
  EXPECT_EQ(decode("SELECT 1", [](Rows& r) { (void)r.Text(0, 0); }).reason(), "decode_drift");
  EXPECT_EQ(decode("SELECT 1", [](Rows& r) { (void)r.Int(0, 3); }).reason(), "decode_drift");
  EXPECT_EQ(decode("SELECT 1", [](Rows& r) { (void)r.Bool(0, 0); }).reason(), "decode_drift");
  EXPECT_TRUE(decode("SELECT NULL::text", [](Rows& r) { (void)r.OptText(0, 0); }).ok());
  EXPECT_EQ(decode("SELECT 1 WHERE false", [](Rows& r) { r.status(); }).code(), StatusCode::kOk);
}

// Bytes travel as binary bytea both ways: every byte value (NUL included) arrives unchanged,
// the server sees exactly the bytes sent (not an escape of them), and a binary result is read
// by Bytes only; a text result of the same value still decodes. The first statement of a
// transaction (sent with its BEGIN in one pipeline) keeps its formats.
TEST_F(PgClientTest, BytesTravelAsBinaryBytea) {
  auto pool = MakePool(1);
  std::string bytes;
  for (int round = 0; round < 3; ++round) {
    for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  }
  int64_t length = 0;
  std::string binary, text, hex;
  Status drift;
  Status st = pool->Transact({}, "bytes", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(Rows first,
                        tx.Exec("SELECT $1::bytea", {PBytes(bytes)}, ResultFormat::kBinary));
    binary = first.Bytes(0, 0);
    QL_RETURN_IF_ERROR(first.status());
    QL_ASSIGN_OR_RETURN(
        Rows sent, tx.Exec("SELECT length($1::bytea), encode($1::bytea, 'hex')", {PBytes(bytes)}));
    length = sent.Int(0, 0);
    hex = sent.Text(0, 1);
    QL_RETURN_IF_ERROR(sent.status());
    QL_ASSIGN_OR_RETURN(Rows as_text, tx.Exec("SELECT $1::bytea", {PBytes(bytes)}));
    text = as_text.Bytes(0, 0);
    QL_RETURN_IF_ERROR(as_text.status());
    QL_ASSIGN_OR_RETURN(Rows other, tx.Exec("SELECT 1::bigint", {}, ResultFormat::kBinary));
    (void)other.Int(0, 0);
    drift = other.status();
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(binary, bytes);
  EXPECT_EQ(text, bytes);
  EXPECT_EQ(length, static_cast<int64_t>(bytes.size()));
  std::string want_hex;
  for (unsigned char c : bytes) {
    static constexpr char kHex[] = "0123456789abcdef";
    want_hex.push_back(kHex[c >> 4]);
    want_hex.push_back(kHex[c & 15]);
  }
  EXPECT_EQ(hex, want_hex);
  EXPECT_EQ(drift.reason(), "decode_drift") << drift.ToString();
}

TEST_F(PgClientTest, ExhaustedPoolTimesOutAcquiring) {
  auto pool = MakePool(1);
  std::latch holding(1);
  std::promise<void> release;
  auto holder = std::async(std::launch::async, [&] {
    return pool->Transact({}, "hold", [&](Tx&) -> Status {
      holding.count_down();
      release.get_future().wait();
      return Status::Ok();
    });
  });
  holding.wait();
  Status st = pool->Transact({}, "starved", [](Tx&) { return Status::Ok(); });
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(st.reason(), "pool_acquire_timeout");
  release.set_value();
  EXPECT_TRUE(holder.get().ok());
  EXPECT_LE(pool->open_connections(), 1);
}

TEST_F(PgClientTest, SerializationFailuresRerunTheWholeTransaction) {
  auto pool = MakePool(2);
  // Write skew: each transaction reads both rows and writes one; SERIALIZABLE aborts one, and
  // the runner reruns it from the start.
  std::latch both_read(2);
  std::atomic<int> runs{0};
  auto body = [&](int key) {
    return [&, key](Tx& tx) -> Status {
      int run = runs.fetch_add(1);
      QL_ASSIGN_OR_RETURN(Rows sum, tx.Exec("SELECT sum(v)::bigint FROM public.kv"));
      int64_t total = sum.Int(0, 0);
      QL_RETURN_IF_ERROR(sum.status());
      if (run < 2) both_read.arrive_and_wait();
      return tx.Exec("UPDATE public.kv SET v = $1 WHERE k = $2", {P(total + 1), P(key)}).status();
    };
  };
  TxOptions serializable{Isolation::kSerializable, false};
  auto a =
      std::async(std::launch::async, [&] { return pool->Transact(serializable, "a", body(1)); });
  auto b =
      std::async(std::launch::async, [&] { return pool->Transact(serializable, "b", body(2)); });
  Status sa = a.get(), sb = b.get();
  EXPECT_TRUE(sa.ok()) << sa.ToString();
  EXPECT_TRUE(sb.ok()) << sb.ToString();
  EXPECT_GE(pool->retries(), 1);
  EXPECT_EQ(runs.load(), 3);
  // Serial outcome: one saw 0 and wrote 1, the rerun saw 1 and wrote 2.
  Result<std::string> sum = PgTestCluster::Get().server().Psql(db_, "SELECT sum(v) FROM public.kv");
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, "3\n");
}

TEST_F(PgClientTest, RetriesStopAtTheCap) {
  PoolOptions options;
  options.url = url_;
  options.max_tx_attempts = 3;
  auto pool = Pool::Create(options);
  ASSERT_TRUE(pool.ok());
  int runs = 0;
  Status st = (*pool)->Transact({}, "always", [&](Tx& tx) -> Status {
    ++runs;
    // Raise a serialization failure on purpose.
    return tx.Exec("DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '40001'; END $$").status();
  });
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(st.reason(), "retry_exhausted");
}

TEST_F(PgClientTest, LockAndStatementTimeoutsAreBusy) {
  auto pool = MakePool(2, /*lock_timeout_ms=*/100, /*statement_timeout_ms=*/300);
  std::latch locked(1);
  std::promise<void> release;
  auto holder = std::async(std::launch::async, [&] {
    return pool->Transact({}, "hold", [&](Tx& tx) -> Status {
      QL_RETURN_IF_ERROR(tx.Exec("SELECT v FROM public.kv WHERE k = 1 FOR UPDATE").status());
      locked.count_down();
      release.get_future().wait();
      return Status::Ok();
    });
  });
  locked.wait();
  Status st = pool->Transact({}, "blocked", [](Tx& tx) {
    return tx.Exec("UPDATE public.kv SET v = 5 WHERE k = 1").status();
  });
  EXPECT_EQ(st.code(), StatusCode::kBusy);
  EXPECT_EQ(st.reason(), "lock_timeout");
  release.set_value();
  EXPECT_TRUE(holder.get().ok());

  Status slow =
      pool->Transact({}, "slow", [](Tx& tx) { return tx.Exec("SELECT pg_sleep(2)").status(); });
  EXPECT_EQ(slow.reason(), "statement_timeout");
}

TEST_F(PgClientTest, LostCommitReplyIsOutcomeUnknownAndNotRetried) {
  auto pool = MakePool(1);
  pool->SetCommitFaultForTesting(
      [](std::string_view op) { return StatusFromPg("", "", true, op, PgPhase::kCommit); });
  int runs = 0;
  Status st = pool->Transact({}, "write", [&](Tx& tx) {
    ++runs;
    return tx.Exec("UPDATE public.kv SET v = 42 WHERE k = 2").status();
  });
  EXPECT_EQ(st.code(), StatusCode::kOutcomeUnknown);
  EXPECT_EQ(runs, 1);
  // The write did commit: the caller must reconcile, never assume either way.
  Result<std::string> v =
      PgTestCluster::Get().server().Psql(db_, "SELECT v FROM public.kv WHERE k = 2");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "42\n");
}

TEST_F(PgClientTest, LostCommitReplyOfAReadOnlyTransactionIsRetriedTransparently) {
  auto pool = MakePool(1);
  int commits = 0;
  pool->SetCommitFaultForTesting([&](std::string_view op) -> Status {
    if (++commits > 2) return Status::Ok();
    return StatusFromPg("", "", true, op, PgPhase::kCommit);
  });
  int runs = 0;
  int64_t value = 0;
  Status st = pool->Transact({Isolation::kReadCommitted, /*read_only=*/true}, "read",
                             [&](Tx& tx) -> Status {
                               ++runs;
                               QL_ASSIGN_OR_RETURN(
                                   Rows rows, tx.Exec("SELECT v FROM public.kv WHERE k = 1"));
                               value = rows.Int(0, 0);
                               return rows.status();
                             });
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(runs, 3);  // two replies lost, the third arrived
  EXPECT_EQ(value, 0);

  // Bounded like any retry: every reply lost ends as Unavailable, never OutcomeUnknown.
  pool->SetCommitFaultForTesting(
      [](std::string_view op) { return StatusFromPg("", "", true, op, PgPhase::kCommit); });
  runs = 0;
  Status lost = pool->Transact({Isolation::kReadCommitted, true}, "read", [&](Tx& tx) {
    ++runs;
    return tx.Exec("SELECT 1").status();
  });
  EXPECT_EQ(lost.code(), StatusCode::kUnavailable) << lost.ToString();
  EXPECT_EQ(lost.reason(), "database_unavailable");
  EXPECT_EQ(runs, pool->options().max_tx_attempts);
}

TEST_F(PgClientTest, NoticesGoToTheSinkAsOneLineAndNeverToStderr) {
  std::vector<std::string> lines;
  std::mutex mu;
  SetNoticeSink([&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  });
  auto pool = MakePool(1);
  ::testing::internal::CaptureStderr();
  Status raised = pool->WithConnection("notice", [&](Connection& c) {
    QL_RETURN_IF_ERROR(c.ExecScript(
        "DO $$ BEGIN RAISE NOTICE 'hello %', 42 USING DETAIL = 'not logged'; END $$", "notice"));
    return c.ExecScript("SET LOCAL lock_timeout = 1000", "warning");
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  SetNoticeSink(nullptr);
  EXPECT_TRUE(raised.ok()) << raised.ToString();
  EXPECT_EQ(err, "");
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "postgres: NOTICE 00000: hello 42");
  EXPECT_EQ(lines[1], "postgres: WARNING 25P01: SET LOCAL can only be used in transaction blocks");
}

TEST_F(PgClientTest, AFrozenHolderReleasesItsRowLocksAfterTheIdleInTransactionBound) {
  PoolOptions options;
  options.url = url_;
  options.max_connections = 1;
  options.session.idle_in_transaction_timeout_ms = 1000;
  Result<std::unique_ptr<Pool>> frozen = Pool::Create(options);
  ASSERT_TRUE(frozen.ok()) << frozen.status().ToString();
  std::latch locked(1);
  auto holder = std::async(std::launch::async, [&] {
    return (*frozen)->Transact({}, "frozen", [&](Tx& tx) -> Status {
      QL_RETURN_IF_ERROR(tx.Exec("SELECT v FROM public.kv WHERE k = 1 FOR UPDATE").status());
      locked.count_down();
      std::this_thread::sleep_for(std::chrono::milliseconds(3000));  // frozen, idle in tx
      return tx.Exec("UPDATE public.kv SET v = v + 1 WHERE k = 1").status();
    });
  });
  locked.wait();
  const auto start = std::chrono::steady_clock::now();
  auto other = MakePool(1, /*lock_timeout_ms=*/2500);
  Status taken = other->Transact({}, "takeover", [](Tx& tx) {
    return tx.Exec("SELECT v FROM public.kv WHERE k = 1 FOR UPDATE").status();
  });
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
  EXPECT_TRUE(taken.ok()) << taken.ToString();
  EXPECT_GE(waited, 700);
  EXPECT_LT(waited, 2000);
  // The frozen holder's transaction was ended by the server: nothing it did is kept.
  EXPECT_EQ(holder.get().code(), StatusCode::kUnavailable);
  Result<std::string> v = PgTestCluster::Get().server().Psql(db_, "SELECT v FROM public.kv WHERE k = 1");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "0\n");
}

TEST_F(PgClientTest, TerminatedBackendIsUnavailableAndThePoolRecovers) {
  auto pool = MakePool(1);
  const int pid = BackendPidOf(*pool);
  ASSERT_GT(pid, 0);
  Status st = pool->Transact({}, "victim", [&](Tx& tx) -> Status {
    Result<std::string> killed = PgTestCluster::Get().server().Psql(
        db_, "SELECT pg_terminate_backend(" + std::to_string(pid) + ")");
    EXPECT_TRUE(killed.ok());
    return tx.Exec("SELECT 1").status();
  });
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_EQ(st.reason(), "database_unavailable");
  // The broken connection was dropped; the next transaction gets a fresh one.
  Status next = pool->Transact({}, "next", [](Tx& tx) { return tx.Exec("SELECT 1").status(); });
  EXPECT_TRUE(next.ok()) << next.ToString();
}

// A connection the server ended while it sat idle in the pool (a restart, a failover) is not
// handed out again: the next transaction gets a fresh one and succeeds at once.
TEST_F(PgClientTest, AConnectionEndedWhileIdleIsNotHandedOut) {
  auto pool = MakePool(1);
  const int pid = BackendPidOf(*pool);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(pool->ended_idle_connections(), 0);
  Result<std::string> killed = PgTestCluster::Get().server().Psql(
      db_, "SELECT pg_terminate_backend(" + std::to_string(pid) + ", 5000)");
  ASSERT_TRUE(killed.ok()) << killed.status().ToString();
  Status write = pool->Transact({}, "write after the backend ended", [](Tx& tx) {
    return tx.Exec("UPDATE public.kv SET v = v + 1 WHERE k = 1").status();
  });
  EXPECT_TRUE(write.ok()) << write.ToString();
  EXPECT_NE(BackendPidOf(*pool), pid);
  EXPECT_EQ(pool->ended_idle_connections(), 1) << "the replaced connection is counted";
}

// BEGIN and its SET LOCALs travel with a transaction's first statement (or its first prefetch):
// every option holds from that statement on, and a body that runs nothing opens nothing.
TEST_F(PgClientTest, ATransactionsOptionsHoldFromItsFirstStatement) {
  auto pool = MakePool(1);
  const std::string settings =
      "SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only'),"
      " current_setting('synchronous_commit'), current_setting('plan_cache_mode'),"
      " current_setting('enable_seqscan')";
  for (bool prefetch : {false, true}) {
    TxOptions options;
    options.isolation = Isolation::kSerializable;
    options.read_only = true;
    options.durable_commit = false;
    options.generic_plans = true;
    options.keyed_access = true;
    std::vector<std::string> seen;
    Status st = pool->Transact(options, "options", [&](Tx& tx) -> Status {
      if (prefetch) tx.Prefetch({{settings, {}}});
      QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(settings));
      for (int c = 0; c < 5; ++c) seen.push_back(rows.Text(0, c));
      // Read only: a write is refused.
      Status write = tx.Exec("UPDATE public.kv SET v = 1 WHERE k = 1").status();
      EXPECT_EQ(write.reason(), "database_read_only") << write.ToString();
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(seen, (std::vector<std::string>{"serializable", "on", "off", "force_generic_plan",
                                              "off"}))
        << prefetch;
  }
  // The defaults, and nothing is left over from the transaction before.
  std::vector<std::string> seen;
  Status st = pool->Transact({}, "defaults", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(settings));
    for (int c = 0; c < 5; ++c) seen.push_back(rows.Text(0, c));
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  // (synchronous_commit is left out: the test server turns it off for everything.)
  ASSERT_EQ(seen.size(), 5u);
  seen.erase(seen.begin() + 2);
  EXPECT_EQ(seen, (std::vector<std::string>{"read committed", "off", "auto", "on"}));
  // A body without statements: nothing to commit, and the connection is reused as it was.
  EXPECT_TRUE(pool->Transact({}, "empty", [](Tx&) { return Status::Ok(); }).ok());
  st = pool->Transact({}, "after", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec("SELECT now() = statement_timestamp()"));
    EXPECT_FALSE(rows.Bool(0, 0));  // a transaction block: now() is its start, not the statement's
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
}

// Prefetched statements run at once, in one round trip: their answers are kept and served to
// the Exec calls that ask for them, in order, even after the backend is gone.
TEST_F(PgClientTest, PrefetchedStatementsRunAtOnceAndAreAnsweredInOrder) {
  auto pool = MakePool(1);
  const std::string update = "UPDATE public.kv SET v = v + $2 WHERE k = $1";
  const std::string select = "SELECT v FROM public.kv WHERE k = $1";
  Status st = pool->Transact({}, "prefetch", [&](Tx& tx) -> Status {
    tx.Prefetch({{update, {P(1), P(5)}}, {select, {P(1)}}, {update, {P(2), P(7)}}});
    Result<std::string> killed = PgTestCluster::Get().server().Psql(
        db_, "SELECT pg_terminate_backend(" + std::to_string(tx.connection().BackendPid()) + ")");
    EXPECT_TRUE(killed.ok());
    Result<Rows> updated = tx.Exec(update, {P(1), P(5)});
    EXPECT_TRUE(updated.ok()) << updated.status().ToString();
    if (updated.ok()) EXPECT_EQ(updated->affected(), 1);
    Result<Rows> read = tx.Exec(select, {P(1)});
    EXPECT_TRUE(read.ok()) << read.status().ToString();
    if (read.ok()) EXPECT_EQ(read->Int(0, 0), 5);  // the update before it was applied first
    // Not what was kept next: it goes to the server, which is gone.
    return tx.Exec(select, {P(2)}).status();
  });
  EXPECT_EQ(st.reason(), "database_unavailable") << st.ToString();
}

TEST_F(PgClientTest, APrefetchNeverAnswersAnotherStatementOrTransaction) {
  auto pool = MakePool(1);
  const std::string select = "SELECT v FROM public.kv WHERE k = $1";
  // Asked out of order: what was kept is dropped, both run normally.
  Status st = pool->Transact({}, "out of order", [&](Tx& tx) -> Status {
    tx.Prefetch({{select, {P(1)}}, {"UPDATE public.kv SET v = 3 WHERE k = 2", {}}});
    QL_ASSIGN_OR_RETURN(Rows two, tx.Exec(select, {P(2)}));
    EXPECT_EQ(two.Int(0, 0), 3);  // the prefetched update ran, in order, before this read
    QL_ASSIGN_OR_RETURN(Rows one, tx.Exec(select, {P(1)}));
    EXPECT_EQ(one.Int(0, 0), 0);
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  // A read kept but never asked for is not the answer of the next transaction's read.
  st = pool->Transact({}, "unused", [&](Tx& tx) -> Status {
    tx.Prefetch({{select, {P(2)}}});
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = pool->Transact({}, "fresh", [&](Tx& tx) -> Status {
    QL_RETURN_IF_ERROR(tx.Exec("UPDATE public.kv SET v = 9 WHERE k = 2").status());
    QL_ASSIGN_OR_RETURN(Rows two, tx.Exec(select, {P(2)}));
    EXPECT_EQ(two.Int(0, 0), 9);
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  // A failed statement is reported as itself, and the statements after it never ran.
  std::string direct;
  st = pool->Transact({}, "direct", [&](Tx& tx) -> Status {
    direct = tx.Exec("SELECT 1 / (v - v) FROM public.kv WHERE k = $1", {P(1)}).status().reason();
    return Status::Ok();
  });
  ASSERT_FALSE(direct.empty());
  for (bool ask_for_it : {true, false}) {
    st = pool->Transact({}, "failing", [&](Tx& tx) -> Status {
      tx.Prefetch({{"SELECT 1 / (v - v) FROM public.kv WHERE k = $1", {P(1)}},
                   {"UPDATE public.kv SET v = 100 WHERE k = 1", {}}});
      if (ask_for_it) {
        return tx.Exec("SELECT 1 / (v - v) FROM public.kv WHERE k = $1", {P(1)}).status();
      }
      return tx.Exec("SELECT 2").status();  // something else: the kept failure is the answer
    });
    EXPECT_EQ(st.reason(), direct) << ask_for_it << " " << st.ToString();
  }
  st = pool->Transact({}, "check", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(Rows one, tx.Exec(select, {P(1)}));
    EXPECT_EQ(one.Int(0, 0), 0);
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
}

TEST_F(PgClientTest, UnreachableServerIsUnavailableWithoutTheUrl) {
  PoolOptions options;
  options.url = "postgresql://u:s3cret@127.0.0.1:1/q?sslmode=disable";
  options.min_connections = 1;
  Result<std::unique_ptr<Pool>> pool = Pool::Create(options);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().reason(), "database_unavailable");
  EXPECT_EQ(pool.status().message().find("s3cret"), std::string::npos);
}

TEST_F(PgClientTest, PoolBoundsAreValidated) {
  PoolOptions options;
  options.url = url_;
  options.min_connections = 5;
  options.max_connections = 2;
  EXPECT_EQ(Pool::Create(options).status().reason(), "invalid_pool_options");
  options.min_connections = 0;
  options.max_connections = 0;
  EXPECT_EQ(Pool::Create(options).status().reason(), "invalid_pool_options");
  options.max_connections = 2;
  options.acquire_timeout_ms = 0;
  EXPECT_EQ(Pool::Create(options).status().reason(), "invalid_pool_options");
}

}  // namespace
}  // namespace ql::pg
