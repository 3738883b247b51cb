#pragma once

// The files of an attempt directory, shared by the daemon side (Supervision) and the supervisor.
// Every file is replaced atomically (temp file, rename), so a reader sees either nothing or a
// complete record; result.json is also fsynced.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/status.h"
#include "ql/exec/executor.h"
#include "ql/exec/process_identity.h"

namespace ql::exec::internal {

inline constexpr std::string_view kSpecFile = "spec.json";
inline constexpr std::string_view kSupervisorFile = "supervisor.json";
inline constexpr std::string_view kResultFile = "result.json";
// Created the moment output starts being discarded; holds the cap in bytes.
inline constexpr std::string_view kTruncatedFile = "truncated";

// The supervisor inherits the write end of Launch's start pipe as this descriptor, named in its
// environment, and closes it once supervisor.json (or result.json) is written.
inline constexpr int kReadyFd = 3;
inline constexpr std::string_view kReadyFdVariable = "QL_SUPERVISOR_READY_FD";

// When this variable is "1" the supervisor's stdin is an anonymous memory file holding the
// attempt's secrets (EncodeSecrets); it reads them before anything else and puts /dev/null in
// their place.
inline constexpr std::string_view kSecretsOnStdinVariable = "QL_SUPERVISOR_SECRETS_ON_STDIN";
// Bounds the encoded secrets (EncodeSecrets) of one attempt.
inline constexpr size_t kMaxSecretsBytes = 1024 * 1024;

// The parts of a LaunchSpec that never touch a file.
struct AttemptSecrets {
  std::vector<std::pair<std::string, std::string>> environment;
  std::vector<std::string> mask_values;
};

// Written by the supervisor, first with only its own identity, then with the command's.
struct SupervisorRecord {
  ProcessIdentity supervisor;
  std::string boot_id;
  std::optional<ProcessIdentity> command;  // its pid is also its process group id
  int64_t started_at_ms = 0;
};

struct ResultRecord {
  Outcome outcome;
  ProcessIdentity supervisor;
  std::string boot_id;
};

// Returns `dir + "/" + name`.
std::string PathIn(std::string_view dir, std::string_view name);

// Encoders. The spec keeps only the resolved fields: `working_directory` is always set and
// `environment` is the command's final environment. Errors: InvalidArgument `exec_bad_spec` when
// a string is not valid UTF-8.
Result<std::string> EncodeSpec(const LaunchSpec& spec);
std::string EncodeSupervisor(const SupervisorRecord& record);
std::string EncodeResult(const ResultRecord& record);

// Returns the secrets of `spec` in a length-prefixed binary form (values are bytes, not
// necessarily UTF-8), or "" when it has none.
std::string EncodeSecrets(const LaunchSpec& spec);
// Returns EncodeSecrets(spec).size() without encoding.
size_t EncodedSecretsSize(const LaunchSpec& spec);
// Errors: Corrupt `exec_corrupt_record` for anything EncodeSecrets does not write.
Result<AttemptSecrets> DecodeSecrets(std::string_view bytes);

// Decoders; `what` names the file in errors (Corrupt `exec_corrupt_record`).
Result<LaunchSpec> DecodeSpec(std::string_view text, std::string_view what);
Result<SupervisorRecord> DecodeSupervisor(std::string_view text, std::string_view what);
Result<ResultRecord> DecodeResult(std::string_view text, std::string_view what);

// How far a write must get before WriteFileAtomically returns.
enum class Durability {
  // Readers see the old file or the whole new one; a power loss may lose it. Enough for records
  // about running processes, which mean nothing after a reboot (boot id) anyway.
  kAtomic,
  // Also fsynced (file and directory), for outcomes that must survive a power loss.
  kPowerLossSafe,
};

// Replaces `path` atomically with `content` (mode 0600). Errors: Internal `exec_io_error`.
Status WriteFileAtomically(const std::string& path, std::string_view content,
                           Durability durability);

// Returns the contents of `path` (at most `max_bytes`), or nullopt when it does not exist.
// Errors: Internal `exec_io_error`, Corrupt `exec_corrupt_record` when larger than `max_bytes`.
Result<std::optional<std::string>> ReadFileIfExists(const std::string& path, size_t max_bytes);

// Returns true when `path` exists.
bool FileExists(const std::string& path);

// Returns "<what>: <strerror(err)>".
std::string ErrnoMessage(std::string_view what, int err);

}  // namespace ql::exec::internal
