# shellcheck shell=bash
# Sourced by bench/run and bench/report.
# A wrk latency ("850.00us", "5.41ms", "1.02s", "1.50m") in milliseconds; nothing for anything else.
ms_of() { awk -v v="$1" 'BEGIN{ if (v ~ /us$/) {sub(/us$/,"",v); printf "%.2f", v/1000}
  else if (v ~ /ms$/) {sub(/ms$/,"",v); printf "%.2f", v}
  else if (v ~ /m$/) {sub(/m$/,"",v); printf "%.2f", v*60000}
  else if (v ~ /s$/) {sub(/s$/,"",v); printf "%.2f", v*1000} }'; }
