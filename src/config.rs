//! The agent config (`agent.toml`): the validated settings of one sidecar.
//!
//! Two stages, as everywhere: the spanned TOML document is walked by
//! `tomldoc::TableReader` (collecting every problem with its place), then the
//! values are checked and an `AgentConfig` is built, or nothing is. Defaults
//! live here and only here; `agent.toml.example` documents them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::de::DeTable;

use crate::contract::is_loopback_ip;
use crate::diag::{Diagnostic, SourceText};
use crate::logging::{LogFormat, parse_filter};
use crate::tomldoc::{self, TableReader};

pub(crate) const DEFAULT_MAIN_SERVER_URL: &str = "http://127.0.0.1:48911";

/// The default `[handlers] max_output_bytes`: 8 MiB.
pub(crate) const DEFAULT_MAX_OUTPUT_BYTES: usize = 8 << 20;

/// What to do when a tool name we want is registered by someone else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictPolicy {
    /// Leave the other owner's registration alone and report a conflict.
    Yield,
    /// Register ours again, rate-limited so two agents cannot flap.
    Reclaim,
}

/// Where main_server is and how long to wait for it.
#[derive(Debug, Clone, PartialEq)]
pub struct MainServerConfig {
    /// Base URL, without a trailing slash (main_server answers 307 to one).
    pub url: String,
    pub request_timeout: Duration,
}

/// The listener main_server calls back into.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackConfig {
    /// Always a loopback address: main_server refuses other callback hosts.
    pub listen: SocketAddr,
    /// Larger callback bodies are refused with 413.
    pub max_body_bytes: usize,
    /// For a request head from its first byte, and a body from its head.
    pub read_timeout: Duration,
    /// A connection without a request is closed after this.
    pub idle_timeout: Duration,
    /// Connections held at once; at the bound the longest idle one closes.
    pub max_connections: usize,
    /// The memory all callback bodies being read or answered may hold
    /// together (at least `max_body_bytes`).
    pub max_body_memory: usize,
}

/// Limits for local handlers.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlersConfig {
    /// How much of an exec handler's stdout (or an http handler's body) is read.
    pub max_output_bytes: usize,
    /// Between SIGTERM and SIGKILL for an exec handler past its deadline.
    pub kill_grace: Duration,
    pub allow_remote: bool,
}

/// How registrations are kept.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistrationConfig {
    pub poll_interval: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub max_in_flight: usize,
    pub conflict_policy: ConflictPolicy,
    /// Under `reclaim`, the least time between two reclaims of one tool.
    pub reclaim_interval: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A tracing filter directive, e.g. "info" or "neko_sidecar=debug".
    pub level: String,
}

/// The whole validated agent config.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// The file it came from, for messages.
    pub path: PathBuf,
    /// The tag on every registration of this sidecar; how it knows its own.
    pub source: String,
    /// Absolute manifest directories, in the order given.
    pub manifest_dirs: Vec<PathBuf>,
    pub main_server: MainServerConfig,
    pub callback: CallbackConfig,
    pub handlers: HandlersConfig,
    pub registration: RegistrationConfig,
    pub shutdown_deadline: Duration,
    pub log: LogConfig,
    pub admin: AdminConfig,
    pub reload: ReloadConfig,
}

/// The operator's endpoints (`/healthz`, `/readyz`, `/status`, `/metrics`).
#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    /// Loopback only; `None` when disabled with `listen = ""`. A fixed port
    /// by default, so `neko-sidecar status` finds it from the config alone.
    pub listen: Option<SocketAddr>,
    /// Where the daemon writes its identity token (readable only by its
    /// user), with which `neko-sidecar call` checks that the process on
    /// the admin port is this config's sidecar. `None`: not written, and
    /// `call` says it did not check.
    pub token_file: Option<PathBuf>,
    /// How many of the last calls the call history keeps in memory; 0
    /// keeps none.
    pub call_history: usize,
}

pub(crate) const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:48931";

/// How manifest changes are noticed.
#[derive(Debug, Clone, PartialEq)]
pub struct ReloadConfig {
    /// Quiet time after a file event before the directories are re-read.
    pub debounce: Duration,
    /// The safety net for lost events: a full content-hash rescan this often.
    pub rescan_interval: Duration,
}

const TOP_KEYS: &[&str] = &[
    "source",
    "manifest_dirs",
    "allow_remote_handlers",
    "main_server",
    "callback",
    "handlers",
    "registration",
    "shutdown",
    "log",
    "admin",
    "reload",
];

/// Reads and validates a config file. Returns the config (when it has no
/// errors) and every diagnostic, warnings included.
pub fn load(path: &Path) -> (Option<AgentConfig>, Vec<Diagnostic>) {
    complete(load_partial(path))
}

/// Like `load`, but a config with errors still comes back, its bad values
/// replaced by defaults (and an empty `source` when that was the problem), so
/// that `check` can go on to the manifests and report everything at once.
/// `None` only when the file cannot be read or is not TOML. Never run a
/// daemon on a partial config.
pub(crate) fn load_partial(path: &Path) -> (Option<AgentConfig>, Vec<Diagnostic>) {
    match crate::diag::read_utf8(path, "the agent config") {
        Ok(text) => parse_partial(path, &text),
        Err(d) => (None, vec![d]),
    }
}

/// Validates config text; `path` locates messages and anchors relative paths.
pub fn parse(path: &Path, text: &str) -> (Option<AgentConfig>, Vec<Diagnostic>) {
    complete(parse_partial(path, text))
}

/// No config at all once any diagnostic is an error.
fn complete(
    (cfg, diags): (Option<AgentConfig>, Vec<Diagnostic>),
) -> (Option<AgentConfig>, Vec<Diagnostic>) {
    let cfg = cfg.filter(|_| !diags.iter().any(Diagnostic::is_error));
    (cfg, diags)
}

fn parse_partial(path: &Path, text: &str) -> (Option<AgentConfig>, Vec<Diagnostic>) {
    let src = SourceText::new(path, text);
    let mut diags = Vec::new();
    let doc = match tomldoc::parse(&src) {
        Ok(d) => d,
        Err(d) => return (None, vec![d]),
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let cfg = build(&src, doc.get_ref(), doc.span(), base, &mut diags);
    (Some(cfg), diags)
}

fn build(
    src: &SourceText<'_>,
    doc: &DeTable<'_>,
    span: std::ops::Range<usize>,
    base: &Path,
    diags: &mut Vec<Diagnostic>,
) -> AgentConfig {
    let mut top = TableReader::new(src, doc, span.start..span.start, "the agent config", diags);
    top.deny_unknown(TOP_KEYS);

    let source = match top.string("source") {
        None if top.get("source").is_none() => {
            top.missing(
                "source",
                "set a tag unique to this sidecar, e.g. source = \"plugin:weather\"",
            );
            None
        }
        None => None,
        Some((s, sp)) => validate_source(&mut top, s, &sp),
    };

    let manifest_dirs = match top.string_array("manifest_dirs") {
        Some((dirs, sp)) => {
            if dirs.is_empty() {
                top.error(
                    &sp,
                    "`manifest_dirs` is empty: list at least one directory of tool manifests",
                );
            }
            for (d, dsp) in &dirs {
                if let Some(why) = crate::os::Platform::CURRENT.foreign_path(d) {
                    top.error(dsp, format!("manifest directory \"{d}\": {why}"));
                }
            }
            dirs.into_iter()
                .map(|(d, _)| absolutize(base, &d))
                .collect()
        }
        None if top.get("manifest_dirs").is_none() => vec![absolutize(base, "tools.d")],
        None => Vec::new(),
    };
    let allow_remote = top.boolean("allow_remote_handlers").is_some_and(|(b, _)| b);

    let main_server = section(&mut top, "main_server", |r| {
        r.deny_unknown(&["url", "request_timeout"]);
        let url = r
            .string("url")
            .and_then(|(u, sp)| validate_main_server_url(r, u, &sp))
            // Unset: where N.E.K.O says main_server is (its launcher's
            // port choice, inherited through the environment).
            .unwrap_or_else(|| crate::contract::main_server_url(|k| std::env::var(k).ok()));
        let request_timeout = positive(r, "request_timeout", Duration::from_secs(5));
        MainServerConfig {
            url,
            request_timeout,
        }
    });

    let callback = section(&mut top, "callback", |r| {
        if let Some((_, sp)) = r.integer("workers") {
            // Removed, not refused: a config that set it still starts.
            r.warning(
                &sp,
                "`workers` in [callback] is no longer used (the callback server runs on the daemon's runtime); delete the line",
            );
        }
        r.deny_unknown(&[
            "listen",
            "max_body_bytes",
            "read_timeout",
            "idle_timeout",
            "max_connections",
            "max_body_memory",
            "workers",
        ]);
        let listen = match r.string("listen") {
            Some((s, sp)) => validate_listen(r, "[callback]", &s, &sp),
            None => default_listen(),
        };
        let max_body_bytes = byte_limit(r, "max_body_bytes", 1 << 20);
        CallbackConfig {
            listen,
            max_body_bytes,
            read_timeout: positive(r, "read_timeout", Duration::from_secs(20)),
            idle_timeout: positive(r, "idle_timeout", Duration::from_secs(60)),
            max_connections: integer_in(
                r,
                "max_connections",
                16..=1_000_000,
                1024,
                "16 to 1000000",
            ),
            // Below one largest body it could never take one: raised to it.
            max_body_memory: byte_limit(r, "max_body_memory", 64 << 20).max(max_body_bytes),
        }
    });

    let handlers = section(&mut top, "handlers", |r| {
        r.deny_unknown(&["max_output_bytes", "kill_grace"]);
        HandlersConfig {
            // What main_server accepts must get through: two images of
            // 2 MiB of base64 each, plus the output around them.
            max_output_bytes: byte_limit(r, "max_output_bytes", DEFAULT_MAX_OUTPUT_BYTES),
            kill_grace: positive(r, "kill_grace", Duration::from_secs(2)),
            allow_remote,
        }
    });

    let registration = section(&mut top, "registration", |r| {
        r.deny_unknown(&[
            "poll_interval",
            "backoff_initial",
            "backoff_max",
            "max_in_flight",
            "conflict_policy",
            "reclaim_interval",
        ]);
        let poll_interval = positive(r, "poll_interval", Duration::from_secs(5));
        let backoff_initial = positive(r, "backoff_initial", Duration::from_millis(500));
        let backoff_max = positive(r, "backoff_max", Duration::from_secs(30));
        if backoff_initial > backoff_max {
            let sp = r
                .get("backoff_initial")
                .or_else(|| r.get("backoff_max"))
                .map(|i| i.span())
                .unwrap_or(r.span.clone());
            r.error(
                &sp,
                format!(
                    "`backoff_initial` ({}) is larger than `backoff_max` ({}): the first delay must not exceed the cap",
                    crate::duration::display(backoff_initial),
                    crate::duration::display(backoff_max)
                ),
            );
        }
        let max_in_flight = integer_in(r, "max_in_flight", 1..=1024, 16, "1 to 1024");
        let conflict_policy = match r.string("conflict_policy") {
            Some((s, _)) if s == "yield" => ConflictPolicy::Yield,
            Some((s, _)) if s == "reclaim" => ConflictPolicy::Reclaim,
            Some((s, sp)) => {
                r.error(
                    &sp,
                    format!("`conflict_policy` is \"{s}\": allowed values are \"yield\" (leave another owner's tool alone) and \"reclaim\" (register ours again, rate-limited)"),
                );
                ConflictPolicy::Yield
            }
            None => ConflictPolicy::Yield,
        };
        let reclaim_interval = positive(r, "reclaim_interval", Duration::from_secs(60));
        RegistrationConfig {
            poll_interval,
            backoff_initial,
            backoff_max,
            max_in_flight,
            conflict_policy,
            reclaim_interval,
        }
    });

    let shutdown_deadline = section(&mut top, "shutdown", |r| {
        r.deny_unknown(&["deadline"]);
        positive(r, "deadline", Duration::from_secs(5))
    });

    let log = section(&mut top, "log", |r| {
        r.deny_unknown(&["format", "level"]);
        let format = match r.string("format") {
            Some((s, _)) if s == "text" => LogFormat::Text,
            Some((s, _)) if s == "json" => LogFormat::Json,
            Some((s, sp)) => {
                r.error(
                    &sp,
                    format!("`format` is \"{s}\": allowed values are \"text\" and \"json\""),
                );
                LogFormat::Text
            }
            None => LogFormat::Text,
        };
        let level = match r.string("level") {
            Some((s, sp)) => {
                // A bare word is a target name to EnvFilter, so a typo such as
                // "inof" would silently mean "nothing": bare words must be levels.
                let bare = !s.contains(['=', ',']);
                let is_level = matches!(
                    s.to_ascii_lowercase().as_str(),
                    "error" | "warn" | "info" | "debug" | "trace" | "off"
                );
                if (bare && !is_level) || parse_filter(&s).is_none() {
                    r.error(
                        &sp,
                        format!("`level` \"{s}\" is not a log level: use error, warn, info, debug, trace or off (or a tracing directive such as \"neko_sidecar=debug\")"),
                    );
                }
                s
            }
            None => "info".to_string(),
        };
        LogConfig { format, level }
    });

    let admin = section(&mut top, "admin", |r| {
        r.deny_unknown(&["listen", "token_file", "call_history"]);
        let listen = match r.string("listen") {
            Some((s, _)) if s.is_empty() => None,
            Some((s, sp)) => Some(validate_listen(r, "[admin]", &s, &sp)),
            None => DEFAULT_ADMIN_LISTEN.parse().ok(),
        };
        let token_file = match r.string("token_file") {
            Some((s, _)) if s.is_empty() => None,
            Some((s, _)) => Some(runtime_path(&absolutize(base, &s))),
            None => None,
        };
        let call_history = integer_in(
            r,
            "call_history",
            0..=crate::admin::history::MAX_CALLS as i64,
            crate::admin::history::DEFAULT_CALLS,
            "0 (off) to 10000",
        );
        AdminConfig {
            listen,
            token_file,
            call_history,
        }
    });

    let reload = section(&mut top, "reload", |r| {
        r.deny_unknown(&["debounce", "rescan_interval"]);
        ReloadConfig {
            debounce: positive(r, "debounce", Duration::from_millis(200)),
            rescan_interval: positive(r, "rescan_interval", Duration::from_secs(30)),
        }
    });

    AgentConfig {
        path: src.path.to_path_buf(),
        source: source.unwrap_or_default(),
        manifest_dirs,
        main_server,
        callback,
        handlers,
        registration,
        shutdown_deadline,
        log,
        admin,
        reload,
    }
}

/// Reads an optional sub-table with `f`; an absent table reads as empty so
/// that `f` fills in every default in one place.
fn section<T>(
    top: &mut TableReader<'_, '_>,
    key: &str,
    f: impl FnOnce(&mut TableReader<'_, '_>) -> T,
) -> T {
    let empty = DeTable::new();
    let (table, span) = match top.table(key) {
        Some((t, sp)) => (t, sp),
        None => (&empty, top.span.clone()),
    };
    let src = top.src;
    let mut r = TableReader::new(src, table, span, format!("[{key}]"), top.diags);
    f(&mut r)
}

fn positive(r: &mut TableReader<'_, '_>, key: &str, default: Duration) -> Duration {
    match r.duration(key) {
        Some((d, sp)) if d.is_zero() => {
            r.error(
                &sp,
                format!("`{key}` in {} must be greater than zero", r.what),
            );
            default
        }
        Some((d, _)) => d,
        None => default,
    }
}

fn byte_limit(r: &mut TableReader<'_, '_>, key: &str, default: usize) -> usize {
    integer_in(
        r,
        key,
        1024..=(256 << 20),
        default,
        "1024 to 268435456 bytes (1 KiB to 256 MiB)",
    )
}

/// The integer `key` within `range` (`default` when absent); out of it, an
/// error saying `allowed`.
fn integer_in(
    r: &mut TableReader<'_, '_>,
    key: &str,
    range: std::ops::RangeInclusive<i64>,
    default: usize,
    allowed: &str,
) -> usize {
    match r.integer(key) {
        Some((n, _)) if range.contains(&n) => n as usize,
        Some((n, sp)) => {
            r.error(&sp, format!("`{key}` is {n}: allowed values are {allowed}"));
            default
        }
        None => default,
    }
}

fn validate_source(
    r: &mut TableReader<'_, '_>,
    s: String,
    sp: &std::ops::Range<usize>,
) -> Option<String> {
    if s.is_empty() {
        r.error(sp, "`source` is empty: main_server requires at least 1 character; use e.g. \"plugin:weather\"");
        return None;
    }
    if s == crate::contract::BUILTIN_SOURCE {
        r.error(
            sp,
            "`source` must not be \"builtin\": that is main_server's own tag, and clearing our tools on shutdown would delete its built-in tools",
        );
        return None;
    }
    if !s.starts_with("plugin:") {
        r.warning(
            sp,
            format!("`source` \"{s}\" does not start with \"plugin:\": main_server evicts dead callbacks only for plugin: sources, so if this sidecar dies its tools stay listed and fail at every call until it returns"),
        );
    }
    Some(s)
}

fn validate_main_server_url(
    r: &mut TableReader<'_, '_>,
    url: String,
    sp: &std::ops::Range<usize>,
) -> Option<String> {
    match reqwest::Url::parse(&url) {
        Ok(u) if u.scheme() == "http" && u.host().is_some() => {
            if u.query().is_some() || u.fragment().is_some() {
                r.error(
                    sp,
                    "`url` in [main_server] must not have a query or fragment",
                );
                return None;
            }
            // main_server's routes have no trailing slash and it answers 307
            // to one; keep the base without it so joins are exact. The
            // parsed form, not the text: the parser drops surrounding
            // spaces and tabs, and `"http://h/ "` kept as written would
            // join to `http://h/%20/api/tools`.
            Some(u.as_str().trim_end_matches('/').to_string())
        }
        Ok(u) if u.scheme() == "https" => {
            r.error(sp, "`url` in [main_server] uses https: main_server is reached over loopback and this build speaks plain http only; use e.g. \"http://127.0.0.1:48911\"");
            None
        }
        _ => {
            r.error(
                sp,
                format!("`url` in [main_server] is \"{url}\": expected an http URL such as \"{DEFAULT_MAIN_SERVER_URL}\""),
            );
            None
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn validate_listen(
    r: &mut TableReader<'_, '_>,
    section: &str,
    s: &str,
    sp: &std::ops::Range<usize>,
) -> SocketAddr {
    let addr = if let Some(port) = s.strip_prefix("localhost:") {
        port.parse::<u16>()
            .ok()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
    } else {
        s.parse::<SocketAddr>().ok()
    };
    let why = if section == "[callback]" {
        "main_server refuses callback URLs outside 127.0.0.0/8 and ::1"
    } else {
        "the admin endpoints are for this machine only"
    };
    match addr {
        Some(a) if is_loopback_ip(a.ip()) => a,
        Some(a) => {
            r.error(
                sp,
                format!("`listen` in {section} is {a}, which is not a loopback address: {why}, so use e.g. \"127.0.0.1:0\" (0 picks a free port)"),
            );
            default_listen()
        }
        None => {
            r.error(
                sp,
                format!("`listen` in {section} is \"{s}\": expected IP:PORT on loopback, e.g. \"127.0.0.1:48930\" or \"[::1]:0\" (0 picks a free port)"),
            );
            default_listen()
        }
    }
}

/// Resolves `p` against `base` unless it is already absolute.
/// `.` components are dropped so messages read `tools/x.sh`, not
/// `tools/./x.sh`; `..` is kept (dropping it would change the meaning across
/// symlinks).
pub(crate) fn absolutize(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    };
    let clean: PathBuf = joined
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect();
    if clean.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        clean
    }
}

/// The absolute form of a path, for what runs (a process's cwd or program),
/// where a path relative to our own working directory would break.
pub(crate) fn runtime_path(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_dir_written_for_another_platform_is_an_error_that_says_so() {
        let (dir, why) = if cfg!(windows) {
            ("/srv/tools", "it has no drive letter")
        } else {
            (r"C:\\plugins\\tools", "it is a Windows path, and this is ")
        };
        let e = errors(&format!(
            "source = \"plugin:w\"\nmanifest_dirs = [\"{dir}\"]\n"
        ));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("2:18: error: manifest directory "),
            "{}",
            e[0]
        );
        assert!(e[0].contains(why), "{}", e[0]);
    }

    fn parse_ok(text: &str) -> AgentConfig {
        let (cfg, diags) = parse(Path::new("/etc/x/agent.toml"), text);
        assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
        cfg.unwrap()
    }

    fn errors(text: &str) -> Vec<String> {
        let (cfg, diags) = parse(Path::new("a.toml"), text);
        let errs: Vec<String> = diags
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.to_string())
            .collect();
        assert!(cfg.is_none() || errs.is_empty());
        errs
    }

    #[test]
    fn defaults_fill_everything_but_source() {
        let c = parse_ok("source = \"plugin:w\"\n");
        assert_eq!(c.main_server.url, DEFAULT_MAIN_SERVER_URL);
        assert_eq!(c.main_server.request_timeout, Duration::from_secs(5));
        assert_eq!(c.callback.listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(c.callback.max_body_bytes, 1 << 20);
        assert_eq!(c.manifest_dirs, vec![PathBuf::from("/etc/x/tools.d")]);
        assert_eq!(c.registration.poll_interval, Duration::from_secs(5));
        assert_eq!(c.registration.conflict_policy, ConflictPolicy::Yield);
        assert_eq!(c.shutdown_deadline, Duration::from_secs(5));
        assert!(!c.handlers.allow_remote);
        assert_eq!(c.log.format, LogFormat::Text);
    }

    #[test]
    fn relative_dirs_resolve_against_the_config_folder() {
        // An absolute path as this platform writes one.
        let abs = if cfg!(windows) { "C:/abs" } else { "/abs" };
        let c = parse_ok(&format!(
            "source = \"plugin:w\"\nmanifest_dirs = [\"tools\", \"{abs}\"]\n"
        ));
        assert_eq!(
            c.manifest_dirs,
            vec![Path::new("/etc/x").join("tools"), PathBuf::from(abs)]
        );
    }

    #[test]
    fn trailing_slash_is_dropped_from_the_url() {
        let c = parse_ok("source = \"plugin:w\"\n[main_server]\nurl = \"http://127.0.0.1:9/\"\n");
        assert_eq!(c.main_server.url, "http://127.0.0.1:9");
    }

    #[test]
    fn callback_connection_limits_have_defaults_and_bounds() {
        let c = parse_ok("source = \"plugin:w\"\n").callback;
        assert_eq!(
            (c.read_timeout, c.idle_timeout, c.max_connections),
            (Duration::from_secs(20), Duration::from_secs(60), 1024)
        );
        let c = parse_ok(
            "source = \"plugin:w\"\n[callback]\nread_timeout = \"5s\"\nidle_timeout = \"2m\"\nmax_connections = 64\n",
        )
        .callback;
        assert_eq!(
            (c.read_timeout, c.idle_timeout, c.max_connections),
            (Duration::from_secs(5), Duration::from_secs(120), 64)
        );
        let e = errors("source = \"plugin:w\"\n[callback]\nmax_connections = 2\n");
        assert_eq!(
            e,
            ["a.toml:3:19: error: `max_connections` is 2: allowed values are 16 to 1000000"]
        );
    }

    #[test]
    fn the_call_history_is_a_few_hundred_calls_unless_set() {
        let c = parse_ok("source = \"plugin:w\"\n");
        assert_eq!(c.admin.call_history, crate::admin::history::DEFAULT_CALLS);
        let c = parse_ok("source = \"plugin:w\"\n[admin]\ncall_history = 0\n");
        assert_eq!(c.admin.call_history, 0);
        let e = errors("source = \"plugin:w\"\n[admin]\ncall_history = -1\n");
        assert_eq!(
            e,
            ["a.toml:3:16: error: `call_history` is -1: allowed values are 0 (off) to 10000"]
        );
    }

    #[test]
    fn the_removed_workers_key_is_a_warning_not_an_error() {
        let (cfg, diags) = parse(
            Path::new("a.toml"),
            "source = \"plugin:w\"\n[callback]\nworkers = 2\n",
        );
        assert!(cfg.is_some());
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert!(!diags[0].is_error());
        assert!(
            diags[0]
                .to_string()
                .contains("`workers` in [callback] is no longer used")
        );
    }
}
