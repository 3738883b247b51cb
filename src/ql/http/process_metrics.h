#pragma once

// Process and build metrics of a serving daemon, in the names Prometheus client libraries use
// (process_*), read from /proc at the moment /metrics is scraped.

#include <cstdint>
#include <string_view>

#include "ql/core/status.h"
#include "ql/engine/metrics.h"

namespace ql {

// What the kernel says about this process at one moment.
struct ProcessSample {
  int64_t resident_bytes = 0;     // resident set size
  double cpu_seconds = 0;         // user + system CPU time
  int64_t open_fds = 0;           // open file descriptors
  double start_time_seconds = 0;  // when the process started, seconds since the Unix epoch
};

// Reads /proc/self/statm, /proc/self/stat, /proc/self/fd and the boot time in /proc/stat.
// Unavailable `proc_unreadable` when one cannot be read or parsed (no /proc: not Linux).
Result<ProcessSample> ReadProcessSample();

// Describes process_resident_memory_bytes, process_cpu_seconds_total, process_open_fds and
// process_start_time_seconds, and sets ql_build_info{version="<version>"} to 1.
void DescribeProcessMetrics(Metrics& metrics, std::string_view version);

// Records a fresh ReadProcessSample() in the process_* metrics. On error it records nothing
// (the metrics keep their last values) and returns the error.
Status RecordProcessMetrics(Metrics& metrics);

}  // namespace ql
