#!/usr/bin/env bash
# The N.E.K.O plugin's Hosted UI (issue 44), for .ci/run:
#   tests/neko_plugin/hosted_ui.sh NEKO_SIDECAR_BIN
# - i18n.py: the eight catalogues, every key in each, every key used;
# - check_tsx.sh: ui/panel.tsx and docs/guide.tsx type-checked against our
#   declaration of @neko/plugin-ui (TypeScript from npm, into a cache
#   folder), and no hard-coded UI string (TypeScript's parser);
# - panel.py: the panel's Python through the SDK double against a running
#   sidecar and the stand-in main_server.
# Needs python3 (3.11+) and node with npm (from .ci/packages, installed
# here through .ci/deps when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: hosted_ui.sh NEKO_SIDECAR_BIN}
.ci/deps python3 node npm
python3 tests/neko_plugin/i18n.py
tests/neko_plugin/check_tsx.sh
python3 tests/neko_plugin/panel.py "$bin"
