//! A writer of the Prometheus text exposition format 0.0.4: `# HELP` and
//! `# TYPE` lines, then samples with escaped label values.
//!
//! It only formats: which series exist and what they mean is `metrics.rs`.
//! Each family is written whole before the next (the format requires a
//! family's lines to be together), and a name is checked against the
//! metric-name grammar in debug builds, where the tests run.

use std::fmt::Write;

/// The `Content-Type` of a scrape answer.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A family's type, as `# TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// The text being written.
#[derive(Debug, Default)]
pub(crate) struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts a family. Counter names end in `_total` by convention; the
    /// caller passes the full name.
    pub(crate) fn family(&mut self, name: &str, kind: Kind, help: &str) {
        debug_assert!(is_metric_name(name), "bad metric name {name:?}");
        debug_assert!(kind != Kind::Counter || name.ends_with("_total"), "{name}");
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
    }

    /// One sample line: `name{labels} value`.
    pub(crate) fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                debug_assert!(is_label_name(k), "bad label name {k:?}");
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label_value(v));
            }
            self.out.push('}');
        }
        self.out.push(' ');
        self.out.push_str(&format_value(value));
        self.out.push('\n');
    }

    /// A family of one sample without labels.
    pub(crate) fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// A histogram's samples from per-bucket (not cumulative) counts:
    /// `bounds.len() + 1` of them, the last for +Inf.
    pub(crate) fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        bounds: &[f64],
        per_bucket: &[u64],
        sum: f64,
    ) {
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, n) in per_bucket.iter().enumerate() {
            cumulative = cumulative.saturating_add(*n);
            let le = bounds
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |b| format_value(*b));
            let mut with_le: Vec<(&str, &str)> = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, cumulative as f64);
        }
        self.sample(&format!("{name}_sum"), labels, sum);
        self.sample(&format!("{name}_count"), labels, cumulative as f64);
    }

    pub(crate) fn finish(self) -> String {
        self.out
    }
}

/// A value as Go's `strconv.ParseFloat` reads it: integers without a
/// fraction, `+Inf`, `-Inf`, `NaN`.
pub(crate) fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        // Rust's shortest round-trip form: `1`, `0.005`, `1e21`.
        format!("{v}")
    }
}

/// Label values escape backslash, double quote and line feed.
pub(crate) fn escape_label_value(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// HELP text escapes backslash and line feed only.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`
fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`
fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut e = Exposition::default();
        e.family("x_total", Kind::Counter, "a \\ b\nc");
        e.sample("x_total", &[("tool", "a\"b\\c\nd"), ("k", "東京")], 3.0);
        assert_eq!(
            e.finish(),
            "# HELP x_total a \\\\ b\\nc\n# TYPE x_total counter\nx_total{tool=\"a\\\"b\\\\c\\nd\",k=\"東京\"} 3\n"
        );
    }

    #[test]
    fn values_read_back_as_go_floats() {
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(2.0), "2");
        assert_eq!(format_value(0.005), "0.005");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(1e21).parse::<f64>().unwrap(), 1e21);
    }
}
