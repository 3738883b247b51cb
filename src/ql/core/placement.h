#pragma once

// Where a remote worker may run a command (DESIGN §6.6, docs/worker-protocol.md "Pools and
// labels"). A worker registers in one pool with labels; a task names the pool its runs need and
// the labels the worker must carry. A pool serves the projects granted to it, or every project
// when it is open (the `default` pool is created open). ql-local runs every task itself and
// reads none of this.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

inline constexpr std::string_view kDefaultPool = "default";
inline constexpr int kMaxPlacementLabels = 16;
inline constexpr int kMaxPoolGrantWeight = 100;
inline constexpr int kMaxPoolRunning = 100000;

struct Placement {
  std::string pool = std::string(kDefaultPool);
  std::map<std::string, std::string> labels;  // every one must be on the worker, equal
  bool is_default() const { return pool == kDefaultPool && labels.empty(); }
  bool operator==(const Placement&) const = default;
};

// A pool name: 1..63 of [a-z0-9_-], starting with a letter or digit. InvalidArgument `reason`
// naming `path` and the value otherwise.
Status ValidatePoolName(std::string_view reason, std::string_view path, std::string_view name);

// A label key: 1..63 of [a-z0-9._/-] starting with a letter or digit; a value: 1..128 of
// [A-Za-z0-9._:/+-]. At most kMaxPlacementLabels. InvalidArgument `reason` naming the path.
Status ValidatePlacementLabel(std::string_view reason, std::string_view path, std::string_view key,
                              std::string_view value);

// Reads a {"key": "value"} object of labels (as above); `path` names it in messages.
Result<std::map<std::string, std::string>> ParsePlacementLabels(std::string_view reason,
                                                                std::string_view path,
                                                                const nlohmann::json& labels);

// Reads a task spec's `placement`: {"pool": "...", "labels": {...}}, both optional; errors are
// InvalidArgument `spec_invalid_placement` (or spec_unknown_field / spec_invalid_type) naming
// the field. {} and {"pool":"default"} are the default placement.
Result<Placement> ParsePlacement(const nlohmann::json& value, std::string_view path);

// {"pool": ..., "labels": {...}} (labels only when there are some).
nlohmann::json PlacementToJson(const Placement& placement);

// Parses "key=value" as `ql-worker --label` and `ql task add --label` take it.
Result<std::pair<std::string, std::string>> ParseLabelAssignment(std::string_view reason,
                                                                 std::string_view text);

// "pool gpu, labels arch=arm64,zone=b" (labels left out when there are none).
std::string DescribePlacement(const Placement& placement);

}  // namespace ql
