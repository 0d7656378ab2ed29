#pragma once
#include <prometheus/metric_family.h>

#include <vector>

namespace changeflow::metrics {
/// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
/// process_open_fds, process_start_time_seconds, process_threads — read from /proc/self.
std::vector<prometheus::MetricFamily> collect_process_metrics();
}  // namespace changeflow::metrics
