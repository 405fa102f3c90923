#!/usr/bin/env bash
# Install Debian's chromium for the report's browser tests (headless page loads and screenshots).
# Idempotent: does nothing when a chromium binary is already there ($NSIGHT_CHROMIUM, chromium,
# chromium-browser). Needs apt-get and root (or sudo); elsewhere it says so and the browser tests
# skip with the same hint.
set -euo pipefail
for candidate in "${NSIGHT_CHROMIUM:-}" chromium chromium-browser; do
  if [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1; then exit 0; fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-chromium: no apt-get here; install Chromium yourself and set NSIGHT_CHROMIUM" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "install-chromium: installing Debian's chromium (once)"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
chromium --version
