# shellcheck shell=bash
# Sourced by the scripts that start servers: runs one clean-up function once when the script ends,
# however it ends (its last line, an error under `set -e`, Ctrl-C or SIGTERM).
#   on_exit <function>
# Ctrl-C and SIGTERM end the script (exit 130 and 143), which runs the clean-up. While it runs, further
# SIGINT and SIGTERM are ignored, by the script and by what the clean-up starts: a second Ctrl-C, or
# the same signal sent to the pid and then to its process group, would otherwise end the script in the
# middle of its clean-up and leave a server running.
on_exit() {
  _on_exit_fn="$1"
  trap '_on_exit_run' EXIT
  trap 'trap "" INT TERM; exit 130' INT
  trap 'trap "" INT TERM; exit 143' TERM
}
_on_exit_run() {
  trap '' INT TERM
  "$_on_exit_fn"
}
