#!/usr/bin/env bash
# Install Debian's chromium-headless-shell for the report's browser tests (headless page loads and
# screenshots): Chromium's headless-only build, a smaller package than the browser that loads a page in
# about a third of the browser's CPU time. Idempotent: does nothing when it is there or $NSIGHT_CHROMIUM
# names a binary. Needs apt-get and root (or sudo); elsewhere it says so, and the tests use a full
# chromium when there is one, or skip with the same hint.
set -euo pipefail
for candidate in "${NSIGHT_CHROMIUM:-}" chromium-headless-shell; do
  if [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1; then exit 0; fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-chromium: no apt-get here; install Chromium yourself and set NSIGHT_CHROMIUM" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "install-chromium: installing Debian's chromium-headless-shell (once)"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium-headless-shell \
  fonts-dejavu-core >/dev/null
chromium-headless-shell --version
