#!/usr/bin/env bash
# Refresh the report's vendored JavaScript (nsight_core/render/vendor/) from the npm registry.
#
# Why vendored: the report must draw offline (air-gapped clusters), and producing the bundle at
# render time needed an 84 MB native wheel (vl-convert-python) in every task image. The files are
# package data instead: read once per process, never fetched.
#
# Versions follow the Altair in .venv, so the charts it writes are what the page can draw:
# vega-lite exactly alt.SCHEMA_VERSION, vega and vega-embed the newest release of the majors Altair
# names (alt.VEGA_VERSION, alt.VEGAEMBED_VERSION). Run after upgrading altair in uv.lock, then commit
# the folder. Needs npm (only the registry, no node_modules).
#
# usage: scripts/vendor-vega.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=packages/nsight-core/src/nsight_core/render/vendor
read -r VEGA VEGALITE EMBED < <(.venv/bin/python -c \
  'import altair as alt; print(alt.VEGA_VERSION, alt.SCHEMA_VERSION.lstrip("v"), alt.VEGAEMBED_VERSION)')

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && npm pack --silent "vega@^$VEGA" "vega-lite@$VEGALITE" "vega-embed@^$EMBED" >/dev/null)

rm -rf "$DEST.partial"; mkdir -p "$DEST.partial"
versions="{"
for name in vega vega-lite vega-embed; do
  tarball=$(ls "$WORK/$name"-[0-9]*.tgz)
  mkdir -p "$WORK/$name"
  tar -xzf "$tarball" -C "$WORK/$name"
  package="$WORK/$name/package"
  version=$(node -p "require('$package/package.json').version")
  cp "$package/build/$name.min.js" "$DEST.partial/$name.min.js"
  cp "$package/LICENSE" "$DEST.partial/$name.LICENSE"
  # The bundle is inlined into a <script> element: no text in it may close or comment it out.
  if grep -qiE '</script|<!--' "$DEST.partial/$name.min.js"; then
    echo "vendor-vega: $name $version contains '</script' or '<!--'; it cannot be inlined" >&2
    exit 1
  fi
  versions+="\"$name\": \"$version\", "
done
printf '%s\n' "${versions%, }}" > "$DEST.partial/versions.json"
rm -rf "$DEST"; mv "$DEST.partial" "$DEST"
echo "vendor-vega: $(cat "$DEST/versions.json") -> $DEST"
