#include "ql/engine/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>

namespace ql {
namespace {

constexpr std::string_view kRejectedName = "ql_metrics_rejected_samples_total";

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

bool ValidMetricName(std::string_view name) {
  if (name.empty() || !IsNameStart(name[0])) return false;
  for (char c : name) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

// Accepts `k="v"(,k="v")*` where label names match [a-zA-Z_][a-zA-Z0-9_]* and values use only
// the escapes the format defines (\\, \", \n) and no raw line breaks.
bool ValidLabels(std::string_view labels) {
  if (labels.empty()) return true;
  size_t i = 0;
  while (true) {
    const size_t start = i;
    while (i < labels.size() && IsNameChar(labels[i]) && labels[i] != ':') ++i;
    if (i == start || (labels[start] >= '0' && labels[start] <= '9')) return false;
    if (i + 1 >= labels.size() || labels[i] != '=' || labels[i + 1] != '"') return false;
    i += 2;
    while (true) {
      if (i >= labels.size()) return false;
      const char c = labels[i];
      if (c == '"') break;
      if (c == '\n' || c == '\r') return false;
      if (c == '\\') {
        if (i + 1 >= labels.size()) return false;
        const char e = labels[i + 1];
        if (e != '\\' && e != '"' && e != 'n') return false;
        i += 2;
        continue;
      }
      ++i;
    }
    ++i;  // closing quote
    if (i == labels.size()) return true;
    if (labels[i] != ',') return false;
    ++i;
  }
}

std::string FormatDouble(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return ec == std::errc() ? std::string(buf, end) : std::string("NaN");
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void AppendSeries(std::string& out, std::string_view name, std::string_view labels,
                  std::string_view value) {
  out.append(name);
  if (!labels.empty()) {
    out.push_back('{');
    out.append(labels);
    out.push_back('}');
  }
  out.push_back(' ');
  out.append(value);
  out.push_back('\n');
}

}  // namespace

void Metrics::RejectLocked() { ++rejected_; }

Metrics::Family* Metrics::FamilyFor(std::string_view name, std::string_view labels, Type type) {
  if (!ValidMetricName(name) || !ValidLabels(labels) || name == kRejectedName) {
    RejectLocked();
    return nullptr;
  }
  auto it = families_.find(name);
  if (it == families_.end()) it = families_.emplace(std::string(name), Family{}).first;
  Family& family = it->second;
  if (family.type == Type::kUnset) family.type = type;
  if (family.type != type) {
    RejectLocked();
    return nullptr;
  }
  return &family;
}

void Metrics::Increment(std::string_view name, std::string_view labels, int64_t by) {
  std::lock_guard<std::mutex> lock(mu_);
  Family* family = FamilyFor(name, labels, Type::kCounter);
  if (family == nullptr) return;
  if (by < 0 || family->set_counters.count(labels) > 0) {  // counters never go down
    RejectLocked();
    return;
  }
  auto it = family->counters.find(labels);
  if (it == family->counters.end()) {
    family->counters.emplace(std::string(labels), by);
  } else {
    it->second += by;
  }
}

void Metrics::SetCounter(std::string_view name, std::string_view labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Family* family = FamilyFor(name, labels, Type::kCounter);
  if (family == nullptr) return;
  auto it = family->set_counters.find(labels);
  const bool backwards = it != family->set_counters.end() && value < it->second;
  if (std::isnan(value) || value < 0 || backwards || family->counters.count(labels) > 0) {
    RejectLocked();
    return;
  }
  if (it == family->set_counters.end()) {
    family->set_counters.emplace(std::string(labels), value);
  } else {
    it->second = value;
  }
}

void Metrics::SetGauge(std::string_view name, std::string_view labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Family* family = FamilyFor(name, labels, Type::kGauge);
  if (family == nullptr) return;
  auto it = family->gauges.find(labels);
  if (it == family->gauges.end()) {
    family->gauges.emplace(std::string(labels), value);
  } else {
    it->second = value;
  }
}

void Metrics::Observe(std::string_view name, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::isnan(value)) {
    RejectLocked();
    return;
  }
  Family* family = FamilyFor(name, {}, Type::kHistogram);
  if (family == nullptr) return;
  Histogram& h = family->histogram;
  if (h.bounds.empty()) h.bounds.assign(std::begin(kHistogramBuckets), std::end(kHistogramBuckets));
  if (h.buckets.empty()) h.buckets.assign(h.bounds.size() + 1, 0);
  size_t bucket = h.bounds.size();
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    if (value <= h.bounds[i]) {
      bucket = i;
      break;
    }
  }
  ++h.buckets[bucket];
  h.sum += value;
  ++h.count;
}

void Metrics::Describe(std::string_view name, std::string_view type, std::string_view help) {
  Type parsed = Type::kUnset;
  if (type == "counter") {
    parsed = Type::kCounter;
  } else if (type == "gauge") {
    parsed = Type::kGauge;
  } else if (type == "histogram") {
    parsed = Type::kHistogram;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (parsed == Type::kUnset) {
    RejectLocked();
    return;
  }
  Family* family = FamilyFor(name, {}, parsed);
  if (family == nullptr) return;
  family->help = std::string(help);
}

void Metrics::DescribeHistogram(std::string_view name, std::string_view help,
                                std::span<const double> bounds) {
  bool increasing = !bounds.empty();
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) increasing = false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!increasing) {
    RejectLocked();
    return;
  }
  Family* family = FamilyFor(name, {}, Type::kHistogram);
  if (family == nullptr) return;
  Histogram& h = family->histogram;
  const bool same = std::equal(h.bounds.begin(), h.bounds.end(), bounds.begin(), bounds.end());
  if (h.count > 0 && !same) {
    RejectLocked();
    return;
  }
  if (!same) {
    h.bounds.assign(bounds.begin(), bounds.end());
    h.buckets.assign(h.bounds.size() + 1, 0);
  }
  family->help = std::string(help);
}

std::string Metrics::RenderPrometheus() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  auto header = [&out](std::string_view name, const std::string& help, std::string_view type) {
    if (!help.empty()) {
      out.append("# HELP ").append(name).append(" ").append(EscapeHelp(help)).append("\n");
    }
    out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
  };
  for (const auto& [name, family] : families_) {
    switch (family.type) {
      case Type::kUnset:
        break;
      case Type::kCounter:
        header(name, family.help, "counter");
        if (family.counters.empty() && family.set_counters.empty()) {
          AppendSeries(out, name, {}, "0");
        }
        for (const auto& [labels, value] : family.counters) {
          AppendSeries(out, name, labels, std::to_string(value));
        }
        for (const auto& [labels, value] : family.set_counters) {
          AppendSeries(out, name, labels, FormatDouble(value));
        }
        break;
      case Type::kGauge:
        header(name, family.help, "gauge");
        for (const auto& [labels, value] : family.gauges) {
          AppendSeries(out, name, labels, FormatDouble(value));
        }
        break;
      case Type::kHistogram: {
        header(name, family.help, "histogram");
        const Histogram& h = family.histogram;
        const std::span<const double> bounds =
            h.bounds.empty() ? std::span<const double>(kHistogramBuckets) : h.bounds;
        const std::string bucket_name = name + "_bucket";
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= bounds.size(); ++i) {
          if (!h.buckets.empty()) cumulative += h.buckets[i];
          const std::string le = i < bounds.size() ? FormatDouble(bounds[i]) : std::string("+Inf");
          AppendSeries(out, bucket_name, "le=\"" + le + "\"", std::to_string(cumulative));
        }
        AppendSeries(out, name + "_sum", {}, FormatDouble(h.sum));
        AppendSeries(out, name + "_count", {}, std::to_string(h.count));
        break;
      }
    }
  }
  out.append("# HELP ").append(kRejectedName);
  out.append(" Metric samples dropped because their name, labels or type were invalid.\n");
  out.append("# TYPE ").append(kRejectedName).append(" counter\n");
  AppendSeries(out, kRejectedName, {}, std::to_string(rejected_));
  return out;
}

}  // namespace ql
