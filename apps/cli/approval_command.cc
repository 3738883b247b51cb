#include "approval_command.h"

#include <memory>
#include <optional>
#include <string>

#include "client.h"
#include "output.h"

namespace ql::cli {
namespace {

using nlohmann::json;

std::string ApprovalPath(const std::string& id) { return "/api/v1/approvals/" + UrlEncode(id); }

// Prints `answer` as JSON with --json, else as `text`.
int Answer(CommandContext& context, const json& answer, const std::string& text) {
  if (context.json()) {
    context.out() << JsonOutput(answer) << "\n";
  } else {
    context.out() << text;
  }
  return kExitOk;
}

int ApprovalList(const std::optional<std::string>& status, int64_t limit,
                 const std::string& cursor, CommandContext& context) {
  if (limit < 1) return context.Fail(CliError::Usage("invalid_limit", "--limit must be at least 1"));
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  std::vector<std::pair<std::string, std::string>> params;
  if (status) params.emplace_back("status", *status);
  CliResult<Listing> items = ListFrom(**api, "/api/v1/approvals", params, limit, cursor);
  if (!items.ok()) return context.Fail(items.error());
  if (context.json()) {
    context.out() << JsonOutput(items->ToJson()) << "\n";
    return kExitOk;
  }
  Table table({"ID", "STATUS", "TASK", "REV", "REQUESTER", "APPROVER", "EXPIRES"});
  for (const json& r : items->items) {
    table.AddRow({JsonText(r, "id"), JsonText(r, "status"), NameOr(r, "task_name", "task_id"),
                  JsonText(r, "task_revision"), NameOr(r, "requester_name", "requester_id"),
                  JsonText(r, "approver_role"), JsonText(r, "expires_at")});
  }
  table.Print(context.out());
  return kExitOk;
}

std::string ShowText(const json& a) {
  std::string out;
  out += "approval   " + JsonText(a, "id") + "\n";
  out += "status     " + JsonText(a, "status") + "\n";
  // Once approved, `action` is the approved action (an object naming what it is).
  const std::string action = a.value("action", nlohmann::json()).is_object()
                                 ? JsonText(a["action"], "action")
                                 : JsonText(a, "action");
  out += "action     " + action + " of task " + NameOr(a, "task_name", "task_id") + " revision " +
         JsonText(a, "task_revision") + "\n";
  out += "payload    " + JsonText(a, "payload_digest") + "\n";
  out += "requester  " + NameOr(a, "requester_name", "requester_id") + " (binding version " +
         JsonText(a, "requester_binding_version") + ")\n";
  out += "approver   role " + JsonText(a, "approver_role") + "\n";
  out += "created    " + JsonText(a, "created_at") + "\n";
  out += "expires    " + JsonText(a, "expires_at") + "\n";
  const json decision = a.value("decision", json());
  if (decision.is_object()) {
    out += "decision   " + JsonText(decision, "decision") + " by " +
           NameOr(decision, "decided_by_name", "decided_by") + " at " +
           JsonText(decision, "decided_at");
    if (decision.contains("reason") && decision["reason"].is_string()) {
      out += ": " + decision["reason"].get<std::string>();
    }
    out += "\n";
  }
  const json receipt = a.value("receipt", json());
  if (receipt.is_object()) {
    out += "receipt    " + JsonText(receipt, "id") + "\n";
    out += "  decision " + JsonText(receipt, "decision_id") + "\n";
    out += "  action   " + JsonText(receipt, "action_id") + "\n";
    out += "  run      " + JsonText(receipt, "run_id") + "\n";
  }
  return out;
}

int ApprovalShow(const std::string& id, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> approval = (*api)->GetJson(ApprovalPath(id));
  if (!approval.ok()) return context.Fail(approval.error());
  return Answer(context, *approval, ShowText(*approval));
}

int ApprovalApprove(const std::string& id, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> approved = (*api)->PostJson(ApprovalPath(id) + "/approve", json::object());
  if (!approved.ok()) return context.Fail(approved.error());
  const json receipt = approved->value("receipt", json::object());
  return Answer(context, *approved,
                "approved: run " + JsonText(receipt, "run_id") + " (receipt " +
                    JsonText(receipt, "id") + ")\n");
}

int ApprovalReject(const std::string& id, const std::string& reason, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> rejected =
      (*api)->PostJson(ApprovalPath(id) + "/reject", json{{"reason", reason}});
  if (!rejected.ok()) return context.Fail(rejected.error());
  return Answer(context, *rejected, "rejected: " + JsonText(*rejected, "id") + "\n");
}

}  // namespace

void RegisterApprovalCommands(CLI::App& app) {
  AddGlobalOptions(app);
  CLI::App* approval =
      app.add_subcommand("approval", "List, show, approve and reject approval requests");
  approval->require_subcommand(1);
  approval->fallthrough();

  auto status = std::make_shared<std::optional<std::string>>();
  auto limit = std::make_shared<int64_t>(50);
  CLI::App* list = approval->add_subcommand("list", "List approval requests, newest first");
  list->fallthrough();
  list->add_option_function<std::string>(
          "--status", [status](const std::string& v) { *status = v; },
          "Only requests in this state")
      ->check(CLI::IsMember({"pending", "approved", "rejected", "expired"}));
  auto cursor = std::make_shared<std::string>();
  list->add_option("--limit", *limit, "Show at most N requests")->capture_default_str();
  list->add_option("--cursor", *cursor,
                   "Continue a listing where a --json listing's next_cursor says");
  list->callback([list, status, limit, cursor] {
    RunCommand(*list,
               [&](CommandContext& c) { return ApprovalList(*status, *limit, *cursor, c); });
  });

  auto show_id = std::make_shared<std::string>();
  CLI::App* show = approval->add_subcommand("show", "Show a request with its decision and receipt");
  show->fallthrough();
  show->add_option("id", *show_id, "Approval request id")->required();
  show->callback([show, show_id] {
    RunCommand(*show, [&](CommandContext& c) { return ApprovalShow(*show_id, c); });
  });

  auto approve_id = std::make_shared<std::string>();
  CLI::App* approve = approval->add_subcommand(
      "approve", "Approve a request: its run is created at once (not by its requester)");
  approve->fallthrough();
  approve->add_option("id", *approve_id, "Approval request id")->required();
  approve->callback([approve, approve_id] {
    RunCommand(*approve, [&](CommandContext& c) { return ApprovalApprove(*approve_id, c); });
  });

  auto reject_id = std::make_shared<std::string>();
  auto reason = std::make_shared<std::string>();
  CLI::App* reject = approval->add_subcommand("reject", "Reject a request with a reason");
  reject->fallthrough();
  reject->add_option("id", *reject_id, "Approval request id")->required();
  reject->add_option("--reason", *reason, "Why (recorded with the decision)")->required();
  reject->callback([reject, reject_id, reason] {
    RunCommand(*reject, [&](CommandContext& c) { return ApprovalReject(*reject_id, *reason, c); });
  });
}

}  // namespace ql::cli
