//! A `/metrics` scrape of the whole daemon, read twice: by a strict parser
//! of the text format 0.0.4 written here (every line must parse; HELP and
//! TYPE before a family's samples; counters end in `_total`; histogram
//! buckets cumulative with `+Inf` equal to `_count`; no duplicate series),
//! and by the `prometheus-parse` crate, which must agree on every value.
//! Then the listed series are checked for existence and sane values.
//!
//! prometheus-parse alone would not do: it skips lines it cannot read, so a
//! malformed line would pass unseen. The strict reader is why this test can
//! fail on a format bug.

use std::collections::{BTreeMap, BTreeSet};

use crate::support::admin::*;
use crate::support::{Workspace, refused_port};

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

#[derive(Debug, Default)]
struct Parsed {
    /// Family name → type.
    types: BTreeMap<String, String>,
    samples: Vec<Line>,
}

impl Parsed {
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }

    fn must(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels)
            .unwrap_or_else(|| panic!("no sample {name}{labels:?}"))
    }
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || (colon && f == ':'))
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || (colon && x == ':'))
}

fn parse_value(s: &str) -> f64 {
    match s {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => {
            assert!(
                s.bytes()
                    .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)),
                "bad value {s:?}"
            );
            s.parse().unwrap_or_else(|e| panic!("bad value {s:?}: {e}"))
        }
    }
}

/// `{k="v",...}` with only `\\`, `\"` and `\n` escapes; returns the labels
/// and the rest of the line.
fn parse_labels(s: &str) -> (BTreeMap<String, String>, &str) {
    let mut labels = BTreeMap::new();
    let mut rest = s.strip_prefix('{').unwrap();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return (labels, after);
        }
        let eq = rest.find('=').expect("label without =");
        let key = &rest[..eq];
        assert!(is_name(key, false), "bad label name {key:?}");
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .expect("unquoted label value");
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            let (i, c) = chars.next().expect("unterminated label value");
            match c {
                '"' => break i,
                '\\' => match chars.next().expect("dangling escape").1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    other => panic!("bad escape \\{other}"),
                },
                '\n' => panic!("raw line feed in a label value"),
                c => value.push(c),
            }
        };
        assert!(
            labels.insert(key.to_owned(), value).is_none(),
            "{key} twice"
        );
        rest = &rest[end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else {
            assert!(rest.starts_with('}'), "expected , or }} in {s}");
        }
    }
}

fn strict_parse(text: &str) -> Parsed {
    assert!(
        text.ends_with('\n'),
        "the exposition must end with a line feed"
    );
    let mut p = Parsed::default();
    let mut helped = BTreeSet::new();
    let mut current: Option<(String, String)> = None;
    let mut seen_series = BTreeSet::new();
    for line in text.lines() {
        assert!(!line.is_empty(), "empty line");
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP without text");
            assert!(is_name(name, true), "{name}");
            assert!(!help.trim().is_empty(), "empty HELP for {name}");
            assert!(helped.insert(name.to_owned()), "HELP twice for {name}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE without a type");
            assert!(helped.contains(name), "TYPE before HELP for {name}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{kind}"
            );
            if kind == "counter" {
                assert!(name.ends_with("_total"), "counter {name} without _total");
            }
            assert!(
                p.types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "family {name} twice"
            );
            current = Some((name.to_owned(), kind.to_owned()));
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment {line}");
        let name_end = line.find(['{', ' ']).expect("sample without value");
        let name = &line[..name_end];
        assert!(is_name(name, true), "bad metric name {name:?}");
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..])
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let mut fields = rest
            .strip_prefix(' ')
            .expect("no space before value")
            .split(' ');
        let value = parse_value(fields.next().unwrap());
        if let Some(ts) = fields.next() {
            ts.parse::<i64>().expect("bad timestamp");
        }
        assert!(fields.next().is_none(), "trailing text in {line}");
        let (family, kind) = current.as_ref().expect("sample before any TYPE");
        let ok = match kind.as_str() {
            "histogram" => [
                format!("{family}_bucket"),
                format!("{family}_sum"),
                format!("{family}_count"),
            ]
            .contains(&name.to_owned()),
            _ => name == family,
        };
        assert!(ok, "{name} is not part of family {family} ({kind})");
        if name.ends_with("_bucket") {
            assert!(labels.contains_key("le"), "bucket without le: {line}");
        }
        assert!(
            seen_series.insert(format!("{name}{labels:?}")),
            "duplicate series {line}"
        );
        assert!(value >= 0.0 || value.is_nan(), "negative {line}");
        p.samples.push(Line {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    check_histograms(&p);
    p
}

type Buckets = Vec<(f64, f64)>;

/// Buckets cumulative, ending at +Inf, which equals `_count`.
fn check_histograms(p: &Parsed) {
    for (family, kind) in &p.types {
        if kind != "histogram" {
            continue;
        }
        // Labels without `le` → (le, cumulative count) in order.
        let mut series: BTreeMap<Vec<(String, String)>, Buckets> = BTreeMap::new();
        for s in p
            .samples
            .iter()
            .filter(|s| s.name == format!("{family}_bucket"))
        {
            let mut key: Vec<(String, String)> = s.labels.clone().into_iter().collect();
            key.retain(|(k, _)| k != "le");
            series
                .entry(key)
                .or_default()
                .push((parse_value(&s.labels["le"]), s.value));
        }
        for (key, buckets) in series {
            assert!(
                buckets.windows(2).all(|w| w[0].0 < w[1].0),
                "le out of order"
            );
            assert!(
                buckets.windows(2).all(|w| w[0].1 <= w[1].1),
                "not cumulative"
            );
            let (last_le, last) = *buckets.last().unwrap();
            assert!(last_le.is_infinite(), "no +Inf bucket");
            let labels: Vec<(&str, &str)> =
                key.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            assert_eq!(p.must(&format!("{family}_count"), &labels), last);
            assert!(p.value(&format!("{family}_sum"), &labels).is_some());
        }
    }
}

/// prometheus-parse must read the same values.
fn cross_check(text: &str, p: &Parsed) {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    for family in p.types.keys() {
        assert!(
            scrape.docs.contains_key(family),
            "{family} has no doc there"
        );
    }
    for s in p.samples.iter().filter(|s| !s.name.ends_with("_bucket")) {
        let theirs = scrape
            .samples
            .iter()
            .find(|x| {
                x.metric == s.name
                    && x.labels.len() == s.labels.len()
                    && s.labels
                        .iter()
                        .all(|(k, v)| x.labels.get(k) == Some(v.as_str()))
            })
            .unwrap_or_else(|| panic!("prometheus-parse lost {s:?}"));
        let v = match &theirs.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            other => panic!("{s:?} read as {other:?}"),
        };
        assert_eq!(v, s.value, "{s:?}");
    }
    let histograms = scrape
        .samples
        .iter()
        .filter(|x| matches!(x.value, prometheus_parse::Value::Histogram(_)))
        .count();
    let ours = p
        .samples
        .iter()
        .filter(|s| s.name.ends_with("_count"))
        .count();
    assert_eq!(histograms, ours);
}

// Its handlers are `sh` scripts, so Unix only.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrape_is_valid_and_has_every_listed_series() {
    use crate::support::{call, dev_server};
    use neko_sidecar::registration::ToolState;
    use serde_json::json;

    let h = dev_server().await;
    let ws = Workspace::new();
    greet(&ws);
    let run = start(&ws.admin_config(&h.url(), "")).await;
    run.wait("registered", |s| {
        s.state("greet") == Some(&ToolState::Registered)
    })
    .await;
    for args in [json!({"name": "Ada"}), json!({"name": "Bo"}), json!({})] {
        h.invoke(call("greet", args)).await.unwrap();
    }
    // main_server forgets everything; the sidecar notices and restores it.
    h.restart();
    run.wait("lost and restored", |s| {
        s.loss_events >= 1 && s.state("greet") == Some(&ToolState::Registered)
    })
    .await;

    let r = run
        .http
        .get(format!("{}/metrics", run.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = r.text().await.unwrap();
    let p = strict_parse(&text);
    cross_check(&text, &p);

    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        p.must(
            "neko_sidecar_build_info",
            &[("version", version), ("source", SOURCE)]
        ),
        1.0
    );
    assert!(p.must("neko_sidecar_start_time_seconds", &[]) > 1.6e9);
    assert_eq!(p.must("neko_sidecar_main_server_up", &[]), 1.0);
    assert_eq!(p.must("neko_sidecar_main_server_failed_attempts", &[]), 0.0);
    assert!(p.must("neko_sidecar_main_server_last_contact_seconds", &[]) > 1.6e9);
    assert!(p.must("neko_sidecar_reconcile_passes_total", &[]) >= 2.0);
    // Registered at start and again after the restart.
    assert!(
        p.must(
            "neko_sidecar_registrations_total",
            &[("outcome", "accepted")]
        ) >= 2.0
    );
    for outcome in ["rejected", "unknown_role", "failed"] {
        assert_eq!(
            p.must("neko_sidecar_registrations_total", &[("outcome", outcome)]),
            0.0
        );
    }
    assert_eq!(p.must("neko_sidecar_tools_lost_total", &[]), 1.0);
    assert_eq!(p.must("neko_sidecar_loss_events_total", &[]), 1.0);
    assert_eq!(
        p.must("neko_sidecar_tools", &[("state", "registered")]),
        1.0
    );
    for state in [
        "pending",
        "conflict",
        "rejected",
        "waiting_for_role",
        "retrying",
    ] {
        assert_eq!(p.must("neko_sidecar_tools", &[("state", state)]), 0.0);
    }
    assert_eq!(p.types["neko_sidecar_tool_retry_attempt"], "gauge");
    let greet = [("tool", "greet")];
    assert_eq!(
        p.must(
            "neko_sidecar_callbacks_total",
            &[("tool", "greet"), ("outcome", "ok")]
        ),
        2.0
    );
    assert_eq!(
        p.must(
            "neko_sidecar_callbacks_total",
            &[("tool", "greet"), ("outcome", "invalid_arguments")]
        ),
        1.0
    );
    // Outcomes that never happened are left out.
    assert_eq!(
        p.value(
            "neko_sidecar_callbacks_total",
            &[("tool", "greet"), ("outcome", "timeout")]
        ),
        None
    );
    assert_eq!(p.must("neko_sidecar_callbacks_in_flight", &greet), 0.0);
    assert_eq!(
        p.types["neko_sidecar_callback_duration_seconds"],
        "histogram"
    );
    assert_eq!(
        p.must("neko_sidecar_callback_duration_seconds_count", &greet),
        3.0
    );
    let sum = p.must("neko_sidecar_callback_duration_seconds_sum", &greet);
    assert!(sum > 0.0 && sum < 15.0, "{sum}");
    assert_eq!(
        p.must(
            "neko_sidecar_callback_duration_seconds_bucket",
            &[("tool", "greet"), ("le", "+Inf")]
        ),
        3.0
    );
    for reason in [
        "forbidden_peer",
        "body_too_large",
        "unknown_token",
        "unknown_tool",
        "busy",
    ] {
        assert_eq!(
            p.must(
                "neko_sidecar_callback_rejections_total",
                &[("reason", reason)]
            ),
            0.0
        );
    }
    for reason in ["lingering", "no_valid_request", "idle"] {
        assert_eq!(
            p.must(
                "neko_sidecar_callback_connections_closed_to_make_room_total",
                &[("reason", reason)]
            ),
            0.0
        );
    }
    assert_eq!(
        p.must("neko_sidecar_callback_connection_waits_total", &[]),
        0.0
    );
    assert!(p.must("neko_sidecar_callback_connections", &[]) >= 0.0);
    assert_eq!(p.must("neko_sidecar_manifest_files", &[]), 1.0);
    assert_eq!(p.must("neko_sidecar_manifest_files_in_error", &[]), 0.0);
    assert_eq!(p.must("neko_sidecar_desired_tools", &[]), 1.0);
    assert!(p.must("neko_sidecar_manifest_rescans_total", &[]) >= 1.0);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_and_manifest_errors_show_while_main_server_is_down() {
    let ws = Workspace::new();
    greet(&ws);
    ws.write_tool("bad.toml", "[[tool]]\nname = 7\n");
    let run = start(&ws.admin_config(&format!("http://127.0.0.1:{}", refused_port()), "")).await;
    run.wait("three failed GETs", |s| s.main_server.failed_attempts >= 3)
        .await;
    let text = run.get("/metrics").await.1;
    let p = strict_parse(&text);
    cross_check(&text, &p);
    assert_eq!(p.must("neko_sidecar_main_server_up", &[]), 0.0);
    assert!(p.must("neko_sidecar_main_server_failed_attempts", &[]) >= 3.0);
    assert_eq!(
        p.value("neko_sidecar_main_server_last_contact_seconds", &[]),
        None
    );
    assert_eq!(p.must("neko_sidecar_tools", &[("state", "pending")]), 1.0);
    assert_eq!(p.must("neko_sidecar_manifest_files", &[]), 2.0);
    assert_eq!(p.must("neko_sidecar_manifest_files_in_error", &[]), 1.0);
    run.stop().await;
}

#[test]
fn the_strict_reader_refuses_what_prometheus_would() {
    let bad = [
        "# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"b} 1\n",
        "# HELP x h\n# TYPE x counter\nx 1\n",
        "# HELP x h\n# TYPE x gauge\nx{a=\"\\q\"} 1\n",
        "# HELP x h\n# TYPE x gauge\nx 1\nx 2\n",
        "# HELP x h\n# TYPE x gauge\ny 1\n",
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# HELP x h\n# TYPE x gauge\nx one\n",
    ];
    for text in bad {
        let r = std::panic::catch_unwind(|| strict_parse(text));
        assert!(r.is_err(), "accepted:\n{text}");
    }
    let good = "# HELP x h\n# TYPE x gauge\nx{a=\"q\\\"\\\\\\n\"} 1.5\n";
    assert_eq!(strict_parse(good).must("x", &[("a", "q\"\\\n")]), 1.5);
}
