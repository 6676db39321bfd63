//! Human durations in config files: `"250ms"`, `"2s"`, `"1.5s"`, `"5m"`, `"1h"`.
//!
//! A small parser of our own instead of a crate, so that the error can say
//! exactly what is allowed in the words of this config format.

use std::time::Duration;

/// What every duration error ends with, so users learn the format at once.
pub(crate) const ALLOWED: &str =
    "a number followed by a unit: ms, s, m or h (for example \"250ms\", \"2s\", \"1.5m\")";

/// Parses a duration such as `"250ms"` or `"1.5s"`. Zero is allowed here;
/// callers that need a positive value check that themselves.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: expected {ALLOWED}"))?;
    let scale = match unit.trim() {
        "ms" => 0.001,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "" => {
            return Err(format!(
                "`{text}` has no unit: expected {ALLOWED}; bare numbers are ambiguous"
            ));
        }
        other => {
            return Err(format!(
                "`{text}` has an unknown unit `{other}`: expected {ALLOWED}"
            ));
        }
    };
    let secs = value * scale;
    // One year is far beyond any sensible setting and keeps the value
    // representable.
    if !secs.is_finite() || secs > 31_536_000.0 {
        return Err(format!("`{text}` is too long: at most one year"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Formats a duration the way the config accepts it, for messages.
pub(crate) fn display(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) || ms == 0 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else {
        format!("{}s", ms / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse(" 3 s "), Ok(Duration::from_secs(3)));
    }

    #[test]
    fn rejects_with_the_allowed_format() {
        for bad in ["", "s", "2", "2 parsecs", "-1s", "1..2s", "1e3s"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("ms, s, m or h"), "{bad}: {err}");
        }
        assert!(parse("99999999h").unwrap_err().contains("too long"));
    }

    #[test]
    fn display_round_trips() {
        for d in [250, 1000, 60_000, 3_600_000, 1500] {
            let d = Duration::from_millis(d);
            assert_eq!(parse(&display(d)), Ok(d));
        }
    }
}
