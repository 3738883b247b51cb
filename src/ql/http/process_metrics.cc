#include "ql/http/process_metrics.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace ql {
namespace {

Status Unreadable(const std::string& what) {
  return Unavailable("proc_unreadable", "cannot read " + what + " of this process");
}

std::optional<std::string> ReadText(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<double> ParseNumber(std::string_view text) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Splits /proc text into its space- or newline-separated fields.
std::vector<std::string_view> Words(std::string_view text) {
  std::vector<std::string_view> words;
  for (size_t start = text.find_first_not_of(" \n"); start != std::string_view::npos;) {
    const size_t end = std::min(text.find_first_of(" \n", start), text.size());
    words.push_back(text.substr(start, end - start));
    start = text.find_first_not_of(" \n", end);
  }
  return words;
}

// The boot time, seconds since the epoch: the `btime` line of /proc/stat.
std::optional<double> BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("btime ", 0) == 0) return ParseNumber(std::string_view(line).substr(6));
  }
  return std::nullopt;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

Result<ProcessSample> ReadProcessSample() {
  ProcessSample sample;
  const long page = ::sysconf(_SC_PAGESIZE);
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (page <= 0 || ticks <= 0) return Unreadable("the page size or clock tick");

  const std::string statm = ReadText("/proc/self/statm").value_or("");
  const std::vector<std::string_view> pages = Words(statm);
  const std::optional<double> resident = pages.size() >= 2 ? ParseNumber(pages[1]) : std::nullopt;
  if (!resident) return Unreadable("/proc/self/statm");
  sample.resident_bytes = static_cast<int64_t>(*resident) * page;

  // The command name (field 2) is in parentheses and may hold spaces; fields are counted
  // after its closing parenthesis: state is field 3, utime 14, stime 15, starttime 22.
  const std::optional<std::string> stat = ReadText("/proc/self/stat");
  const size_t close = stat ? stat->rfind(')') : std::string::npos;
  if (close == std::string::npos) return Unreadable("/proc/self/stat");
  const std::vector<std::string_view> fields = Words(std::string_view(*stat).substr(close + 1));
  auto field = [&fields](size_t number) {
    return fields.size() > number - 3 ? ParseNumber(fields[number - 3]) : std::nullopt;
  };
  const std::optional<double> utime = field(14), stime = field(15), start = field(22);
  const std::optional<double> boot = BootTimeSeconds();
  if (!utime || !stime || !start) return Unreadable("/proc/self/stat");
  if (!boot) return Unreadable("the boot time (/proc/stat)");
  sample.cpu_seconds = (*utime + *stime) / static_cast<double>(ticks);
  sample.start_time_seconds = *boot + *start / static_cast<double>(ticks);

  std::error_code error;
  std::filesystem::directory_iterator fds("/proc/self/fd", error);
  if (error) return Unreadable("/proc/self/fd");
  for (const std::filesystem::directory_entry& entry : fds) {
    (void)entry;
    ++sample.open_fds;
  }
  // The listing itself holds one descriptor while it runs.
  if (sample.open_fds > 0) --sample.open_fds;
  return sample;
}

void DescribeProcessMetrics(Metrics& metrics, std::string_view version) {
  metrics.Describe("ql_build_info", "gauge", "Always 1; the version label names the build.");
  metrics.SetGauge("ql_build_info", "version=\"" + EscapeLabelValue(version) + "\"", 1);
  metrics.Describe("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  metrics.Describe("process_cpu_seconds_total", "counter",
                   "User and system CPU time spent, in seconds.");
  metrics.Describe("process_open_fds", "gauge", "Open file descriptors.");
  metrics.Describe("process_start_time_seconds", "gauge",
                   "Start time of the process since the Unix epoch, in seconds.");
}

Status RecordProcessMetrics(Metrics& metrics) {
  QL_ASSIGN_OR_RETURN(ProcessSample sample, ReadProcessSample());
  metrics.SetGauge("process_resident_memory_bytes", "", static_cast<double>(sample.resident_bytes));
  metrics.SetCounter("process_cpu_seconds_total", "", sample.cpu_seconds);
  metrics.SetGauge("process_open_fds", "", static_cast<double>(sample.open_fds));
  metrics.SetGauge("process_start_time_seconds", "", sample.start_time_seconds);
  return Status();
}

}  // namespace ql
