//! The inspector page's catalogue: the N.E.K.O plugin's own i18n files
//! (`packaging/neko-plugin/neko_sidecar/i18n/<locale>.json`, the eight
//! locales of upstream's mcp_adapter), embedded in the binary, so the page
//! and the plugin's panel say the same thing in the same words. The page's
//! script picks the browser's language (`navigator.languages`) among
//! [`LOCALES`] and fetches `/i18n/<locale>`; the server renders English,
//! which is also what a page without script shows. What the model reads
//! is never translated: it is the model's contract, not UI.

/// Every locale the page can show, `en` first (the fallback).
pub(crate) const LOCALES: [&str; 8] = ["en", "zh-CN", "zh-TW", "ja", "ko", "es", "pt", "ru"];

macro_rules! catalogue {
    ($locale:literal) => {
        include_str!(concat!(
            "../../packaging/neko-plugin/neko_sidecar/i18n/",
            $locale,
            ".json"
        ))
    };
}

const CATALOGUES: [&str; 8] = [
    catalogue!("en"),
    catalogue!("zh-CN"),
    catalogue!("zh-TW"),
    catalogue!("ja"),
    catalogue!("ko"),
    catalogue!("es"),
    catalogue!("pt"),
    catalogue!("ru"),
];

/// The JSON catalogue of `locale` (exactly one of [`LOCALES`]).
pub(crate) fn catalogue(locale: &str) -> Option<&'static str> {
    LOCALES
        .iter()
        .position(|l| *l == locale)
        .map(|i| CATALOGUES[i])
}

/// The catalogue key of a tool state's name, as `/status` writes it.
pub(crate) fn state_key(state: &str) -> &'static str {
    match state {
        "registered" => "state.registered",
        "conflict" => "state.conflict",
        "rejected" => "state.rejected",
        "waiting_for_role" => "state.waitingForRole",
        "retrying" => "state.retrying",
        _ => "state.pending",
    }
}

/// The catalogue key of an MCP server's phase.
pub(crate) fn phase_key(phase: &str) -> &'static str {
    match phase {
        "ready" => "phase.ready",
        "restarting" => "phase.restarting",
        "stopped" => "phase.stopped",
        _ => "phase.starting",
    }
}

/// One sentence of the page in English, from the `en` catalogue, marked
/// so the script can say it in the browser's language: the element carries
/// the key (`data-i18n-s`), and each placeholder's value is a child element
/// (`data-arg`) the script moves into the translated sentence as it is.
/// `args` are HTML the caller escaped (they may hold markup of ours, such as
/// `<code>`); the sentence's own text is escaped here. What the sidecar or a
/// tool wrote stays in the arguments, untranslated.
pub(crate) fn sentence(key: &str, args: &[(&str, String)]) -> String {
    static EN: std::sync::OnceLock<std::collections::HashMap<String, String>> =
        std::sync::OnceLock::new();
    let en = EN.get_or_init(|| serde_json::from_str(CATALOGUES[0]).unwrap_or_default());
    // A key the catalogue lacks is a bug the tests catch; the page then
    // shows the key rather than nothing.
    let template = en.get(key).map_or(key, String::as_str);
    let mut out = format!("<span data-i18n-s=\"{}\">", super::page::esc(key));
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(len) = rest[open..].find('}') else {
            break;
        };
        let name = &rest[open + 1..open + len];
        out.push_str(&super::page::esc(&rest[..open]));
        match args.iter().find(|(n, _)| *n == name) {
            Some((n, html)) => {
                out.push_str(&format!("<span data-arg=\"{n}\">{html}</span>"));
            }
            None => out.push_str(&super::page::esc(&rest[open..=open + len])),
        }
        rest = &rest[open + len + 1..];
    }
    out.push_str(&super::page::esc(rest));
    out.push_str("</span>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value};

    fn parsed(locale: &str) -> Map<String, Value> {
        match serde_json::from_str(catalogue(locale).unwrap()) {
            Ok(Value::Object(m)) => m,
            other => panic!("{locale}: not a JSON object: {other:?}"),
        }
    }

    #[test]
    fn every_locale_has_every_key_of_english() {
        let en = parsed("en");
        for locale in LOCALES {
            let m = parsed(locale);
            let mut missing: Vec<&String> = en.keys().filter(|k| !m.contains_key(*k)).collect();
            missing.sort();
            assert!(missing.is_empty(), "{locale} lacks {missing:?}");
            assert_eq!(m.len(), en.len(), "{locale} has keys English lacks");
            assert!(
                m.values()
                    .all(|v| v.as_str().is_some_and(|s| !s.trim().is_empty()))
            );
        }
        assert_eq!(catalogue("fr"), None);
        assert_eq!(catalogue("../en"), None);
    }

    #[test]
    fn a_sentence_is_the_english_text_with_its_arguments_marked() {
        let html = sentence(
            "inspector.heldBy",
            &[("owner", "<code>plugin:x</code>".to_owned())],
        );
        assert_eq!(
            html,
            r#"<span data-i18n-s="inspector.heldBy">held by <span data-arg="owner"><code>plugin:x</code></span></span>"#
        );
        // The catalogue's own text is escaped; a placeholder without a value
        // stays as written.
        let html = sentence("inspector.lost", &[]);
        assert_eq!(
            html,
            r#"<span data-i18n-s="inspector.lost">the sidecar does not answer ({error})</span>"#
        );
    }

    /// Every key the page and its script name is in the catalogue.
    #[test]
    fn the_page_names_only_known_keys() {
        let en = parsed("en");
        let sources = [
            super::super::inspector::SCRIPT,
            include_str!("page.rs"),
            include_str!("i18n.rs"),
        ];
        let mut seen = 0;
        for text in sources {
            for quote in ["data-i18n=\\\"", "tr(\"", "data-i18n=\"", "sentence("] {
                for (at, _) in text.match_indices(quote) {
                    // `sentence(` is followed by the key's literal, on its
                    // line or the next.
                    let rest = text[at + quote.len()..]
                        .trim_start()
                        .trim_start_matches('"');
                    let key: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '.')
                        .collect();
                    if key.contains('.') {
                        seen += 1;
                        assert!(en.contains_key(&key), "`{key}` is not in en.json");
                    }
                }
            }
        }
        for state in [
            "pending",
            "registered",
            "conflict",
            "rejected",
            "waiting_for_role",
            "retrying",
        ] {
            assert!(en.contains_key(state_key(state)));
        }
        for phase in ["starting", "ready", "restarting", "stopped"] {
            assert!(en.contains_key(phase_key(phase)));
        }
        assert!(seen > 20, "only {seen} keys found: the scan is broken");
    }
}
