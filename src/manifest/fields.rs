//! The readers of the keys that several tables share (`[[tool]]`,
//! `[[mcp_server]]`, `[[mcp_import]]` and its overrides, an exec handler):
//! a name, a timeout, a role, a concurrency bound, a command with its
//! working directory and environment, the MCP filters and prefix, and the
//! `${VAR}` expansion. One floor below the tables' own readers (`load`,
//! `mcp`, `import`, `remote`), which all use them and none of which this
//! module uses, so that no two of them depend on each other both ways.
//! Each reader records a located diagnostic for every problem and keeps
//! going, as `tomldoc` does.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::de::DeValue;

use super::{DEFAULT_STARTUP_TIMEOUT_SECONDS, MAX_STARTUP_TIMEOUT_SECONDS, Origin};
use crate::config::{absolutize, runtime_path};
use crate::diag::SourceText;
use crate::os::Platform;
use crate::tomldoc::{TableReader, type_name};

/// Settings from the agent config that change how manifests are judged.
#[derive(Debug, Clone, Default)]
pub struct LoadContext {
    /// Permit http handlers on non-loopback hosts.
    pub allow_remote_handlers: bool,
    /// The platform the manifests are judged for: features it lacks are
    /// errors. The one this build runs on, but for tests of other ones.
    pub platform: Platform,
}

/// The largest timeout main_server accepts.
pub(super) const MAX_TIMEOUT_SECONDS: f64 = 300.0;
const MAX_CONCURRENCY_LIMIT: i64 = 10_000;
/// The `name` of a `[[tool]]` or `[[mcp_server]]` (`kind`), checked by
/// main_server's rule; once good, messages name the table by it. `hint`
/// says what to write when it is missing.
pub(super) fn read_name(
    r: &mut TableReader<'_, '_>,
    kind: &str,
    hint: &str,
) -> Option<(String, Range<usize>)> {
    match r.string("name") {
        Some((n, sp)) => {
            if let Some(why) = name_problem(&n) {
                r.error(&sp, format!("{kind} name \"{n}\" is not allowed: {why}"));
            } else {
                r.what = format!("{kind} `{n}`");
            }
            Some((n, sp))
        }
        None => {
            if r.get("name").is_none() {
                r.missing("name", hint);
            }
            None
        }
    }
}

/// Where a table starting at `pos` of `src` was declared.
pub(super) fn origin(src: &SourceText<'_>, pos: crate::diag::Position) -> Origin {
    Origin {
        file: src.path.to_path_buf(),
        line: pos.line,
        col: pos.col,
    }
}

/// `timeout_seconds` (default 30): in (0, 300]; `None` after an error.
pub(super) fn read_timeout(r: &mut TableReader<'_, '_>) -> Option<f64> {
    match r.number("timeout_seconds") {
        Some((t, sp)) if t <= 0.0 || t > MAX_TIMEOUT_SECONDS => {
            let msg = format!(
                "`timeout_seconds` of {} is {t}: allowed values are greater than 0 and at most 300 (main_server's limit); work that takes longer should answer at once and report back another way",
                r.what
            );
            r.error(&sp, msg);
            None
        }
        Some((t, _)) => Some(t),
        None if r.get("timeout_seconds").is_some() => None,
        None => Some(30.0),
    }
}

/// `role`: `Some(None)` when absent (every role); `None` after an error.
pub(super) fn read_role(r: &mut TableReader<'_, '_>) -> Option<Option<String>> {
    match r.string("role") {
        Some((s, sp)) if s.is_empty() => {
            let msg = format!(
                "`role` of {} is the empty string: omit the key to offer the tool to every role",
                r.what
            );
            r.error(&sp, msg);
            None
        }
        Some((s, _)) => Some(Some(s)),
        None if r.get("role").is_some() => None,
        None => Some(None),
    }
}

/// `max_concurrency`: 1 to 10,000, absent for no limit.
pub(super) fn read_max_concurrency(r: &mut TableReader<'_, '_>) -> Option<NonZeroUsize> {
    match r.integer("max_concurrency") {
        Some((n, sp)) if !(1..=MAX_CONCURRENCY_LIMIT).contains(&n) => {
            let msg = format!(
                "`max_concurrency` of {} is {n}: allowed values are 1 to {MAX_CONCURRENCY_LIMIT} (omit it for no limit)",
                r.what
            );
            r.error(&sp, msg);
            None
        }
        Some((n, _)) => NonZeroUsize::new(n as usize),
        None => None,
    }
}

/// `[A-Za-z0-9_.\-]{1,64}`: the SDK's rule, since names go into URL paths;
/// but not `.` or `..`, which URL clients resolve away (RFC 3986 dot
/// segments): `/cb/TOKEN/..` is sent as `/cb/`.
pub fn valid_name(n: &str) -> bool {
    name_problem(n).is_none()
}

/// What is wrong with tool name `n`, for the error message; `None` if
/// nothing is.
fn name_problem(n: &str) -> Option<String> {
    if n == "." || n == ".." {
        return Some(format!(
            "HTTP clients resolve a path segment \"{n}\" away (RFC 3986 dot segments), so main_server could never reach its callback URL; add a letter or digit"
        ));
    }
    let ok = (1..=64).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    (!ok).then(|| {
        "use 1 to 64 characters from A-Z a-z 0-9 _ . - (main_server puts names in URL paths)"
            .to_string()
    })
}

/// `cwd`, made absolute against `base` (the manifest's folder, also the
/// default); `None` after an error.
pub(super) fn read_cwd(r: &mut TableReader<'_, '_>, base: &Path) -> Option<PathBuf> {
    match r.string("cwd") {
        Some((c, sp)) if c.contains('\0') => {
            let msg = format!(
                "`cwd` of {} contains a NUL byte (\\u0000), which no path can hold",
                r.what
            );
            r.error(&sp, msg);
            None
        }
        Some((c, sp)) => {
            let p = absolutize(base, &c);
            if p.is_dir() {
                Some(p)
            } else {
                let why = Platform::CURRENT
                    .foreign_path(&c)
                    .map(|w| format!(": {w}"))
                    .unwrap_or_default();
                let msg = format!(
                    "`cwd` of {} \"{c}\" is not a directory ({}){why}",
                    r.what,
                    p.display()
                );
                r.error(&sp, msg);
                None
            }
        }
        None if r.get("cwd").is_some() => None,
        None => Some(base.to_path_buf()),
    }
}

/// The argv, with a relative program path resolved against `cwd` (when
/// `cwd` is good) and made absolute for spawning. A bare program name is
/// looked up on `path_var` (the manifest's own `PATH`) or the sidecar's
/// PATH, as the call will look it up.
pub(super) fn read_command(
    r: &mut TableReader<'_, '_>,
    cwd: Option<&Path>,
    path_var: Option<&str>,
) -> Option<Vec<String>> {
    let Some((command, sp)) = r.string_array("command") else {
        if r.get("command").is_none() {
            r.missing(
                "command",
                "the argv to run per call, e.g. command = [\"python3\", \"weather.py\"] (no shell)",
            );
        }
        return None;
    };
    let Some((program, psp)) = command.first().cloned() else {
        let msg = format!(
            "`command` of {} is empty: give the program and its arguments, e.g. [\"python3\", \"weather.py\"]",
            r.what
        );
        r.error(&sp, msg);
        return None;
    };
    // A NUL byte ends a C string: no program can be given one, and std
    // would pass `<string-with-nul>` in its place.
    let mut nul = false;
    for (i, (arg, asp)) in command.iter().enumerate() {
        if arg.contains('\0') {
            let which = if i == 0 {
                "the program (first element of `command`)".to_string()
            } else {
                format!("argument {i} of `command`")
            };
            let msg = format!(
                "{which} of {} contains a NUL byte (\\u0000), which no program can be given",
                r.what
            );
            r.error(asp, msg);
            nul = true;
        }
    }
    if nul {
        return None;
    }
    let mut argv: Vec<String> = command.into_iter().map(|(s, _)| s).collect();
    if program.is_empty() {
        let msg = format!(
            "the program (first element of `command`) of {} is empty",
            r.what
        );
        r.error(&psp, msg);
        return None;
    }
    if Platform::CURRENT.is_program_path(&program) {
        let p = absolutize(cwd?, &program);
        let problem = if p.is_dir() {
            Some("is a directory, not a program".to_string())
        } else if !p.is_file() {
            let why = Platform::CURRENT
                .foreign_path(&program)
                .map(|w| format!(": {w}"))
                .unwrap_or_default();
            Some(format!("does not exist{why}"))
        } else if !is_executable(&p) {
            Some(format!(
                "is not executable: chmod +x it, or run it through its interpreter, e.g. [\"sh\", \"{program}\"]"
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            let msg = format!(
                "the program \"{program}\" of {} ({}) {problem}",
                r.what,
                p.display()
            );
            r.error(&psp, msg);
            return None;
        }
        argv[0] = runtime_path(&p).to_string_lossy().into_owned();
    } else if let Some(why) = Platform::CURRENT.foreign_path(&program) {
        let msg = format!("the program \"{program}\" of {}: {why}", r.what);
        r.error(&psp, msg);
        return None;
    } else if let Err(tried) = {
        // What the handlers' calls remembered is looked up again after a
        // load: a program may have been installed earlier on PATH.
        crate::os::forget_resolved_programs();
        crate::os::resolve_program(
            &program,
            cwd.unwrap_or(Path::new(".")),
            path_var.map(std::ffi::OsStr::new),
        )
    } {
        let msg = format!(
            "the program `{program}` of {} is {tried}; calls of this tool will fail until it is installed",
            r.what
        );
        r.warning(&psp, msg);
    }
    Some(argv)
}

pub(super) fn read_env(r: &mut TableReader<'_, '_>) -> Option<BTreeMap<String, String>> {
    let mut env = BTreeMap::new();
    let Some((t, _)) = r.table("env") else {
        return if r.get("env").is_some() {
            None
        } else {
            Some(env)
        };
    };
    let mut ok = true;
    for (k, v) in t.iter() {
        let key = k.get_ref().to_string();
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            r.error(&k.span(), format!("environment variable name \"{key}\" is not allowed: it must be non-empty with no `=` or NUL"));
            ok = false;
            continue;
        }
        match v.get_ref() {
            DeValue::String(s) if !s.contains('\0') => {
                env.insert(key, s.to_string());
            }
            DeValue::String(_) => {
                r.error(
                    &v.span(),
                    format!("environment variable `{key}` contains a NUL byte"),
                );
                ok = false;
            }
            other => {
                r.error(
                    &v.span(),
                    format!(
                        "environment variable `{key}` must be a string, found {}",
                        type_name(other)
                    ),
                );
                ok = false;
            }
        }
    }
    ok.then_some(env)
}

fn is_executable(p: &Path) -> bool {
    crate::os::is_executable(p)
}

/// Where a bare program name would be found on the sidecar's PATH, as a
/// call looks it up (with PATHEXT on Windows).
pub fn find_in_path(program: &str) -> Option<PathBuf> {
    which::which(program).ok()
}
/// `startup_timeout_seconds` (default 120): in (0, 3600]; `None` after an
/// error. The default leaves a first `npx -y` or `uvx` time to download its
/// server; a server that fetches a model at its first start may need more.
pub(super) fn read_startup_timeout(r: &mut TableReader<'_, '_>) -> Option<f64> {
    const KEY: &str = "startup_timeout_seconds";
    match r.number(KEY) {
        Some((t, sp)) if t <= 0.0 || t > MAX_STARTUP_TIMEOUT_SECONDS => {
            let msg = format!(
                "`{KEY}` of {} is {t}: allowed values are greater than 0 and at most {MAX_STARTUP_TIMEOUT_SECONDS} (how long the server may take to answer its first message)",
                r.what
            );
            r.error(&sp, msg);
            None
        }
        Some((t, _)) => Some(t),
        None if r.get(KEY).is_some() => None,
        None => Some(DEFAULT_STARTUP_TIMEOUT_SECONDS),
    }
}

/// `prefix`, when given and valid.
pub(super) fn read_prefix(r: &mut TableReader<'_, '_>) -> Option<String> {
    let (p, sp) = r.string("prefix")?;
    let ok = p
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !ok || p.len() > 63 {
        let msg = format!(
            "`prefix` \"{p}\" of {} is not allowed: use at most 63 characters from A-Z a-z 0-9 _ . - (it starts every tool name, which main_server puts in URL paths)",
            r.what
        );
        r.error(&sp, msg);
        None
    } else {
        Some(p)
    }
}

/// `include` (`Some(None)` when absent) and `exclude` (empty when
/// absent); `None` after an error.
#[allow(clippy::type_complexity)]
pub(super) fn read_filters(
    r: &mut TableReader<'_, '_>,
) -> (Option<Option<Vec<String>>>, Option<Vec<String>>) {
    let include = match r.string_array("include") {
        Some((list, sp)) if list.is_empty() => {
            let msg = format!(
                "`include` of {} is empty, which would offer no tool: list the MCP tools to offer, or omit the key to offer them all",
                r.what
            );
            r.error(&sp, msg);
            None
        }
        Some((list, _)) => Some(Some(list.into_iter().map(|(s, _)| s).collect())),
        None if r.get("include").is_some() => None,
        None => Some(None),
    };
    let exclude = match r.string_array("exclude") {
        Some((list, _)) => Some(list.into_iter().map(|(s, _)| s).collect()),
        None if r.get("exclude").is_some() => None,
        None => Some(Vec::new()),
    };
    (include, exclude)
}

/// `text` with each `${NAME}` replaced by `lookup(NAME)`; `$$` is a `$`.
/// A `$` before anything else stays as it is.
pub(crate) fn expand(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let Some(end) = tail.find('}') else {
                return Err(format!(
                    "`${{` without its closing `}}` in \"{text}\": write ${{NAME}}, or $$ for a literal $"
                ));
            };
            let var = &tail[..end];
            let good = var
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !good {
                return Err(format!(
                    "`${{{var}}}` is not a variable name: use A-Z a-z 0-9 _, not starting with a digit"
                ));
            }
            match lookup(var) {
                Some(v) => out.push_str(&v),
                None => {
                    return Err(format!(
                        "the environment variable `{var}` is not set: set it in the sidecar's environment (e.g. Environment= or EnvironmentFile= in its systemd unit), or write $$ for a literal $"
                    ));
                }
            }
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::expand;

    fn env(var: &str) -> Option<String> {
        (var == "TOKEN").then(|| "s3cret".to_string())
    }

    #[test]
    fn variables_are_expanded_and_dollars_escaped() {
        assert_eq!(expand("Bearer ${TOKEN}", env).unwrap(), "Bearer s3cret");
        assert_eq!(expand("$$5 and $x", env).unwrap(), "$5 and $x");
        assert_eq!(expand("plain", env).unwrap(), "plain");
    }

    #[test]
    fn a_missing_variable_or_a_bad_reference_is_an_error_that_names_it() {
        let e = expand("Bearer ${NOPE}", env).unwrap_err();
        assert!(e.contains("`NOPE` is not set"), "{e}");
        assert!(expand("${TOKEN", env).unwrap_err().contains("closing"));
        assert!(
            expand("${9X}", env)
                .unwrap_err()
                .contains("not a variable name")
        );
    }
}
