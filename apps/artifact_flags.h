#pragma once

// The script library's limits, shared by ql-local and ql-cluster (README "Scripts").

#include <CLI/CLI.hpp>
#include <cstdint>

#include "ql/core/artifact_store.h"

namespace ql {

struct ArtifactFlags {
  int64_t max_blob_mib = ArtifactLimits{}.max_blob_bytes >> 20;
  int64_t project_quota_mib = ArtifactLimits{}.max_project_bytes >> 20;
};

// Adds --script-max-file-mib and --script-project-quota-mib to `command`, filling `flags`.
// CLI11 refuses a value out of range with a usage error naming the flag.
inline void AddArtifactFlags(CLI::App& command, ArtifactFlags& flags) {
  command
      .add_option("--script-max-file-mib", flags.max_blob_mib,
                  "Largest file (or tree manifest) a script version may hold, MiB, 1..65536 "
                  "(default 256; above it: artifact_too_large)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  command
      .add_option("--script-project-quota-mib", flags.project_quota_mib,
                  "Distinct bytes of scripts and uploads one project may hold, MiB, "
                  "1..16777216 (default 2048; above it: artifact_project_quota)")
      ->check(CLI::Range(int64_t{1}, int64_t{16777216}));
}

inline ArtifactLimits ArtifactLimitsOf(const ArtifactFlags& flags) {
  ArtifactLimits limits;
  limits.max_blob_bytes = flags.max_blob_mib << 20;
  limits.max_project_bytes = flags.project_quota_mib << 20;
  return limits;
}

}  // namespace ql
