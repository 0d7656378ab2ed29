# Sourced by bench/run and bench/report.
# The median of numbers (an even count: the mean of the middle two); empty when one is missing.
median() {
  local n=$#
  printf '%s\n' "$@" | { grep -E '^[0-9.]+$' || true; } | sort -g | awk -v want="$n" '{v[NR] = $1} END {
    if (NR == 0 || NR < want) exit; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
