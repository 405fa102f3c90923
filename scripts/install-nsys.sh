#!/usr/bin/env bash
# Install the NVIDIA Nsight Systems CLI (2023.4.4, Debian 13 non-free) as ONE tree under PREFIX.
#
# Why this exists: PyPI has no nsys, Debian 12 ships 2022.4.2 whose split host/target layout leaves
# `nsys profile` unable to import its own trace. The Debian 13 packages work on Debian 12 once their
# two trees are put side by side and three links are added. Idempotent: when PREFIX/bin/nsys already
# answers --version, nothing is downloaded.
#
# usage: scripts/install-nsys.sh [PREFIX]   (default: $NSIGHT_NSYS_PREFIX or ~/.local/share/nsight/nsys)
set -euo pipefail
PREFIX=${1:-${NSIGHT_NSYS_PREFIX:-${XDG_DATA_HOME:-$HOME/.local/share}/nsight/nsys}}

if "$PREFIX/bin/nsys" --version >/dev/null 2>&1; then
  echo "nsys already installed: $PREFIX/bin/nsys ($("$PREFIX/bin/nsys" --version))"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
  echo "install-nsys: this installer needs a Debian-based system (apt-get, dpkg)." >&2
  echo "Install Nsight Systems from NVIDIA instead and set NSIGHT_NSYS to its nsys binary." >&2
  exit 2
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The machine's own Debian archive (the first configured apt source whose path ends in /debian), so
# this works wherever apt already works and fetches from nowhere the machine was not told to use.
apt_uris() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:/) {print $i; break}}' "$f"
  done
  return 0
}
URI=$(apt_uris | grep -E '/debian/?$' | head -n 1 || true)
if [ -z "$URI" ]; then
  echo "install-nsys: none of this machine's apt sources is a Debian archive (a URI ending in /debian)." >&2
  echo "Add your Debian mirror to /etc/apt/sources.list.d/, or install Nsight Systems from NVIDIA and" >&2
  echo "set NSIGHT_NSYS to its nsys binary." >&2
  exit 2
fi

echo "install-nsys: downloading nsight-systems 2023.4.4 from $URI (trixie non-free)"
mkdir -p "$WORK/lists/partial"
echo "deb $URI trixie non-free" > "$WORK/sources.list"
APT=(-oDir::Etc::SourceList="$WORK/sources.list" -oDir::Etc::SourceParts=/dev/null
     -oDir::State::Lists="$WORK/lists" -oAPT::Sandbox::User=root -oDebug::NoLocking=1)
apt-get "${APT[@]}" update -qq
(cd "$WORK" && apt-get "${APT[@]}" download -qq nsight-systems-target nsight-systems)
for deb in "$WORK"/*.deb; do dpkg -x "$deb" "$WORK/x"; done

# Build into a sibling folder and move it in place at the end: an interrupted run leaves no half tree.
STAGE="$PREFIX.partial"
rm -rf "$STAGE"; mkdir -p "$STAGE/bin"
cp -a "$WORK/x/usr/lib/nsight-systems/host-linux-x64" "$STAGE/"
cp -a "$WORK/x/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64" "$STAGE/"
# nsys looks for the importer beside its own directory, and `nsys stats` for its python helpers
# under host-linux-x64/python/lib; Debian's libssh link is relative to /usr/lib.
for f in "$STAGE"/target-linux-x64/python/lib/*.py; do
  ln -sf "../../../target-linux-x64/python/lib/$(basename "$f")" "$STAGE/host-linux-x64/python/lib/"
done
ln -sf /usr/lib/x86_64-linux-gnu/libssh.so.4 "$STAGE/host-linux-x64/libssh.so"
ln -sf /usr/lib/x86_64-linux-gnu/libssh.so.4 "$STAGE/host-linux-x64/libssh.so.4"
ln -sf ../target-linux-x64/nsys "$STAGE/bin/nsys"

if ! dpkg -s libssh-4 libpfm4 >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends libssh-4 libpfm4 >/dev/null
fi
rm -rf "$PREFIX"; mkdir -p "$(dirname "$PREFIX")"; mv "$STAGE" "$PREFIX"
echo "nsys installed: $PREFIX/bin/nsys ($("$PREFIX/bin/nsys" --version))"
