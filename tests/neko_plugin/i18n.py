#!/usr/bin/env python3
"""The plugin's i18n (packaging/neko-plugin/neko_sidecar/i18n/*.json) and the
inspector page's catalogue, which is the same files embedded in the binary:

- the eight locales of upstream's mcp_adapter (en, zh-CN, zh-TW, ja, ko, es,
  pt, ru) are all there, each a flat JSON object of non-empty strings with
  exactly the keys of en.json, and the same {placeholders} in each string;
- every key the panel, the guide (props.t("...") and the catalogue keys
  the TSX names in its maps), the Python side (tr("...")) and the inspector's
  script (data-i18n and tr("...")) use is in en.json, and every key of
  en.json is used somewhere (no dead strings);
- (that no string a person reads is hard-coded in the TSX is checked with
  TypeScript's own parser: tests/neko_plugin/hosted-ui/no_literals.mjs, run
  by check_tsx.sh).

Usage: tests/neko_plugin/i18n.py   (exit 0: all hold; 1: each problem listed)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "packaging" / "neko-plugin" / "neko_sidecar"
I18N = PLUGIN / "i18n"
LOCALES = ["en", "zh-CN", "zh-TW", "ja", "ko", "es", "pt", "ru"]
TSX = [PLUGIN / "ui" / "panel.tsx", PLUGIN / "docs" / "guide.tsx"]
PYTHON = [PLUGIN / "__init__.py", PLUGIN / "panel.py"]
INSPECTOR = [ROOT / "src" / "admin" / "assets" / "inspector.js", ROOT / "src" / "admin" / "page.rs"]
# Key namespaces: a string literal that starts with one is a catalogue key.
KEY_RE = re.compile(r"""["'`]((?:panel|sidecar|common|mainServer|tools|state|reason|try|servers|phase|calls|files|errors|guide|actions|entries|inspector|log|startError)\.[A-Za-z0-9_.]+)\\?["'`]""")
# Keys the host itself reads: plugin.toml's name and descriptions (upstream
# mcp_adapter's catalogue has them too).
HOST_KEYS = {"plugin.name", "plugin.description", "plugin.short_description"}
PLACEHOLDER_RE = re.compile(r"\{\s*([A-Za-z_][\w.-]*)\s*\}")


def problems() -> list[str]:
    out: list[str] = []
    catalogues: dict[str, dict] = {}
    for locale in LOCALES:
        path = I18N / f"{locale}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            out.append(f"{path}: cannot read it: {e}")
            continue
        if not isinstance(data, dict):
            out.append(f"{path}: not a JSON object")
            continue
        for k, v in data.items():
            if not isinstance(v, str) or not v.strip():
                out.append(f"{path}: `{k}` is not a non-empty string")
        catalogues[locale] = data
    extra = sorted(p.name for p in I18N.glob("*.json") if p.stem not in LOCALES)
    if extra:
        out.append(f"{I18N}: locales not checked here: {extra}")
    en = catalogues.get("en", {})
    for locale, data in catalogues.items():
        missing = sorted(set(en) - set(data))
        unknown = sorted(set(data) - set(en))
        if missing:
            out.append(f"i18n/{locale}.json lacks {len(missing)} keys of en.json: {missing}")
        if unknown:
            out.append(f"i18n/{locale}.json has keys en.json lacks: {unknown}")
        for k in set(en) & set(data):
            want = sorted(set(PLACEHOLDER_RE.findall(en[k])))
            got = sorted(set(PLACEHOLDER_RE.findall(str(data[k]))))
            if want != got:
                out.append(f"i18n/{locale}.json `{k}`: placeholders {got}, en.json has {want}")

    used: set[str] = set(HOST_KEYS)
    for path in TSX + PYTHON + INSPECTOR:
        text = path.read_text(encoding="utf-8")
        for key in KEY_RE.findall(text):
            used.add(key)
            if key not in en:
                out.append(f"{path.relative_to(ROOT)}: key `{key}` is not in i18n/en.json")
    for key in sorted(set(en) - used):
        out.append(f"i18n/en.json: `{key}` is used nowhere")

    return out


def main() -> int:
    found = problems()
    for p in found:
        print(f"i18n: {p}", file=sys.stderr)
    if found:
        return 1
    print(f"i18n: {len(LOCALES)} locales, every key in each, every key used and known")
    return 0


if __name__ == "__main__":
    sys.exit(main())
