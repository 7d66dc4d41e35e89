#!/usr/bin/env bash
# Make the sandbox's kernel confinement available: bubblewrap (bwrap >= 0.8), which the
# strict isolation level requires (df_ray/sandbox). As root it is installed with the
# system's package manager; otherwise this says what to install and exits 0, and the
# sandbox refuses to run generated code at the strict level until it is there.
set -euo pipefail
have_bwrap() {
  command -v bwrap >/dev/null 2>&1 && bwrap --help 2>&1 | grep -q -- "--disable-userns"
}
if have_bwrap; then
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  elif command -v dnf >/dev/null 2>&1; then
    dnf install -y -q bubblewrap
  elif command -v yum >/dev/null 2>&1; then
    yum install -y -q bubblewrap
  elif command -v apk >/dev/null 2>&1; then
    apk add --quiet bubblewrap
  fi
fi
if have_bwrap; then
  echo "sandbox: $(bwrap --version) installed"
else
  echo "sandbox: bubblewrap >= 0.8 is not installed; generated code (HumanEval) will not run" \
       "at the strict isolation level. Install it as root (apt-get install bubblewrap," \
       "dnf install bubblewrap) or set sandbox.isolation: best_effort explicitly." >&2
fi
