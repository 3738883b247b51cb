#include "ql/engine/script_service.h"

namespace ql {
namespace {

std::optional<PolicyFence> PublishFence(const Caller& caller) {
  if (caller.principal_id.empty()) return std::nullopt;
  return PolicyFence{caller.principal_id, RequiredRole(Action::kPublish)};
}

Actor ActorOf(const Caller& caller) { return Actor{caller.principal_id, caller.request_id}; }

}  // namespace

ScriptService::ScriptService(Store& store, GovernanceService& governance, Clock& clock,
                             ArtifactLimits limits)
    : store_(store), governance_(governance), clock_(clock), limits_(limits) {}

Result<std::string> ScriptService::ProjectFor(const Caller& caller, Action action,
                                              const std::string& target) {
  return governance_.AuthorizedProjectId(caller, action, target);
}

Status ScriptService::MayPublish(const Caller& caller) {
  return ProjectFor(caller, Action::kPublish, "blobs").status();
}

Result<BlobDescriptor> ScriptService::Upload(const Caller& caller, std::string_view bytes) {
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectFor(caller, Action::kPublish, "blobs"));
  BeginUploadCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.fence = PublishFence(caller);
  cmd.project_id = project_id;
  cmd.limits = limits_;
  cmd.now_ms = clock_.NowMs();
  std::unique_ptr<BlobUpload> upload = store_.artifacts().BeginUpload(cmd);
  QL_RETURN_IF_ERROR(upload->Write(bytes));
  return upload->Finish();
}

Result<BlobDescriptor> ScriptService::Compose(const Caller& caller,
                                              const std::vector<std::string>& pieces) {
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectFor(caller, Action::kPublish, "blobs"));
  ComposeBlobCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.fence = PublishFence(caller);
  cmd.project_id = project_id;
  cmd.pieces = pieces;
  cmd.limits = limits_;
  cmd.now_ms = clock_.NowMs();
  return store_.artifacts().ComposeBlob(cmd);
}

Result<BlobDescriptor> ScriptService::Stat(const Caller& caller, const std::string& digest) {
  QL_RETURN_IF_ERROR(ValidateArtifactDigest(digest));
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectFor(caller, Action::kRead, "blob " + digest));
  return store_.artifacts().StatBlob(project_id, digest);
}

Result<std::string> ScriptService::ReadChunk(const Caller& caller, const BlobDescriptor& blob,
                                             size_t index) {
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kRead, "blob " + blob.digest));
  return store_.artifacts().ReadBlobChunk(project_id, blob, index);
}

Result<PushScriptResult> ScriptService::Push(const Caller& caller, const std::string& name,
                                             const ScriptPush& push) {
  QL_RETURN_IF_ERROR(ValidateScriptName(name));
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kPublish, "script " + name));
  PushScriptCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.fence = PublishFence(caller);
  cmd.project_id = project_id;
  cmd.name = name;
  cmd.kind = push.kind;
  cmd.files = push.files;
  cmd.entry = push.entry;
  cmd.expected_latest = push.expected_latest;
  cmd.limits = limits_;
  cmd.now_ms = clock_.NowMs();
  return store_.artifacts().PushScript(cmd);
}

Result<std::vector<ScriptRecord>> ScriptService::List(const Caller& caller) {
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectFor(caller, Action::kRead, "scripts"));
  return store_.artifacts().ListScripts(project_id);
}

Result<std::pair<ScriptRecord, ScriptVersionRecord>> ScriptService::Get(
    const Caller& caller, const std::string& name, std::optional<int64_t> version) {
  QL_RETURN_IF_ERROR(ValidateScriptName(name));
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectFor(caller, Action::kRead, "script " + name));
  QL_ASSIGN_OR_RETURN(ScriptRecord head, store_.artifacts().GetScript(project_id, name));
  QL_ASSIGN_OR_RETURN(ScriptVersionRecord found,
                      store_.artifacts().GetScriptVersion(project_id, name, version));
  return std::make_pair(std::move(head), std::move(found));
}

Result<std::vector<ScriptVersionRecord>> ScriptService::History(const Caller& caller,
                                                                const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateScriptName(name));
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectFor(caller, Action::kRead, "script " + name));
  return store_.artifacts().ListScriptVersions(project_id, name);
}

Result<ScriptRecord> ScriptService::Remove(const Caller& caller, const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateScriptName(name));
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kPublish, "script " + name));
  DeleteScriptCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.fence = PublishFence(caller);
  cmd.project_id = project_id;
  cmd.name = name;
  cmd.now_ms = clock_.NowMs();
  return store_.artifacts().DeleteScript(cmd);
}

}  // namespace ql
