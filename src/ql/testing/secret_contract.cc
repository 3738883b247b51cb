// The secrets part of the repository contract (DESIGN §10): append-only sealed versions,
// resolution of current and pinned versions, the policy fence and the audit of every write,
// crypto-shredding with a tombstone, and the compare-and-set of a rotation. Runs on every store
// through RepositoryContractTest. Sealed material is opaque to a store, so these tests use
// recognisable texts instead of real ciphertext.

#include <string>
#include <vector>

#include "ql/core/secret_store.h"
#include "ql/core/store_commands.h"
#include "ql/testing/repository_contract.h"

namespace ql::testing {

namespace internal {
bool LinkSecretContract() { return true; }
}  // namespace internal

namespace {

#define QL_EXPECT_ERROR(expr, want_code, want_reason)                              \
  do {                                                                             \
    const ::ql::Status ql_st_ = (expr);                                            \
    EXPECT_EQ(ql_st_.code(), want_code) << ql_st_.ToString();                      \
    EXPECT_EQ(ql_st_.reason(), want_reason) << ql_st_.ToString();                  \
  } while (0)

// Recognisable sealed material of one version: any leak of it into an audit fact shows.
SealedSecretValue Sealed(const std::string& tag, const std::string& key_id = "file:00000001") {
  return SealedSecretValue{key_id, Base64UrlEncode("wrapped-" + tag),
                           Base64UrlEncode("sealed-value-" + tag)};
}

}  // namespace

Result<SecretVersionRecord> SecretContract::Put(const PrincipalRecord& actor,
                                                const std::string& name, int64_t version,
                                                const std::string& tag) {
  PutSecretCommand cmd;
  cmd.actor = Actor{actor.id, "req-put-" + name};
  cmd.fence = PolicyFence{actor.id, Role::kAdmin};
  cmd.project_id = project().id;
  cmd.name = name;
  cmd.version = version;
  cmd.sealed = Sealed(tag);
  cmd.now_ms = Now();
  clock().Advance(1);
  return secrets().PutSecret(cmd);
}

Result<SecretRecord> SecretContract::Delete(const PrincipalRecord& actor,
                                            const std::string& name) {
  DeleteSecretCommand cmd;
  cmd.actor = Actor{actor.id, "req-rm-" + name};
  cmd.fence = PolicyFence{actor.id, Role::kAdmin};
  cmd.project_id = project().id;
  cmd.name = name;
  cmd.now_ms = Now();
  clock().Advance(1);
  return secrets().DeleteSecret(cmd);
}

SecretRef SecretContract::Ref(const std::string& name, std::optional<int64_t> version) {
  return SecretRef{project().id, name, version};
}

TEST_P(SecretContract, VersionsAreAppendOnlyAndResolveCurrentOrPinned) {
  const PrincipalRecord owner = Owner();
  ASSERT_TRUE(Put(owner, "API_KEY", 1, "one").ok());
  Result<SecretVersionRecord> second = Put(owner, "API_KEY", 2, "two");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->sealed, Sealed("two"));
  EXPECT_EQ(second->created_by, owner.id);

  Result<SecretVersionRecord> current = secrets().ResolveSecret(Ref("API_KEY"));
  ASSERT_TRUE(current.ok()) << current.status().ToString();
  EXPECT_EQ(current->version, 2);
  EXPECT_EQ(current->sealed, Sealed("two"));
  Result<SecretVersionRecord> pinned = secrets().ResolveSecret(Ref("API_KEY", 1));
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(pinned->sealed, Sealed("one"));
  QL_EXPECT_ERROR(secrets().ResolveSecret(Ref("API_KEY", 3)).status(), StatusCode::kNotFound,
                  "secret_not_found");
  QL_EXPECT_ERROR(secrets().ResolveSecret(Ref("OTHER")).status(), StatusCode::kNotFound,
                  "secret_not_found");

  // A version is sealed for its number: a writer that lost the race must seal again.
  QL_EXPECT_ERROR(Put(owner, "API_KEY", 2, "late").status(), StatusCode::kConflict,
                  "secret_version_conflict");
  QL_EXPECT_ERROR(Put(owner, "API_KEY", 4, "gap").status(), StatusCode::kConflict,
                  "secret_version_conflict");
  QL_EXPECT_ERROR(Put(owner, "NEW", 2, "gap").status(), StatusCode::kConflict,
                  "secret_version_conflict");

  ASSERT_TRUE(Put(owner, "ANOTHER", 1, "a").ok());
  Result<std::vector<SecretRecord>> listed = secrets().ListSecrets(project().id);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].name, "ANOTHER");
  EXPECT_EQ((*listed)[1].name, "API_KEY");
  EXPECT_EQ((*listed)[1].current_version, 2);
  EXPECT_EQ((*listed)[1].status, "active");
  EXPECT_LT((*listed)[1].created_at_ms, (*listed)[1].updated_at_ms);
}

TEST_P(SecretContract, WritesAreFencedToAdminsAndAuditedWithoutMaterial) {
  const PrincipalRecord owner = Owner();
  Result<PrincipalRecord> op = AddPrincipal(owner, "operator");
  ASSERT_TRUE(op.ok()) << op.status().ToString();
  ASSERT_TRUE(Grant(owner, project().id, *op, Role::kOperator).ok());
  QL_EXPECT_ERROR(Put(*op, "TOKEN", 1, "x").status(), StatusCode::kPermissionDenied,
                  "permission_denied");
  QL_EXPECT_ERROR(secrets().GetSecret(project().id, "TOKEN").status(), StatusCode::kNotFound,
                  "secret_not_found");
  ASSERT_TRUE(Put(owner, "TOKEN", 1, "x").ok());
  QL_EXPECT_ERROR(Delete(*op, "TOKEN").status(), StatusCode::kPermissionDenied,
                  "permission_denied");
  ASSERT_TRUE(Delete(owner, "TOKEN").ok());

  // A system write (no fence) still needs an existing project.
  PutSecretCommand orphan;
  orphan.project_id = NewId();
  orphan.name = "X";
  orphan.version = 1;
  orphan.sealed = Sealed("orphan");
  orphan.now_ms = Now();
  QL_EXPECT_ERROR(secrets().PutSecret(orphan).status(), StatusCode::kNotFound,
                  "project_not_found");

  Result<Page<AuditRecord>> audit = gov().ListAudit(PageRequest{std::nullopt, 100});
  ASSERT_TRUE(audit.ok()) << audit.status().ToString();
  std::vector<std::string> actions;
  for (const AuditRecord& fact : audit->items) {
    for (const std::string& field :
         {fact.action, fact.target_kind, fact.target_id, fact.code, fact.request_id}) {
      EXPECT_EQ(field.find(Sealed("x").wrapped_key), std::string::npos) << field;
      EXPECT_EQ(field.find(Sealed("x").sealed_value), std::string::npos) << field;
    }
    if (fact.target_kind != "secret") continue;
    actions.push_back(fact.action);
    EXPECT_EQ(fact.target_id, "TOKEN");
    EXPECT_EQ(fact.project_id, project().id);
    EXPECT_EQ(fact.actor_id, owner.id);
  }
  EXPECT_EQ(actions, (std::vector<std::string>{"secret.delete", "secret.write"}));
}

TEST_P(SecretContract, DeleteShredsEveryVersionAndKeepsATombstone) {
  const PrincipalRecord owner = Owner();
  ASSERT_TRUE(Put(owner, "DB_PASSWORD", 1, "one").ok());
  ASSERT_TRUE(Put(owner, "DB_PASSWORD", 2, "two").ok());
  ASSERT_TRUE(Put(owner, "KEPT", 1, "kept").ok());
  Result<SecretRecord> deleted = Delete(owner, "DB_PASSWORD");
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_EQ(deleted->status, "deleted");
  ASSERT_TRUE(deleted->deleted_at_ms.has_value());

  for (std::optional<int64_t> version : {std::optional<int64_t>(), std::optional<int64_t>(1)}) {
    QL_EXPECT_ERROR(secrets().ResolveSecret(Ref("DB_PASSWORD", version)).status(),
                    StatusCode::kNotFound, "secret_not_found");
  }
  Result<SecretRecord> tombstone = secrets().GetSecret(project().id, "DB_PASSWORD");
  ASSERT_TRUE(tombstone.ok()) << tombstone.status().ToString();
  EXPECT_EQ(*tombstone, *deleted);
  // No wrapped key of the secret is left anywhere: the rotation sees only the other secret.
  Result<std::vector<SecretVersionRecord>> live = secrets().ListLiveVersions(std::nullopt, 100);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ(live->front().name, "KEPT");
  // Deleting a tombstone changes nothing; a missing secret is not found.
  Result<SecretRecord> again = Delete(owner, "DB_PASSWORD");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *deleted);
  QL_EXPECT_ERROR(Delete(owner, "NEVER").status(), StatusCode::kNotFound, "secret_not_found");

  // Setting it again continues the numbering; the shredded versions stay gone.
  Result<SecretVersionRecord> revived = Put(owner, "DB_PASSWORD", 3, "three");
  ASSERT_TRUE(revived.ok()) << revived.status().ToString();
  Result<SecretRecord> head = secrets().GetSecret(project().id, "DB_PASSWORD");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->status, "active");
  EXPECT_FALSE(head->deleted_at_ms.has_value());
  EXPECT_TRUE(secrets().ResolveSecret(Ref("DB_PASSWORD")).ok());
  QL_EXPECT_ERROR(secrets().ResolveSecret(Ref("DB_PASSWORD", 2)).status(), StatusCode::kNotFound,
                  "secret_not_found");
}

TEST_P(SecretContract, RotationReplacesWrappedKeysByCompareAndSet) {
  const PrincipalRecord owner = Owner();
  ASSERT_TRUE(Put(owner, "A", 1, "a1").ok());
  ASSERT_TRUE(Put(owner, "A", 2, "a2").ok());
  ASSERT_TRUE(Put(owner, "B", 1, "b1").ok());

  // Keyset pages in (project, name, version) order.
  std::vector<std::string> walked;
  std::optional<SecretVersionKey> after;
  while (true) {
    Result<std::vector<SecretVersionRecord>> page = secrets().ListLiveVersions(after, 1);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    if (page->empty()) break;
    const SecretVersionRecord& v = page->front();
    walked.push_back(v.name + "@" + std::to_string(v.version));
    after = SecretVersionKey{v.project_id, v.name, v.version};
  }
  EXPECT_EQ(walked, (std::vector<std::string>{"A@1", "A@2", "B@1"}));

  RewrapSecretCommand rewrap;
  rewrap.actor = Actor{"", "rotate"};
  rewrap.version = SecretVersionKey{project().id, "A", 1};
  rewrap.old_key_id = Sealed("a1").key_id;
  rewrap.old_wrapped_key = Sealed("a1").wrapped_key;
  rewrap.new_key_id = "file:00000002";
  rewrap.new_wrapped_key = Base64UrlEncode("rewrapped-a1");
  rewrap.now_ms = Now();
  Status st = secrets().RewrapSecret(rewrap);
  ASSERT_TRUE(st.ok()) << st.ToString();
  Result<SecretVersionRecord> a1 = secrets().ResolveSecret(Ref("A", 1));
  ASSERT_TRUE(a1.ok());
  EXPECT_EQ(a1->sealed.key_id, "file:00000002");
  EXPECT_EQ(a1->sealed.wrapped_key, Base64UrlEncode("rewrapped-a1"));
  EXPECT_EQ(a1->sealed.sealed_value, Sealed("a1").sealed_value);

  // The same rewrap again lost its compare-and-set, and so does one of a shredded version.
  QL_EXPECT_ERROR(secrets().RewrapSecret(rewrap), StatusCode::kConflict, "secret_key_changed");
  ASSERT_TRUE(Delete(owner, "B").ok());
  rewrap.version = SecretVersionKey{project().id, "B", 1};
  rewrap.old_wrapped_key = Sealed("b1").wrapped_key;
  QL_EXPECT_ERROR(secrets().RewrapSecret(rewrap), StatusCode::kConflict, "secret_key_changed");
}

TEST_P(SecretContract, MalformedCommandsAreRefusedBeforeAnyWrite) {
  const PrincipalRecord owner = Owner();
  QL_EXPECT_ERROR(Put(owner, "bad name", 1, "x").status(), StatusCode::kInvalidArgument,
                  "secret_name_invalid");
  QL_EXPECT_ERROR(Put(owner, "OK", 0, "x").status(), StatusCode::kInvalidArgument,
                  "secret_ref_version_invalid");
  PutSecretCommand cmd;
  cmd.fence = PolicyFence{owner.id, Role::kAdmin};
  cmd.project_id = project().id;
  cmd.name = "OK";
  cmd.version = 1;
  cmd.sealed = Sealed("x");
  cmd.sealed.sealed_value = "not base64url!";
  QL_EXPECT_ERROR(secrets().PutSecret(cmd).status(), StatusCode::kInvalidArgument,
                  "secret_sealed_invalid");
  cmd.sealed = Sealed("x");
  cmd.sealed.key_id.clear();
  QL_EXPECT_ERROR(secrets().PutSecret(cmd).status(), StatusCode::kInvalidArgument,
                  "secret_sealed_invalid");
  QL_EXPECT_ERROR(secrets().GetSecret(project().id, "OK").status(), StatusCode::kNotFound,
                  "secret_not_found");
}

}  // namespace ql::testing
