#!/usr/bin/env bash
# The plugin's Hosted UI TSX (ui/panel.tsx, docs/guide.tsx) type-checked
# against our declaration of `@neko/plugin-ui` (tests/neko_plugin/hosted-ui,
# written from upstream's at 685f1382), with TypeScript from npm installed
# into a cache folder of its own (made once, then npm only checks it).
# Needs node and npm (Debian: nodejs, npm).
set -euo pipefail
cd "$(dirname "$0")/../.."
TS_VERSION=5.6.3
cache="${XDG_CACHE_HOME:-$HOME/.cache}/neko-sidecar/npm-typescript-$TS_VERSION"
if ! command -v npm >/dev/null 2>&1; then
  echo "check_tsx: npm is missing (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
if [ ! -x "$cache/node_modules/.bin/tsc" ]; then
  mkdir -p "$cache"
  npm install --prefix "$cache" --no-audit --no-fund --silent "typescript@$TS_VERSION"
fi
"$cache/node_modules/.bin/tsc" -p tests/neko_plugin/hosted-ui/tsconfig.json
echo "check_tsx: panel.tsx and guide.tsx type-check against @neko/plugin-ui (TypeScript $TS_VERSION)"
node tests/neko_plugin/hosted-ui/no_literals.mjs "$cache/node_modules/typescript" \
  packaging/neko-plugin/neko_sidecar/ui/panel.tsx packaging/neko-plugin/neko_sidecar/docs/guide.tsx
