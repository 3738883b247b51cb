// The governance part of the repository contract (DESIGN §9): principals, tokens, projects,
// role bindings, the policy fence of the stores' own writes, and the security audit. Runs on
// every store through RepositoryContractTest.

#include <algorithm>
#include <string>
#include <vector>

#include "ql/core/digest.h"
#include "ql/core/governance.h"
#include "ql/core/governance_ports.h"
#include "ql/testing/repository_contract.h"

namespace ql::testing {

namespace internal {
bool LinkGovernanceContract() { return true; }
}  // namespace internal

namespace {

#define QL_EXPECT_ERROR(expr, want_code, want_reason)             \
  do {                                                            \
    const ::ql::Status ql_st_ = StatusOfAny(expr);                \
    EXPECT_EQ(ql_st_.code(), want_code) << ql_st_.ToString();     \
    EXPECT_EQ(ql_st_.reason(), want_reason) << ql_st_.ToString(); \
  } while (0)

Status StatusOfAny(const Status& status) { return status; }
template <typename T>
Status StatusOfAny(const Result<T>& result) {
  return result.status();
}

}  // namespace

PrincipalRecord GovernanceContract::Owner(const std::string& name) {
  BootstrapCommand cmd;
  cmd.principal_id = NewId();
  cmd.name = name;
  cmd.token_id = NewId();
  cmd.token_digest = Sha256Hex("token-of-" + name);
  cmd.mutation_id = "bootstrap:" + cmd.principal_id;
  cmd.now_ms = Now();
  Result<BootstrapResult> booted = gov().Bootstrap(cmd);
  EXPECT_TRUE(booted.ok()) << booted.status().ToString();
  clock().Advance(1);
  return booted.ok() ? booted->principal : PrincipalRecord{};
}

Result<PrincipalRecord> GovernanceContract::AddPrincipal(const PrincipalRecord& actor,
                                                         const std::string& name) {
  CreatePrincipalCommand cmd;
  cmd.actor = Actor{actor.id, "req-" + name};
  cmd.id = NewId();
  cmd.name = name;
  cmd.now_ms = Now();
  clock().Advance(1);
  return gov().CreatePrincipal(cmd);
}

Result<WriteBindingResult> GovernanceContract::Grant(const PrincipalRecord& actor,
                                                     const std::string& scope,
                                                     const PrincipalRecord& subject, Role role,
                                                     std::string mutation_id) {
  WriteBindingCommand cmd;
  cmd.actor = Actor{actor.id, "req"};
  cmd.scope = scope;
  cmd.subject_id = subject.id;
  cmd.role = std::string(RoleName(role));
  cmd.mutation_id = mutation_id.empty() ? NewId() : mutation_id;
  cmd.now_ms = Now();
  clock().Advance(1);
  return gov().WriteBinding(cmd);
}

Result<TaskRevisionRecord> GovernanceContract::PublishAs(const PrincipalRecord& actor,
                                                         const std::string& name) {
  PublishTaskCommand cmd = TaskCommand(NewId(), std::nullopt, name);
  cmd.fence = PolicyFence{actor.id, Role::kAdmin};
  QL_ASSIGN_OR_RETURN(PublishTaskResult result, store().definitions().PublishTaskRevision(cmd));
  return result.revision;
}

TEST_P(GovernanceContract, BootstrapBindsTheOwnerOnceAndAddsOnlyNewTokens) {
  const PrincipalRecord owner = Owner();
  EXPECT_EQ(owner.name, "owner");
  EXPECT_EQ(owner.status, "active");
  Result<PrincipalRoles> roles = gov().RolesOf(owner.id);
  ASSERT_TRUE(roles.ok()) << roles.status().ToString();
  EXPECT_EQ(roles->installation, Role::kOwner);

  // The same owner again (a restart) with the same token: nothing new.
  BootstrapCommand again;
  again.principal_id = NewId();
  again.token_id = NewId();
  again.token_digest = Sha256Hex("token-of-owner");
  again.mutation_id = "bootstrap:again";
  again.now_ms = Now();
  Result<BootstrapResult> replay = gov().Bootstrap(again);
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  EXPECT_FALSE(replay->bootstrapped);
  EXPECT_FALSE(replay->token_added);
  EXPECT_EQ(replay->principal.id, owner.id);

  // Another name cannot take over an installation that has an owner.
  again.name = "intruder";
  again.token_digest = Sha256Hex("intruder");
  QL_EXPECT_ERROR(gov().Bootstrap(again), StatusCode::kConflict, "already_bootstrapped");
  QL_EXPECT_ERROR(gov().FindPrincipalByName("intruder"), StatusCode::kNotFound,
                  "principal_not_found");
}

TEST_P(GovernanceContract, AuthenticationFindsOnlyLiveTokensOfActivePrincipals) {
  const PrincipalRecord owner = Owner();
  Result<Authentication> auth = gov().Authenticate(Sha256Hex("token-of-owner"), Now());
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  EXPECT_EQ(auth->principal.id, owner.id);
  QL_EXPECT_ERROR(gov().Authenticate(Sha256Hex("nobody"), Now()), StatusCode::kNotFound,
                  "token_unknown");

  Result<PrincipalRecord> bot = AddPrincipal(owner, "bot");
  ASSERT_TRUE(bot.ok()) << bot.status().ToString();
  CreateTokenCommand token;
  token.actor = Actor{owner.id, "r"};
  token.id = NewId();
  token.principal_id = bot->id;
  token.token_digest = Sha256Hex("bot-token");
  token.expires_at_ms = Now() + 60'000;
  token.now_ms = Now();
  ASSERT_TRUE(gov().CreateToken(token).ok());
  EXPECT_TRUE(gov().Authenticate(Sha256Hex("bot-token"), Now()).ok());
  QL_EXPECT_ERROR(gov().Authenticate(Sha256Hex("bot-token"), Now() + 60'000), StatusCode::kConflict,
                  "token_expired");

  Result<PrincipalRecord> disabled =
      gov().SetPrincipalStatus(Actor{owner.id, "r"}, bot->id, "disabled", Now());
  ASSERT_TRUE(disabled.ok()) << disabled.status().ToString();
  EXPECT_EQ(disabled->version, 2);
  QL_EXPECT_ERROR(gov().Authenticate(Sha256Hex("bot-token"), Now()), StatusCode::kConflict,
                  "principal_disabled");
  ASSERT_TRUE(gov().SetPrincipalStatus(Actor{owner.id, "r"}, bot->id, "active", Now()).ok());
  Result<TokenRecord> revoked = gov().RevokeToken(Actor{owner.id, "r"}, token.id, Now());
  ASSERT_TRUE(revoked.ok()) << revoked.status().ToString();
  EXPECT_TRUE(revoked->revoked_at_ms.has_value());
  QL_EXPECT_ERROR(gov().Authenticate(Sha256Hex("bot-token"), Now()), StatusCode::kConflict,
                  "token_revoked");
  // The token list never carries a digest, and shows the revocation.
  Result<std::vector<TokenRecord>> tokens = gov().ListTokens(bot->id);
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->size(), 1u);
  EXPECT_TRUE(tokens->front().revoked_at_ms.has_value());
}

TEST_P(GovernanceContract, PrincipalsNeedAnInstallationAdminAndAUniqueName) {
  const PrincipalRecord owner = Owner();
  Result<PrincipalRecord> alice = AddPrincipal(owner, "alice");
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  QL_EXPECT_ERROR(AddPrincipal(owner, "alice"), StatusCode::kDuplicate, "principal_name_duplicate");
  QL_EXPECT_ERROR(AddPrincipal(owner, "bad name!"), StatusCode::kInvalidArgument,
                  "invalid_principal_name");
  // alice holds no installation role: she may not add principals.
  QL_EXPECT_ERROR(AddPrincipal(*alice, "mallory"), StatusCode::kPermissionDenied,
                  "permission_denied");
  QL_EXPECT_ERROR(gov().FindPrincipalByName("mallory"), StatusCode::kNotFound,
                  "principal_not_found");
  Result<std::vector<PrincipalRecord>> all = gov().ListPrincipals();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "alice");
  EXPECT_EQ((*all)[1].name, "owner");
}

TEST_P(GovernanceContract, BindingsAreAppendOnlyVersionsWithExactReplay) {
  const PrincipalRecord owner = Owner();
  Result<PrincipalRecord> alice = AddPrincipal(owner, "alice");
  ASSERT_TRUE(alice.ok());
  Result<WriteBindingResult> v1 = Grant(owner, project().id, *alice, Role::kViewer, "m-1");
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_EQ(v1->binding.version, 1);
  EXPECT_FALSE(v1->replayed);
  EXPECT_EQ(v1->binding.changed_by, owner.id);

  Result<WriteBindingResult> replay = Grant(owner, project().id, *alice, Role::kViewer, "m-1");
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  EXPECT_TRUE(replay->replayed);
  EXPECT_EQ(replay->binding.version, 1);
  QL_EXPECT_ERROR(Grant(owner, project().id, *alice, Role::kAdmin, "m-1"), StatusCode::kConflict,
                  "mutation_id_reused");

  Result<WriteBindingResult> v2 = Grant(owner, project().id, *alice, Role::kOperator, "m-2");
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(v2->binding.version, 2);
  Result<WriteBindingResult> v3 = Grant(owner, project().id, *alice, Role::kNone, "m-3");
  ASSERT_TRUE(v3.ok());
  EXPECT_EQ(v3->binding.version, 3);
  Result<std::vector<RoleBindingRecord>> current = gov().ListBindings(project().id);
  ASSERT_TRUE(current.ok());
  for (const RoleBindingRecord& b : *current) EXPECT_NE(b.subject_id, alice->id);
  // Each binding change bumps the project's version.
  Result<ProjectRecord> project = store().projects().GetProject(this->project().id);
  ASSERT_TRUE(project.ok());
  EXPECT_EQ(project->version, this->project().version + 3);
}

TEST_P(GovernanceContract, AdminsGrantUpToAdminAndOnlyOwnersTouchOwners) {
  const PrincipalRecord owner = Owner();
  Result<PrincipalRecord> admin = AddPrincipal(owner, "admin1");
  Result<PrincipalRecord> bob = AddPrincipal(owner, "bob");
  Result<PrincipalRecord> viewer = AddPrincipal(owner, "viewer1");
  ASSERT_TRUE(admin.ok() && bob.ok() && viewer.ok());
  ASSERT_TRUE(Grant(owner, project().id, *admin, Role::kAdmin).ok());
  ASSERT_TRUE(Grant(owner, project().id, *viewer, Role::kViewer).ok());

  EXPECT_TRUE(Grant(*admin, project().id, *bob, Role::kAdmin).ok());
  QL_EXPECT_ERROR(Grant(*admin, project().id, *bob, Role::kOwner), StatusCode::kPermissionDenied,
                  "permission_denied");
  QL_EXPECT_ERROR(Grant(*viewer, project().id, *bob, Role::kViewer), StatusCode::kPermissionDenied,
                  "permission_denied");
  // An admin in a project is nothing at the installation.
  QL_EXPECT_ERROR(Grant(*admin, std::string(kInstallationScope), *bob, Role::kAdmin),
                  StatusCode::kPermissionDenied, "permission_denied");
  QL_EXPECT_ERROR(Grant(owner, std::string(kInstallationScope), *bob, Role::kViewer),
                  StatusCode::kInvalidArgument, "invalid_role");
}

TEST_P(GovernanceContract, TheLastOwnerOfAScopeCannotBeRemoved) {
  const PrincipalRecord owner = Owner();
  QL_EXPECT_ERROR(Grant(owner, std::string(kInstallationScope), owner, Role::kAdmin),
                  StatusCode::kConflict, "last_owner");
  QL_EXPECT_ERROR(gov().SetPrincipalStatus(Actor{owner.id, "r"}, owner.id, "disabled", Now()),
                  StatusCode::kConflict, "last_owner");
  Result<PrincipalRecord> second = AddPrincipal(owner, "second");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(Grant(owner, std::string(kInstallationScope), *second, Role::kOwner).ok());
  EXPECT_TRUE(Grant(*second, std::string(kInstallationScope), owner, Role::kNone).ok());
  Result<PrincipalRoles> roles = gov().RolesOf(owner.id);
  ASSERT_TRUE(roles.ok());
  EXPECT_EQ(roles->installation, Role::kNone);
  QL_EXPECT_ERROR(Grant(*second, std::string(kInstallationScope), *second, Role::kNone),
                  StatusCode::kConflict, "last_owner");
}

TEST_P(GovernanceContract, ThePolicyFenceDecidesInsideTheWrite) {
  const PrincipalRecord owner = Owner();
  Result<PrincipalRecord> carol = AddPrincipal(owner, "carol");
  ASSERT_TRUE(carol.ok());

  // No binding: refused, nothing written.
  QL_EXPECT_ERROR(PublishAs(*carol, "denied-task"), StatusCode::kPermissionDenied,
                  "permission_denied");
  ASSERT_TRUE(Grant(owner, project().id, *carol, Role::kViewer).ok());
  QL_EXPECT_ERROR(PublishAs(*carol, "viewer-task"), StatusCode::kPermissionDenied,
                  "permission_denied");
  Result<Page<TaskRevisionRecord>> tasks = store().definitions().ListTasks(project().id, {});
  ASSERT_TRUE(tasks.ok());
  EXPECT_TRUE(tasks->items.empty());

  ASSERT_TRUE(Grant(owner, project().id, *carol, Role::kAdmin).ok());
  Result<TaskRevisionRecord> task = PublishAs(*carol, "admin-task");
  ASSERT_TRUE(task.ok()) << task.status().ToString();

  // An operator may start runs but not publish; a disabled principal may do nothing.
  ASSERT_TRUE(Grant(owner, project().id, *carol, Role::kOperator).ok());
  QL_EXPECT_ERROR(PublishAs(*carol, "operator-task"), StatusCode::kPermissionDenied,
                  "permission_denied");
  Result<NewRun> run = ManualRun(*task);
  ASSERT_TRUE(run.ok());
  run->fence = PolicyFence{carol->id, Role::kOperator};
  Result<RunRecord> created = store().runs().CreateRun(*run);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_TRUE(store()
                  .runs()
                  .RequestCancel(created->id, "stop", "user", Now(),
                                 PolicyFence{carol->id, Role::kOperator})
                  .ok());

  ASSERT_TRUE(gov().SetPrincipalStatus(Actor{owner.id, "r"}, carol->id, "disabled", Now()).ok());
  Result<NewRun> second = ManualRun(*task);
  ASSERT_TRUE(second.ok());
  second->fence = PolicyFence{carol->id, Role::kOperator};
  QL_EXPECT_ERROR(store().runs().CreateRun(*second), StatusCode::kPermissionDenied,
                  "principal_disabled");
  QL_EXPECT_ERROR(store().runs().GetRun(second->run_id), StatusCode::kNotFound, "run_not_found");

  // An installation admin holds admin in every project.
  Result<PrincipalRecord> ops = AddPrincipal(owner, "ops");
  ASSERT_TRUE(ops.ok());
  ASSERT_TRUE(Grant(owner, std::string(kInstallationScope), *ops, Role::kAdmin).ok());
  EXPECT_TRUE(PublishAs(*ops, "installation-admin-task").ok());
}

TEST_P(GovernanceContract, AnArchivedProjectAdmitsNothingAndTakesNoWrites) {
  const PrincipalRecord owner = Owner();
  Result<PrincipalRecord> admin = AddPrincipal(owner, "admin1");
  ASSERT_TRUE(admin.ok());
  ASSERT_TRUE(Grant(owner, project().id, *admin, Role::kAdmin).ok());
  Result<TaskRevisionRecord> task = PublishAs(*admin, "nightly");
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  const std::string trigger_id = NewId();
  ASSERT_TRUE(PublishTrigger(trigger_id, std::nullopt, *task).ok());
  // A decision taken before the archive: the cursor is initialised, the next occurrence is due.
  Result<DueSchedule> uninitialised = DueRow(trigger_id, Now());
  ASSERT_TRUE(uninitialised.ok()) << uninitialised.status().ToString();
  ASSERT_TRUE(store().schedules().ApplyScheduleAdvance(MoveCursor(*uninitialised, Now())).ok());
  Result<DueSchedule> due = DueRow(trigger_id, Now());
  ASSERT_TRUE(due.ok()) << due.status().ToString();
  Result<ScheduleAdvance> decided = Admit(*due, Now() + 60'000);
  ASSERT_TRUE(decided.ok()) << decided.status().ToString();
  Result<NewRun> queued = ManualRun(*task);
  ASSERT_TRUE(queued.ok());
  ASSERT_TRUE(store().runs().CreateRun(*queued).ok());

  // Archiving needs the project's owner.
  QL_EXPECT_ERROR(gov().ArchiveProject(Actor{admin->id, "r"}, project().id, Now()),
                  StatusCode::kPermissionDenied, "permission_denied");
  Result<ProjectRecord> archived = gov().ArchiveProject(Actor{owner.id, "r"}, project().id, Now());
  ASSERT_TRUE(archived.ok()) << archived.status().ToString();
  EXPECT_EQ(archived->status, "archived");
  EXPECT_EQ(archived->version, project().version + 2);  // the grant, then the archive

  QL_EXPECT_ERROR(PublishAs(*admin, "after-archive"), StatusCode::kConflict, "project_archived");
  // The admission decided before the archive commits after it: it re-checks the project in its
  // transaction and writes nothing.
  Result<AdvanceOutcome> admitted = store().schedules().ApplyScheduleAdvance(*decided);
  ASSERT_TRUE(admitted.ok()) << admitted.status().ToString();
  EXPECT_EQ(*admitted, AdvanceOutcome::kRaced);
  RunFilter cron_runs;
  cron_runs.trigger_id = trigger_id;
  Result<Page<RunRecord>> admitted_runs = store().runs().ListRuns(cron_runs, {});
  ASSERT_TRUE(admitted_runs.ok());
  EXPECT_TRUE(admitted_runs->items.empty());
  Result<NewRun> late = ManualRun(*task);
  ASSERT_TRUE(late.ok());
  late->fence = PolicyFence{admin->id, Role::kOperator};
  QL_EXPECT_ERROR(store().runs().CreateRun(*late), StatusCode::kConflict, "project_archived");
  Result<std::vector<DueSchedule>> due_rows =
      store().schedules().ListDueSchedules(Now() + 86'400'000, 10);
  ASSERT_TRUE(due_rows.ok());
  EXPECT_TRUE(due_rows->empty());
  Result<std::vector<RunRecord>> dispatchable =
      store().runs().ListDispatchable("local_process", 10, Now());
  ASSERT_TRUE(dispatchable.ok());
  EXPECT_TRUE(dispatchable->empty());
  // Its queued run can still be cancelled.
  Result<RunRecord> cancelled = store().runs().RequestCancel(
      queued->run_id, "project_archived", "user", Now(), PolicyFence{owner.id, Role::kOperator});
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->status, "cancelled");
}

TEST_P(GovernanceContract, ProjectsAreCreatedByInstallationAdminsWithTheCreatorAsOwner) {
  const PrincipalRecord owner = Owner();
  CreateProjectCommand cmd;
  cmd.actor = Actor{owner.id, "r"};
  cmd.id = NewId();
  cmd.slug = "payments";
  cmd.name = "Payments";
  cmd.now_ms = Now();
  Result<ProjectRecord> created = gov().CreateProject(cmd);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->status, "active");
  Result<std::vector<RoleBindingRecord>> bindings = gov().ListBindings(cmd.id);
  ASSERT_TRUE(bindings.ok());
  ASSERT_EQ(bindings->size(), 1u);
  EXPECT_EQ(bindings->front().role, "owner");
  EXPECT_EQ(bindings->front().subject_id, owner.id);

  cmd.id = NewId();
  QL_EXPECT_ERROR(gov().CreateProject(cmd), StatusCode::kDuplicate, "slug_duplicate");
  cmd.slug = "Bad Slug";
  QL_EXPECT_ERROR(gov().CreateProject(cmd), StatusCode::kInvalidArgument, "invalid_project_slug");
}

TEST_P(GovernanceContract, EveryGovernanceWriteLeavesOneAuditFactNewestFirst) {
  const PrincipalRecord owner = Owner();  // principal.create, binding.grant, token.create
  Result<PrincipalRecord> alice = AddPrincipal(owner, "alice");
  ASSERT_TRUE(alice.ok());
  ASSERT_TRUE(Grant(owner, project().id, *alice, Role::kViewer).ok());
  // A refused write leaves no fact of its own (the API records denials).
  EXPECT_FALSE(AddPrincipal(*alice, "mallory").ok());
  AuditRecord denial;
  denial.id = NewId();
  denial.at_ms = Now();
  denial.actor_id = alice->id;
  denial.action = "permission.denied";
  denial.target_kind = "route";
  denial.target_id = "principals.create";
  denial.outcome = "denied";
  denial.code = "permission_denied";
  denial.request_id = "req-9";
  ASSERT_TRUE(gov().AppendAudit(denial).ok());

  std::vector<AuditRecord> all;
  PageRequest page;
  page.limit = 2;
  for (;;) {
    Result<Page<AuditRecord>> listed = gov().ListAudit(page);
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    all.insert(all.end(), listed->items.begin(), listed->items.end());
    if (!listed->next_key.has_value()) break;
    page.after_key = listed->next_key;
  }
  std::vector<std::string> actions;
  for (const AuditRecord& a : all) actions.push_back(a.action);
  ASSERT_EQ(actions.size(), 6u);
  // The bootstrap's three facts share one millisecond, so only the later ones are ordered.
  EXPECT_EQ(std::vector<std::string>(actions.begin(), actions.begin() + 3),
            (std::vector<std::string>{"permission.denied", "binding.grant", "principal.create"}));
  std::vector<std::string> bootstrap(actions.begin() + 3, actions.end());
  std::sort(bootstrap.begin(), bootstrap.end());
  EXPECT_EQ(bootstrap,
            (std::vector<std::string>{"binding.grant", "principal.create", "token.create"}));
  EXPECT_EQ(all.front().request_id, "req-9");
  EXPECT_EQ(all[1].project_id, project().id);
  AuditRecord bad = denial;
  bad.id = NewId();
  bad.outcome = "maybe";
  QL_EXPECT_ERROR(gov().AppendAudit(bad), StatusCode::kInvalidArgument, "invalid_audit_fact");
}

}  // namespace ql::testing

namespace ql::testing {
namespace {

// A session command for `principal` as a successful sign-in would send it.
SignInCommand SessionFor(const std::string& principal_id, const std::string& session_id,
                         const std::string& secret, int64_t now, bool password_ok) {
  SignInCommand cmd;
  cmd.principal_id = principal_id;
  cmd.password_ok = password_ok;
  cmd.session.id = session_id;
  cmd.session.expires_at_ms = now + 3'600'000;
  cmd.session.idle_timeout_ms = 60'000;
  cmd.session.label = "panel from 127.0.0.1";
  cmd.session_digest = Sha256Hex(secret);
  cmd.lock_after = 3;
  cmd.lock_ms = 60'000;
  cmd.request_id = "sign-in";
  cmd.now_ms = now;
  return cmd;
}

}  // namespace

TEST_P(GovernanceContract, PasswordsSessionsAndLockOut) {
  const PrincipalRecord owner = Owner();
  Result<PrincipalRecord> alice = AddPrincipal(owner, "alice");
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  Result<PrincipalRecord> bob = AddPrincipal(owner, "bob");
  ASSERT_TRUE(bob.ok()) << bob.status().ToString();
  const std::string hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNo";

  // No password yet: nothing to sign in with.
  Result<std::optional<PasswordRecord>> none = gov().GetPassword(alice->id);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  QL_EXPECT_ERROR(gov().RecordSignIn(SessionFor(alice->id, NewId(), "s0", Now(), true)),
                  StatusCode::kNotFound, "principal_not_found");

  // Bob may not set Alice's password; an installation admin (the owner) may, and Alice herself.
  SetPasswordCommand set;
  set.actor = Actor{bob->id, "r"};
  set.principal_id = alice->id;
  set.hash = hash;
  set.must_change = true;
  set.now_ms = Now();
  QL_EXPECT_ERROR(gov().SetPassword(set), StatusCode::kPermissionDenied, "permission_denied");
  set.actor = Actor{owner.id, "r"};
  ASSERT_TRUE(gov().SetPassword(set).ok());
  Result<std::optional<PasswordRecord>> stored = gov().GetPassword(alice->id);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->hash, hash);
  EXPECT_TRUE((*stored)->must_change);

  // A successful sign-in makes a session token that authenticates, idles out and is listed.
  const std::string session_id = NewId();
  Result<TokenRecord> session =
      gov().RecordSignIn(SessionFor(alice->id, session_id, "alice-session", Now(), true));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_EQ(session->kind, "session");
  EXPECT_EQ(session->label, "panel from 127.0.0.1");
  Result<Authentication> auth = gov().Authenticate(Sha256Hex("alice-session"), Now());
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  EXPECT_EQ(auth->principal.id, alice->id);
  EXPECT_EQ(auth->token.kind, "session");
  EXPECT_EQ(auth->token.idle_timeout_ms, 60'000);
  QL_EXPECT_ERROR(gov().Authenticate(Sha256Hex("alice-session"), Now() + 60'000),
                  StatusCode::kConflict, "token_expired");
  ASSERT_TRUE(gov().TouchToken(session_id, Now() + 50'000).ok());
  EXPECT_TRUE(gov().Authenticate(Sha256Hex("alice-session"), Now() + 60'000).ok());

  // Wrong passwords count; the third in a row locks the account, and while locked even the
  // right password fails. Each attempt is an audit fact.
  for (int i = 0; i < 3; ++i) {
    QL_EXPECT_ERROR(gov().RecordSignIn(SessionFor(alice->id, NewId(), "x", Now(), false)),
                    StatusCode::kPermissionDenied, "sign_in_failed");
  }
  stored = gov().GetPassword(alice->id);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  ASSERT_TRUE((*stored)->locked_until_ms.has_value());
  EXPECT_EQ(*(*stored)->locked_until_ms, Now() + 60'000);
  QL_EXPECT_ERROR(gov().RecordSignIn(SessionFor(alice->id, NewId(), "s2", Now(), true)),
                  StatusCode::kPermissionDenied, "sign_in_failed");
  EXPECT_EQ(gov().Authenticate(Sha256Hex("s2"), Now()).status().reason(), "token_unknown");
  // After the lock the right password works again and clears the count.
  Result<TokenRecord> later =
      gov().RecordSignIn(SessionFor(alice->id, NewId(), "alice-later", Now() + 60'000, true));
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  stored = gov().GetPassword(alice->id);
  EXPECT_EQ((*stored)->failed_attempts, 0);
  EXPECT_FALSE((*stored)->locked_until_ms.has_value());
  Result<Page<AuditRecord>> audit = gov().ListAudit(PageRequest{std::nullopt, 200});
  ASSERT_TRUE(audit.ok()) << audit.status().ToString();
  int sign_ins = 0, failures = 0, lockouts = 0;
  for (const AuditRecord& fact : audit->items) {
    if (fact.action == "auth.sign_in" && fact.outcome == "ok") ++sign_ins;
    if (fact.action == "auth.sign_in" && fact.outcome == "failed") ++failures;
    if (fact.action == "auth.lockout") ++lockouts;
  }
  EXPECT_EQ(sign_ins, 2);
  EXPECT_EQ(failures, 4);
  EXPECT_EQ(lockouts, 1);

  // Alice changes her own password from one session: the other sessions end, that one stays.
  set.actor = Actor{alice->id, "r"};
  set.must_change = false;
  set.keep_token_id = later->id;
  set.now_ms = Now() + 60'001;
  ASSERT_TRUE(gov().SetPassword(set).ok());
  EXPECT_EQ(gov().Authenticate(Sha256Hex("alice-session"), Now() + 60'002).status().reason(),
            "token_revoked");
  EXPECT_TRUE(gov().Authenticate(Sha256Hex("alice-later"), Now() + 60'002).ok());
  // A disabled principal cannot sign in.
  ASSERT_TRUE(gov().SetPrincipalStatus(Actor{owner.id, "r"}, alice->id, "disabled", Now()).ok());
  QL_EXPECT_ERROR(gov().RecordSignIn(SessionFor(alice->id, NewId(), "s3", Now() + 60'003, true)),
                  StatusCode::kPermissionDenied, "sign_in_failed");
}

}  // namespace ql::testing

namespace ql::testing {

TEST_P(GovernanceContract, RestrictedSessionsAreLiftedByWhatTheyWaitFor) {
  const PrincipalRecord owner = Owner();
  Result<PrincipalRecord> alice = AddPrincipal(owner, "alice");
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  SetPasswordCommand set;
  set.actor = Actor{owner.id, "r"};
  set.principal_id = alice->id;
  set.hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNo";
  set.must_change = true;
  set.now_ms = Now();
  ASSERT_TRUE(gov().SetPassword(set).ok());

  // The session is stored with its restriction and authentication returns it.
  SignInCommand cmd = SessionFor(alice->id, NewId(), "restricted", Now(), true);
  cmd.session.restriction = std::string(kRestrictPasswordChange);
  Result<TokenRecord> session = gov().RecordSignIn(cmd);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_EQ(session->restriction, "password_change");
  Result<Authentication> auth = gov().Authenticate(Sha256Hex("restricted"), Now());
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  EXPECT_EQ(auth->token.restriction, "password_change");

  // Enabling a second factor does not lift a password_change restriction ...
  SetSecondFactorCommand totp;
  totp.actor = Actor{alice->id, "r"};
  totp.principal_id = alice->id;
  totp.totp_secret = "JBSWY3DPEHPK3PXP";
  totp.totp_enabled = true;
  totp.audit_action = "totp.enable";
  totp.lift_token_id = session->id;
  totp.now_ms = Now();
  ASSERT_TRUE(gov().SetSecondFactor(totp).ok());
  EXPECT_EQ(gov().Authenticate(Sha256Hex("restricted"), Now())->token.restriction,
            "password_change");
  // ... choosing the password from that session does, and the session stays.
  set.actor = Actor{alice->id, "r"};
  set.must_change = false;
  set.keep_token_id = session->id;
  set.now_ms = Now() + 1;
  ASSERT_TRUE(gov().SetPassword(set).ok());
  auth = gov().Authenticate(Sha256Hex("restricted"), Now() + 2);
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  EXPECT_EQ(auth->token.restriction, "");

  // A totp_enrolment restriction goes once a second factor is enabled from that session; a
  // session of another principal named as lift_token_id is not touched.
  SignInCommand enrol = SessionFor(alice->id, NewId(), "enrol", Now() + 3, true);
  enrol.session.restriction = std::string(kRestrictTotpEnrolment);
  enrol.totp_step = 1;
  Result<TokenRecord> enrolling = gov().RecordSignIn(enrol);
  ASSERT_TRUE(enrolling.ok()) << enrolling.status().ToString();
  totp.actor = Actor{owner.id, "r"};
  totp.principal_id = owner.id;
  totp.lift_token_id = enrolling->id;
  QL_EXPECT_ERROR(gov().SetSecondFactor(totp), StatusCode::kNotFound, "password_not_set");
  totp.actor = Actor{alice->id, "r"};
  totp.principal_id = alice->id;
  ASSERT_TRUE(gov().SetSecondFactor(totp).ok());
  EXPECT_EQ(gov().Authenticate(Sha256Hex("enrol"), Now() + 4)->token.restriction, "");
}

TEST_P(GovernanceContract, SettingsNeedAnInstallationAdminAndAreAudited) {
  const PrincipalRecord owner = Owner();
  Result<PrincipalRecord> bob = AddPrincipal(owner, "bob");
  ASSERT_TRUE(bob.ok()) << bob.status().ToString();
  Result<InstallationSettings> settings = gov().GetInstallationSettings();
  ASSERT_TRUE(settings.ok()) << settings.status().ToString();
  EXPECT_EQ(settings->require_second_factor, "off");
  QL_EXPECT_ERROR(gov().SetRequireSecondFactor(Actor{bob->id, "r"}, "everyone", Now()),
                  StatusCode::kPermissionDenied, "permission_denied");
  QL_EXPECT_ERROR(gov().SetRequireSecondFactor(Actor{owner.id, "r"}, "sometimes", Now()),
                  StatusCode::kInvalidArgument, "invalid_setting");
  EXPECT_EQ(gov().GetInstallationSettings()->require_second_factor, "off");
  Result<InstallationSettings> set =
      gov().SetRequireSecondFactor(Actor{owner.id, "r"}, "admins", Now());
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->require_second_factor, "admins");
  EXPECT_EQ(gov().GetInstallationSettings()->require_second_factor, "admins");
  Result<Page<AuditRecord>> audit = gov().ListAudit(PageRequest{std::nullopt, 5});
  ASSERT_TRUE(audit.ok() && !audit->items.empty());
  EXPECT_EQ(audit->items.front().action, "settings.write");
  EXPECT_EQ(audit->items.front().actor_id, owner.id);
  EXPECT_EQ(audit->items.front().code, "require_second_factor=admins");
}

TEST_P(GovernanceContract, TheSetUpCodeSetsTheOwnersFirstPasswordOnce) {
  const PrincipalRecord owner = Owner();
  const std::string hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNo";
  auto setup = [&](const std::string& code, const std::string& secret, int64_t at) {
    SetupCommand cmd;
    cmd.code_digest = Sha256Hex(code);
    cmd.hash = hash;
    cmd.session.id = NewId();
    cmd.session.expires_at_ms = at + 3'600'000;
    cmd.session.idle_timeout_ms = 60'000;
    cmd.session_digest = Sha256Hex(secret);
    cmd.request_id = "setup";
    cmd.now_ms = at;
    return gov().CompleteSetup(cmd);
  };
  // No code issued: nothing works.
  QL_EXPECT_ERROR(setup("CODE", "s0", Now()), StatusCode::kPermissionDenied, "setup_code_invalid");
  ASSERT_TRUE(gov().SetSetupCode(Sha256Hex("CODE"), Now() + 1000, Now()).ok());
  QL_EXPECT_ERROR(setup("WRONG", "s1", Now()), StatusCode::kPermissionDenied, "setup_code_invalid");
  // Expired.
  QL_EXPECT_ERROR(setup("CODE", "s2", Now() + 1000), StatusCode::kPermissionDenied,
                  "setup_code_invalid");
  EXPECT_FALSE(gov().GetPassword(owner.id)->has_value());
  Result<SetupResult> done = setup("CODE", "s3", Now() + 999);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->principal.id, owner.id);
  EXPECT_EQ(done->session.kind, "session");
  EXPECT_TRUE(gov().Authenticate(Sha256Hex("s3"), Now() + 999).ok());
  ASSERT_TRUE(gov().GetPassword(owner.id)->has_value());
  EXPECT_EQ((*gov().GetPassword(owner.id))->hash, hash);
  EXPECT_FALSE(gov().GetInstallationSettings()->setup_code_digest.has_value());
  // Single use: the same code again, or a new code once the owner has a password, fails.
  QL_EXPECT_ERROR(setup("CODE", "s4", Now() + 999), StatusCode::kPermissionDenied,
                  "setup_code_invalid");
  ASSERT_TRUE(gov().SetSetupCode(Sha256Hex("NEXT"), Now() + 5000, Now()).ok());
  QL_EXPECT_ERROR(setup("NEXT", "s5", Now() + 1), StatusCode::kPermissionDenied,
                  "setup_code_invalid");
  EXPECT_EQ(gov().Authenticate(Sha256Hex("s5"), Now() + 1).status().reason(), "token_unknown");
  int failed = 0;
  Result<Page<AuditRecord>> audit = gov().ListAudit(PageRequest{std::nullopt, 200});
  ASSERT_TRUE(audit.ok()) << audit.status().ToString();
  for (const AuditRecord& fact : audit->items) {
    if (fact.action == "auth.setup" && fact.outcome == "failed") ++failed;
  }
  EXPECT_EQ(failed, 5);
}

TEST_P(GovernanceContract, AnOidcSignInFinishesOnceAndInTime) {
  const PrincipalRecord owner = Owner();
  OidcLoginRecord login{
      Sha256Hex("state-1"), "nonce-0123456789abcdef", std::string(64, 'v'), "panel", Now(),
      Now() + 600'000};
  ASSERT_TRUE(gov().BeginOidcLogin(login).ok());
  Result<OidcLoginRecord> taken = gov().TakeOidcLogin(Sha256Hex("state-1"), Now() + 1);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->nonce, login.nonce);
  EXPECT_EQ(taken->code_verifier, login.code_verifier);
  EXPECT_EQ(taken->client, "panel");
  EXPECT_FALSE(taken->cli_port.has_value());
  QL_EXPECT_ERROR(gov().TakeOidcLogin(Sha256Hex("state-1"), Now() + 2),
                  StatusCode::kPermissionDenied, "oidc_state_invalid");
  // One started by ql login keeps where its answer goes.
  OidcLoginRecord cli = login;
  cli.state_digest = Sha256Hex("state-cli");
  cli.client = "cli";
  cli.cli_port = 40123;
  cli.cli_key = std::string(43, 'k');
  ASSERT_TRUE(gov().BeginOidcLogin(cli).ok());
  taken = gov().TakeOidcLogin(Sha256Hex("state-cli"), Now() + 1);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->client, "cli");
  EXPECT_EQ(taken->cli_port, 40123);
  EXPECT_EQ(taken->cli_key, std::string(43, 'k'));
  login.state_digest = Sha256Hex("state-2");
  ASSERT_TRUE(gov().BeginOidcLogin(login).ok());
  QL_EXPECT_ERROR(gov().TakeOidcLogin(Sha256Hex("state-2"), Now() + 600'000),
                  StatusCode::kPermissionDenied, "oidc_state_invalid");
  // A sign-in the provider vouched for: a session for an active principal, refused and audited
  // for a disabled one.
  Result<PrincipalRecord> carol = AddPrincipal(owner, "carol");
  ASSERT_TRUE(carol.ok()) << carol.status().ToString();
  ExternalSignInCommand ext;
  ext.principal_id = carol->id;
  ext.method = "oidc";
  ext.session.id = NewId();
  ext.session.expires_at_ms = Now() + 3'600'000;
  ext.session_digest = Sha256Hex("carol-sso");
  ext.now_ms = Now();
  Result<TokenRecord> session = gov().RecordExternalSignIn(ext);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_EQ(session->kind, "session");
  EXPECT_TRUE(gov().Authenticate(Sha256Hex("carol-sso"), Now()).ok());
  ASSERT_TRUE(gov().SetPrincipalStatus(Actor{owner.id, "r"}, carol->id, "disabled", Now()).ok());
  ext.session.id = NewId();
  ext.session_digest = Sha256Hex("carol-sso-2");
  QL_EXPECT_ERROR(gov().RecordExternalSignIn(ext), StatusCode::kPermissionDenied,
                  "principal_disabled");
  int refused = 0;
  Result<Page<AuditRecord>> audit = gov().ListAudit(PageRequest{std::nullopt, 200});
  ASSERT_TRUE(audit.ok()) << audit.status().ToString();
  for (const AuditRecord& fact : audit->items) {
    if (fact.action == "auth.sign_in" && fact.outcome == "failed" &&
        fact.code == "principal_disabled" && fact.target_id == carol->id) {
      ++refused;
    }
  }
  EXPECT_EQ(refused, 1);
}

TEST_P(GovernanceContract, RemovingAPasswordEndsEverySession) {
  const PrincipalRecord owner = Owner();
  Result<PrincipalRecord> erin = AddPrincipal(owner, "erin");
  ASSERT_TRUE(erin.ok()) << erin.status().ToString();
  Result<PrincipalRecord> bob = AddPrincipal(owner, "bob");
  ASSERT_TRUE(bob.ok()) << bob.status().ToString();
  SetPasswordCommand set;
  set.actor = Actor{owner.id, "r"};
  set.principal_id = erin->id;
  set.hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNo";
  set.now_ms = Now();
  ASSERT_TRUE(gov().SetPassword(set).ok());
  ASSERT_TRUE(gov().RecordSignIn(SessionFor(erin->id, NewId(), "erin-1", Now(), true)).ok());
  QL_EXPECT_ERROR(gov().RemovePassword(Actor{bob->id, "r"}, erin->id, Now()),
                  StatusCode::kPermissionDenied, "permission_denied");
  ASSERT_TRUE(gov().RemovePassword(Actor{owner.id, "r"}, erin->id, Now()).ok());
  EXPECT_FALSE(gov().GetPassword(erin->id)->has_value());
  EXPECT_EQ(gov().Authenticate(Sha256Hex("erin-1"), Now()).status().reason(), "token_revoked");
  QL_EXPECT_ERROR(gov().RemovePassword(Actor{owner.id, "r"}, erin->id, Now()),
                  StatusCode::kNotFound, "password_not_set");
}

TEST_P(GovernanceContract, TakingARoleAwayEndsTheSubjectsSessions) {
  const PrincipalRecord owner = Owner();
  Result<PrincipalRecord> dana = AddPrincipal(owner, "dana");
  ASSERT_TRUE(dana.ok()) << dana.status().ToString();
  ASSERT_TRUE(Grant(owner, std::string(kInstallationScope), *dana, Role::kOwner).ok());
  ExternalSignInCommand ext;
  ext.principal_id = dana->id;
  ext.method = "oidc";
  ext.session.id = NewId();
  ext.session.expires_at_ms = Now() + 3'600'000;
  ext.session_digest = Sha256Hex("dana-session");
  ext.now_ms = Now();
  ASSERT_TRUE(gov().RecordExternalSignIn(ext).ok());
  // Her API token is not a session: it stays.
  CreateTokenCommand token;
  token.actor = Actor{owner.id, "r"};
  token.id = NewId();
  token.principal_id = dana->id;
  token.token_digest = Sha256Hex("dana-api");
  token.now_ms = Now();
  ASSERT_TRUE(gov().CreateToken(token).ok());
  // Lowering owner to admin ends the session.
  EXPECT_TRUE(gov().Authenticate(Sha256Hex("dana-session"), Now()).ok());
  ASSERT_TRUE(Grant(owner, std::string(kInstallationScope), *dana, Role::kAdmin).ok());
  EXPECT_EQ(gov().Authenticate(Sha256Hex("dana-session"), Now()).status().reason(),
            "token_revoked");
  EXPECT_TRUE(gov().Authenticate(Sha256Hex("dana-api"), Now()).ok());
}

}  // namespace ql::testing
