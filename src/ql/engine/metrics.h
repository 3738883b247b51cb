#pragma once

// A small in-process metrics registry rendered in the Prometheus text exposition format
// (version 0.0.4). Series are keyed by metric name plus a preformatted label set; no series
// ever carries a per-run label, so the number of series stays bounded by the code that
// reports them.

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ql {

class Metrics {
 public:
  // Upper bounds, in seconds, of a histogram's buckets unless DescribeHistogram gives others
  // (a final +Inf bucket is implied).
  static constexpr double kHistogramBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                 1,     2.5,  5,     10,   30,  60};
  // Upper bounds for histograms that count rows or items (powers of two up to 1024).
  static constexpr double kRowBuckets[] = {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

  // Adds `by` to the counter `name` with `labels` (preformatted, e.g. `outcome="admit"`, or
  // empty). A name or label set that is not valid Prometheus text is not recorded; the sample
  // is counted in ql_metrics_rejected_samples_total instead, so a bad call can never break
  // the exposition. Using a gauge or histogram name as a counter is rejected the same way.
  void Increment(std::string_view name, std::string_view labels = {}, int64_t by = 1);

  // Sets the counter `name` with `labels` to `value`, for a total kept elsewhere (the kernel's
  // CPU time of the process). Rejections as for Increment; a value below the last one, NaN, or
  // labels that Increment already counts are rejected too.
  void SetCounter(std::string_view name, std::string_view labels, double value);

  // Sets the gauge `name` with `labels` to `value`. Rejections as for Increment.
  void SetGauge(std::string_view name, std::string_view labels, double value);

  // Records `value` in the histogram `name`, in the buckets DescribeHistogram gave it, else in
  // kHistogramBuckets (seconds). Rejections as for Increment; NaN values are rejected too.
  void Observe(std::string_view name, double value);

  // Sets the type ("counter", "gauge" or "histogram") and help text of `name`. A described
  // metric is rendered (with zero value for counters without labels and empty histograms)
  // even before its first sample. Describing a name again with another type than its samples
  // already have is rejected like a bad sample; the help text may change.
  void Describe(std::string_view name, std::string_view type, std::string_view help);

  // Describes `name` as a histogram whose buckets have the upper bounds `bounds` (finite and
  // strictly increasing; +Inf is implied). Rejected like a bad sample when the bounds are not
  // so, or when the histogram already holds samples in other buckets.
  void DescribeHistogram(std::string_view name, std::string_view help,
                         std::span<const double> bounds);

  // Returns every metric in the Prometheus text format, families ordered by name and series by
  // label set, each family preceded by its # HELP (when described) and # TYPE lines, followed
  // by ql_metrics_rejected_samples_total.
  std::string RenderPrometheus() const;

 private:
  enum class Type { kUnset, kCounter, kGauge, kHistogram };
  struct Histogram {
    std::vector<double> bounds;     // upper bounds, +Inf implied; set by the first use
    std::vector<uint64_t> buckets;  // per-bucket counts (not cumulative), plus +Inf last
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    Type type = Type::kUnset;
    std::string help;
    std::map<std::string, int64_t, std::less<>> counters;
    std::map<std::string, double, std::less<>> set_counters;  // by SetCounter
    std::map<std::string, double, std::less<>> gauges;
    Histogram histogram;
  };

  // Returns the family for `name` if it may hold samples of `type`; nullptr (and counts a
  // rejection) otherwise. Requires mu_.
  Family* FamilyFor(std::string_view name, std::string_view labels, Type type);
  void RejectLocked();

  mutable std::mutex mu_;
  std::map<std::string, Family, std::less<>> families_;
  int64_t rejected_ = 0;
};

}  // namespace ql
