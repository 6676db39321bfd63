//! The inspector page's HTML: the whole page at `GET /`, and its status
//! part alone, which the page's script fetches again every second.
//!
//! Pure: a [`Sample`] in, HTML text out, through the same [`StatusView`]
//! as `/status`, so the page and the JSON never disagree. Everything a
//! manifest, an MCP server, main_server or a handler wrote (names,
//! descriptions, errors, paths) is untrusted and goes through [`esc`];
//! the page carries no inline script or style (its Content-Security-Policy
//! forbids both), only links to `/inspector.js` and `/inspector.css`. The
//! status part is complete HTML, so it reads without JavaScript.

use std::fmt::Write as _;

use super::i18n::sentence;
use super::sample::Sample;
use super::view::{StateView, StatusView, ToolView, build};
use crate::mcp::ServerStatus;

/// The whole page. `token` is the per-process secret the call endpoint
/// requires; `None` leaves the form out (the page then only shows).
pub(crate) fn render_page(sample: &Sample, token: Option<&str>) -> String {
    let view = build(sample);
    let mut out = String::with_capacity(8 * 1024);
    let _ = write!(
        out,
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="neko-token" content="{token}">
<meta name="neko-locales" content="{locales}">
<title>neko-sidecar · {source}</title>
<link rel="stylesheet" href="/inspector.css">
<script src="/inspector.js" defer></script>
</head>
<body>
<header><h1>neko-sidecar</h1><span class="hint">{header} · <span id="live" data-i18n="inspector.live">live</span></span></header>
<main>
<section id="status" aria-live="polite">
{status}</section>
<section id="try">
<h2 data-i18n="try.title">Try a tool</h2>
<noscript><p>{noscript}</p></noscript>
{form}
</section>
<section id="calls">
<h2 data-i18n="calls.title">Recent calls</h2>
<p id="calls-note" class="hint" data-i18n="inspector.callsNote">The calls the model made, newest first, as the sidecar keeps them in memory ([admin] call_history); neko-sidecar status --calls shows the same.</p>
<div id="call-list"></div>
</section>
</main>
</body>
</html>
"#,
        token = esc(token.unwrap_or("")),
        locales = super::i18n::LOCALES.join(","),
        source = esc(&view.source),
        header = sentence(
            "inspector.header",
            &[
                ("source", format!("<code>{}</code>", esc(&view.source))),
                ("version", esc(&view.version)),
                ("started", esc(&view.started_at)),
            ]
        ),
        noscript = sentence(
            "inspector.noscript",
            &[(
                "command",
                "<code>neko-sidecar call TOOL --args JSON</code>".to_owned()
            )]
        ),
        status = render_view(sample, &view),
        form = if token.is_some() {
            FORM.to_owned()
        } else {
            format!(
                "<p class=\"bad\">{}</p>",
                sentence(
                    "inspector.noToken",
                    &[("command", "<code>neko-sidecar call</code>".to_owned())]
                )
            )
        },
    );
    out
}

/// The form's fixed frame; the script fills the tool list and the fields
/// from each tool's schema (`/ui/tools`).
const FORM: &str = r#"<form id="call-form" hidden>
<p><label><span data-i18n="try.tool">Tool</span> <select id="tool"></select></label> <span id="tool-target" class="hint"></span></p>
<p id="tool-description" class="hint"></p>
<p class="mode"><label><input type="radio" name="mode" value="form" checked> <span data-i18n="try.form">Form</span></label> <label><input type="radio" name="mode" value="json"> <span data-i18n="try.rawJson">Raw JSON</span></label></p>
<div id="fields"></div>
<textarea id="raw" rows="8" spellcheck="false" hidden></textarea>
<p id="form-error" class="bad" hidden></p>
<p><label><input type="checkbox" id="skip-check"> <span data-i18n="inspector.skipCheck">Call even when the arguments do not match the schema (to see what the model reads then)</span></label></p>
<p><button type="submit" id="call" data-i18n="try.call">Call</button></p>
</form>
<div id="result" hidden>
<h3 id="result-title" data-i18n="try.reads">What the model reads:</h3>
<pre id="model-text"></pre>
<p id="result-meta" class="hint"></p>
<details><summary data-i18n="inspector.rawAnswer">Raw answer of the callback</summary><pre id="raw-answer"></pre></details>
</div>
"#;

/// The status part alone, as the script fetches it.
pub(crate) fn render_status(sample: &Sample) -> String {
    render_view(sample, &build(sample))
}

fn render_view(sample: &Sample, v: &StatusView) -> String {
    let mut out = String::with_capacity(4 * 1024);
    let ms = &v.main_server;
    let registered = v
        .tools
        .iter()
        .filter(|t| matches!(t.state, StateView::Registered))
        .count();
    // The banner: what is wrong now, and only while it is.
    match ms.reachable {
        Some(false) => {
            let _ = writeln!(
                out,
                r#"<p class="banner bad" id="banner">{}</p>"#,
                sentence(
                    "inspector.banner.unreachable",
                    &[
                        ("attempts", ms.failed_attempts.to_string()),
                        (
                            "error",
                            esc(ms.last_error.as_deref().unwrap_or("unknown error"))
                        ),
                    ]
                )
            );
        }
        None => {
            let _ = writeln!(
                out,
                r#"<p class="banner warn" id="banner">{}</p>"#,
                sentence("inspector.banner.notReached", &[])
            );
        }
        Some(true) if registered < v.tools.len() && ms.last_loss_at.is_some() => {
            let _ = writeln!(
                out,
                r#"<p class="banner warn" id="banner">{}</p>"#,
                sentence(
                    "inspector.banner.lost",
                    &[
                        ("at", esc(ms.last_loss_at.as_deref().unwrap_or(""))),
                        ("registered", registered.to_string()),
                        ("total", v.tools.len().to_string()),
                    ]
                )
            );
        }
        Some(true) => {}
    }
    let answers = match ms.reachable {
        Some(true) => sentence(
            "inspector.answersYes",
            &[
                (
                    "yes",
                    "<span class=\"ok\" data-i18n=\"common.yes\">yes</span>".to_owned(),
                ),
                ("at", esc(ms.last_contact.as_deref().unwrap_or("-"))),
            ],
        ),
        Some(false) => sentence(
            "inspector.answersNo",
            &[
                (
                    "no",
                    "<span class=\"bad\" data-i18n=\"common.no\">no</span>".to_owned(),
                ),
                (
                    "error",
                    esc(ms.last_error.as_deref().unwrap_or("unknown error")),
                ),
            ],
        ),
        None => "<span data-i18n=\"mainServer.notYet\">not reached yet</span>".to_owned(),
    };
    let restart = match &ms.last_loss_at {
        Some(at) => sentence(
            "inspector.lastRestart",
            &[("at", esc(at)), ("count", v.engine.loss_events.to_string())],
        ),
        None => sentence("inspector.never", &[]),
    };
    let ready = if v.ready {
        "<span class=\"ok\" data-i18n=\"inspector.ready\">ready</span>".to_owned()
    } else {
        // The reasons are the sidecar's own sentences, as /status has them.
        let reasons: Vec<String> = v.not_ready.iter().map(|r| esc(r)).collect();
        sentence(
            "inspector.notReadyBecause",
            &[
                (
                    "notReady",
                    "<span class=\"bad\" data-i18n=\"inspector.notReady\">not ready</span>"
                        .to_owned(),
                ),
                ("reasons", reasons.join("; ")),
            ],
        )
    };
    let registered_of = sentence(
        "inspector.registeredOf",
        &[
            ("registered", registered.to_string()),
            ("total", v.tools.len().to_string()),
            ("ready", ready),
        ],
    );
    let _ = write!(
        out,
        r#"<h2 data-i18n="mainServer.title">main_server</h2>
<dl class="facts">
<dt data-i18n="mainServer.url">URL</dt><dd><code>{url}</code></dd>
<dt data-i18n="inspector.answers">Answers</dt><dd id="ms-answers">{answers}</dd>
<dt data-i18n="mainServer.lastRestart">Last restart seen</dt><dd id="ms-restart">{restart}</dd>
<dt data-i18n="inspector.registered">Registered</dt><dd id="ms-registered">{registered_of}</dd>
</dl>
"#,
        url = esc(&ms.url),
    );
    render_tools(&mut out, sample, v);
    render_mcp(&mut out, &v.mcp_servers);
    render_manifests(&mut out, v);
    let _ = writeln!(
        out,
        r#"<p class="hint">{}</p>"#,
        sentence(
            "inspector.asOf",
            &[("at", esc(&super::time::rfc3339(sample.now)))]
        )
    );
    out
}

fn render_tools(out: &mut String, sample: &Sample, v: &StatusView) {
    out.push_str("<h2 data-i18n=\"tools.title\">Tools</h2>\n");
    if v.tools.is_empty() {
        let _ = writeln!(out, "<p>{}</p>", sentence("inspector.noTools", &[]));
        return;
    }
    out.push_str(
        "<table id=\"tools\"><thead><tr><th data-i18n=\"tools.name\">Tool</th><th data-i18n=\"tools.state\">State</th><th data-i18n=\"tools.role\">Role</th><th data-i18n=\"tools.handler\">Handler</th><th data-i18n=\"tools.declaredAt\">Declared in</th><th data-i18n=\"tools.lastCall\">Last call</th><th data-i18n=\"tools.calls\">Calls</th><th></th></tr></thead>\n<tbody>\n",
    );
    for t in &v.tools {
        let description = sample
            .desired
            .tools
            .get(&t.name)
            .map_or("", |d| d.spec.description.as_str());
        let _ = writeln!(
            out,
            r#"<tr data-tool="{name}"><td><strong class="name">{name}</strong><div class="hint desc">{desc}</div></td><td>{state}</td><td>{role}</td><td><code>{target}</code></td><td><code>{declared}</code>{last_good}</td><td class="last">{last}</td><td>{calls}{failures}</td><td><button type="button" class="try" data-try="{name}" data-i18n="actions.tryTool.label">Try</button></td></tr>"#,
            name = esc(&t.name),
            desc = esc(&shorten(description, 300)),
            state = state_cell(t),
            role = t.role.as_deref().map_or_else(
                || "<span class=\"hint\" data-i18n=\"tools.allRoles\">every role</span>".to_owned(),
                esc
            ),
            target = esc(t.target.as_deref().unwrap_or("-")),
            declared = esc(t.declared_at.as_deref().unwrap_or("-")),
            last_good = if t.serving_last_good {
                format!(
                    "<div class=\"warn\">{}</div>",
                    sentence("inspector.lastGood", &[])
                )
            } else {
                String::new()
            },
            last = last_call_cell(t),
            calls = t.calls,
            failures = if t.failures > 0 {
                format!(
                    " <span class=\"bad\">{}</span>",
                    sentence("inspector.failed", &[("count", t.failures.to_string())])
                )
            } else {
                String::new()
            },
        );
    }
    out.push_str("</tbody></table>\n");
}

fn state_cell(t: &ToolView) -> String {
    let name = t.state.name();
    let key = super::i18n::state_key(name);
    let detail = match &t.state {
        StateView::Pending | StateView::Registered => String::new(),
        StateView::Conflict {
            owner, same_source, ..
        } => {
            let owner = ("owner", format!("<code>{}</code>", esc(owner)));
            if *same_source {
                sentence("inspector.heldBySameSource", &[owner])
            } else {
                sentence("inspector.heldBy", &[owner])
            }
        }
        // main_server's errors and the sidecar's reasons stay as they came.
        StateView::Rejected { errors } => sentence(
            "inspector.refused",
            &[(
                "errors",
                errors.iter().map(|e| esc(e)).collect::<Vec<_>>().join("; "),
            )],
        ),
        StateView::WaitingForRole { waiting_for } => match waiting_for {
            Some(role) => sentence(
                "inspector.roleMissing",
                &[("role", format!("<code>{}</code>", esc(role)))],
            ),
            None => sentence("inspector.noRoleYet", &[]),
        },
        StateView::Retrying {
            attempt,
            next_attempt_at,
        } => sentence(
            "inspector.retrying",
            &[
                ("attempt", attempt.to_string()),
                ("error", esc(t.last_error.as_deref().unwrap_or(""))),
                ("at", esc(next_attempt_at)),
            ],
        ),
    };
    let class = match &t.state {
        StateView::Registered => "ok",
        StateView::Pending | StateView::WaitingForRole { .. } | StateView::Retrying { .. } => {
            "warn"
        }
        StateView::Conflict { .. } | StateView::Rejected { .. } => "bad",
    };
    if detail.is_empty() {
        format!("<span class=\"state {class}\" data-i18n=\"{key}\">{name}</span>")
    } else {
        format!(
            "<span class=\"state {class}\" data-i18n=\"{key}\">{name}</span><div class=\"detail\">{detail}</div>"
        )
    }
}

fn last_call_cell(t: &ToolView) -> String {
    let Some(l) = &t.last_call else {
        return "<span class=\"hint\" data-i18n=\"common.none\">none yet</span>".to_owned();
    };
    let how = if l.outcome == "ok" {
        "<span class=\"ok\">ok</span>".to_owned()
    } else {
        format!(
            "<span class=\"bad\">{}</span>{}",
            esc(&l.outcome),
            l.error
                .as_deref()
                .map(|e| format!("<div class=\"detail\">{}</div>", esc(&shorten(e, 300))))
                .unwrap_or_default()
        )
    };
    format!(
        "{how} <span class=\"hint\">{}</span>",
        sentence(
            "inspector.lastCallAt",
            &[("ms", l.took_ms.to_string()), ("at", esc(&l.at))]
        )
    )
}

fn render_mcp(out: &mut String, servers: &[ServerStatus]) {
    if servers.is_empty() {
        return;
    }
    out.push_str(
        "<h2 data-i18n=\"servers.title\">MCP servers</h2>\n<table id=\"mcp\"><thead><tr><th data-i18n=\"servers.name\">Server</th><th data-i18n=\"servers.phase\">Phase</th><th data-i18n=\"inspector.protocol\">Protocol</th><th data-i18n=\"servers.transport\">Transport</th><th data-i18n=\"servers.tools\">Tools</th><th data-i18n=\"servers.restarts\">Restarts</th><th data-i18n=\"servers.lastError\">Last error</th></tr></thead>\n<tbody>\n",
    );
    for s in servers {
        let phase = serde_json::to_value(s.phase)
            .ok()
            .and_then(|p| p.as_str().map(str::to_owned))
            .unwrap_or_default();
        let class = if phase == "ready" { "ok" } else { "warn" };
        // A server that needs a sign-in gets its button (the admin
        // listener's /oauth/login, which sends the browser on).
        let sign_in = match &s.sign_in {
            Some(x) if x.state == "needs_sign_in" => format!(
                r#" <a class="signin" href="/oauth/login/{n}" target="_blank" rel="noopener" data-i18n="inspector.signIn">Sign in</a>"#,
                n = esc(&s.name)
            ),
            Some(x) if x.state == "signed_in" => {
                " <span class=\"detail\" data-i18n=\"inspector.signedIn\">signed in</span>"
                    .to_string()
            }
            Some(x) => format!(
                " <span class=\"bad detail\">{}</span>",
                esc(x.reason.as_deref().unwrap_or(""))
            ),
            None => String::new(),
        };
        let rejected: Vec<String> = s
            .rejected
            .iter()
            .map(|r| format!("{}: {}", esc(&r.name), esc(&r.reason)))
            .collect();
        let _ = writeln!(
            out,
            r#"<tr data-server="{name}"><td><strong>{name}</strong></td><td><span class="state {class}" data-i18n="{key}">{phase}</span>{sign_in}</td><td>{protocol}</td><td><code>{transport}</code></td><td>{offered}{rejected}</td><td>{restarts}</td><td>{error}</td></tr>"#,
            name = esc(&s.name),
            key = super::i18n::phase_key(&phase),
            protocol = esc(s.protocol.as_deref().unwrap_or("-")),
            transport = esc(&s.transport),
            offered = esc(&s.tools.join(", ")),
            rejected = if rejected.is_empty() {
                String::new()
            } else {
                format!(
                    "<div class=\"bad detail\">{}</div>",
                    sentence("inspector.notOffered", &[("tools", rejected.join("; "))])
                )
            },
            restarts = s.restarts,
            error = esc(s.last_error.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</tbody></table>\n");
}

fn render_manifests(out: &mut String, v: &StatusView) {
    let in_error: Vec<_> = v
        .manifests
        .files
        .iter()
        .filter(|f| f.health != "ok")
        .collect();
    if in_error.is_empty() && v.manifests.directories.is_empty() {
        return;
    }
    out.push_str("<h2 data-i18n=\"inspector.manifestProblems\">Manifest problems</h2>\n<ul id=\"manifest-problems\">\n");
    for d in &v.manifests.directories {
        let _ = writeln!(out, "<li><pre>{}</pre></li>", esc(&d.text));
    }
    for f in in_error {
        let kept = if f.serving_last_good {
            format!(
                " {}",
                sentence(
                    "inspector.lastGoodKept",
                    &[("tools", esc(&f.tools.join(", ")))]
                )
            )
        } else {
            String::new()
        };
        let diags: Vec<String> = f.diagnostics.iter().map(|d| esc(&d.text)).collect();
        let _ = writeln!(
            out,
            "<li><code>{}</code>{kept}<pre>{}</pre></li>",
            esc(&f.path),
            diags.join("\n")
        );
    }
    out.push_str("</ul>\n");
}

/// `s` cut to `max` characters, marked with an ellipsis when cut.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Text as HTML text or a quoted attribute value: nothing in it can open a
/// tag, end an attribute or start an entity.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::admin::view::tests::sample_with;
    use crate::registration::ToolState;

    #[test]
    fn markup_in_untrusted_text_stays_text() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        let mut s = sample_with(&["a"]);
        s.registration.tools.get_mut("a").unwrap().state = ToolState::Retrying {
            last_error: "<img src=x onerror=alert(1)>".into(),
            attempt: 2,
            next_attempt_at: SystemTime::UNIX_EPOCH,
        };
        s.main_server_url = "http://x/\"><script>alert(1)</script>".into();
        let page = render_page(&s, Some("tok\"><script>"));
        assert!(!page.contains("<img"), "{page}");
        assert!(
            page.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{page}"
        );
        // The only script is the page's own file, and no inline handler.
        assert_eq!(page.matches("<script").count(), 1, "{page}");
        assert!(page.contains(r#"<script src="/inspector.js" defer></script>"#));
        assert!(!page.contains("onerror=alert(1)>"));
        assert!(!page.contains(" style="));
    }

    #[test]
    fn every_tool_is_listed_with_its_state_handler_and_file() {
        let mut s = sample_with(&["alpha", "beta"]);
        s.registration.tools.get_mut("beta").unwrap().state = ToolState::Conflict {
            owner: "plugin:other".into(),
            callback_url: None,
            same_source: false,
        };
        let html = render_status(&s);
        assert!(html.contains(r#"<tr data-tool="alpha">"#), "{html}");
        assert!(html.contains("http http://127.0.0.1:9/alpha"), "{html}");
        assert!(html.contains("/m/tools.toml:1:1"), "{html}");
        assert!(
            html.contains(r#"held by <span data-arg="owner"><code>plugin:other</code></span>"#),
            "{html}"
        );
        assert!(html.contains("main_server not reached yet"), "{html}");
        assert!(html.contains("none yet"), "{html}");
    }

    #[test]
    fn the_page_without_a_token_has_no_form() {
        let s = sample_with(&["a"]);
        assert!(render_page(&s, Some("t0k")).contains(r#"<form id="call-form""#));
        let page = render_page(&s, None);
        assert!(!page.contains("<form"), "{page}");
        assert!(page.contains("cannot call tools"));
    }
}
