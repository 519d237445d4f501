#!/bin/sh
# Runs a command (default: `make e2e`) inside a disruption-guard test window, from any CI
# system or a terminal.
#
#   DISRUPTION_GUARD_SERVER=https://guard.example.com DISRUPTION_GUARD_TOKEN=… \
#   DISRUPTION_GUARD_NAMESPACE=shop SELECTOR=tier=backend ./ci.sh make e2e
#
# `disruption-guard run` opens the window, waits until protection is in effect, runs the
# command, renews the window while it runs, closes it when the command ends (also on failure,
# SIGINT or SIGTERM), prints the window's report and exits with the command's code. The ttl is
# the backstop when the machine dies before the close.
#
# Environment: DISRUPTION_GUARD_SERVER and DISRUPTION_GUARD_TOKEN (or DISRUPTION_GUARD_TOKEN_FILE)
# are required; DISRUPTION_GUARD_NAMESPACE (default: default), SELECTOR (default: every pod of
# the namespace), TTL (default: 30m) and REASON are optional.
set -eu

: "${DISRUPTION_GUARD_SERVER:?set DISRUPTION_GUARD_SERVER to the disruption-guard API URL}"
if [ -z "${DISRUPTION_GUARD_TOKEN:-}" ] && [ -z "${DISRUPTION_GUARD_TOKEN_FILE:-}" ]; then
  echo "ci.sh: set DISRUPTION_GUARD_TOKEN or DISRUPTION_GUARD_TOKEN_FILE" >&2
  exit 78
fi
command -v disruption-guard >/dev/null || {
  echo "ci.sh: disruption-guard is not on PATH" >&2
  exit 127
}

[ "$#" -gt 0 ] || set -- make e2e

set -- --ttl "${TTL:-30m}" --reason "${REASON:-$*}" -- "$@"
if [ -n "${SELECTOR:-}" ]; then
  set -- -l "$SELECTOR" "$@"
fi
exec disruption-guard run "$@"
