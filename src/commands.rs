//! The subcommands, carried out: each one's runtime, its outcome and the
//! exit code that says it.
//!
//! Two stages, so that the binary keeps only parsing and logging:
//! [`Invocation::prepare`] takes the parsed command line and loads what the
//! logging depends on (the daemon's config), and [`Invocation::run`] runs
//! the command and maps its outcome to the exit codes `main.rs` lists.
//! Output goes to stdout (a closed pipe is not an error) and failures to
//! stderr; everything else is the library function that owns the command.

use std::error::Error;
use std::future::Future;
use std::io::Write;
use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use crate::cli::{
    AuthAction, AuthArgs, CallArgs, CheckArgs, Cli, Command, DemoArgs, DevMcpArgs, DevServerArgs,
    SchemaOf, StatusArgs,
};
use crate::config::AgentConfig;
use crate::logging::LogFormat;
use crate::{admin, check, config, daemon, demo, devmcp, devserver, diag, systemd};

/// Exit status for an invalid config (sysexits' EX_CONFIG); the systemd
/// unit does not restart on it.
pub(crate) const EX_CONFIG: u8 = 78;

/// Exit status of a command that could not do its job: `status` without an
/// admin endpoint, `call` that could not call.
const EX_CLIENT_FAILURE: u8 = 2;

/// The logging a command wants, for `logging::init`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub format: LogFormat,
    /// The config's level (or the command's own).
    pub level: String,
    /// A level given on the command line, which wins over `RUST_LOG`.
    pub flag_level: Option<String>,
}

/// A parsed subcommand, ready to run: for `run`, with its config loaded
/// and valid.
#[derive(Debug)]
pub struct Invocation {
    command: Prepared,
    log: Option<LogSettings>,
}

#[derive(Debug)]
enum Prepared {
    Check(CheckArgs),
    Run {
        config: Box<AgentConfig>,
        /// `--stop-on-stdin-eof`.
        stop_on_stdin_eof: bool,
    },
    Demo(DemoArgs),
    Status(StatusArgs),
    Call(CallArgs),
    Auth(AuthArgs),
    DevServer(DevServerArgs),
    DevMcp(DevMcpArgs),
    DevHandler,
    Schema(SchemaOf),
}

/// The whole command line carried out: what the binary's `main` does, and
/// the demo example's (`cargo run --example demo`, which runs on the tests'
/// build).
pub fn main(cli: Cli) -> ExitCode {
    let invocation = match Invocation::prepare(cli) {
        Ok(invocation) => invocation,
        Err(code) => return code,
    };
    if let Some(log) = invocation.log_settings() {
        crate::logging::init(log.format, &log.level, log.flag_level.as_deref());
    }
    invocation.run()
}

impl Invocation {
    /// Loads what the command needs before logging can start. An invalid
    /// daemon config is printed with every problem and ends here, with
    /// [`EX_CONFIG`].
    pub fn prepare(cli: Cli) -> Result<Self, ExitCode> {
        let (command, log) = match cli.command {
            Command::Check(args) => (Prepared::Check(args), None),
            Command::Status(args) => (Prepared::Status(args), None),
            Command::Call(args) => (Prepared::Call(args), None),
            Command::Auth(args) => (Prepared::Auth(args), None),
            Command::DevServer(args) => (Prepared::DevServer(args), Some(text_log("info", None))),
            // Warnings only: its stderr ends up in the sidecar's log, line by
            // line, and rmcp logs every message at info.
            Command::DevMcp(args) => (Prepared::DevMcp(args), Some(text_log("warn", None))),
            Command::DevHandler => (Prepared::DevHandler, None),
            Command::Schema(args) => (Prepared::Schema(args.of), None),
            Command::Demo(args) => {
                // rmcp off: the in-process stand-in MCP server's session
                // ends with the demo, which rmcp reports as an error; the
                // sidecar's own lines say what happens to its sessions.
                let level = if args.verbose {
                    "info,rmcp=off"
                } else {
                    "warn,rmcp=off"
                };
                let log = text_log(level, Some(level));
                (Prepared::Demo(args), Some(log))
            }
            Command::Run(args) => {
                let (cfg, diags) = config::load(&args.config);
                for d in &diags {
                    eprintln!("{d}");
                }
                let Some(cfg) = cfg else {
                    eprintln!(
                        "neko-sidecar: the agent config {} is invalid; `neko-sidecar check --config {}` lists every problem",
                        args.config.display(),
                        args.config.display()
                    );
                    return Err(ExitCode::from(EX_CONFIG));
                };
                let format = match args.log_format.as_deref() {
                    Some("json") => LogFormat::Json,
                    Some(_) => LogFormat::Text,
                    None => cfg.log.format,
                };
                let log = LogSettings {
                    format,
                    level: cfg.log.level.clone(),
                    flag_level: args.log_level,
                };
                let run = Prepared::Run {
                    config: Box::new(cfg),
                    stop_on_stdin_eof: args.stop_on_stdin_eof,
                };
                (run, Some(log))
            }
        };
        Ok(Self { command, log })
    }

    /// The logging to install before [`run`](Self::run); `None` for the
    /// commands that only print (`check`, `status`, `call`).
    pub fn log_settings(&self) -> Option<&LogSettings> {
        self.log.as_ref()
    }

    /// Runs the command to its end and says how it went.
    pub fn run(self) -> ExitCode {
        match self.command {
            Prepared::Check(args) => {
                let loaded = check::load_all(&args.config);
                let (text, ok) = check::render(&loaded, args.verbose);
                print_or_exit(&text);
                let probed = match (&loaded.desired, args.probe) {
                    (Some(desired), true) => match on_runtime(check::probe(desired)) {
                        Ok((text, probe_ok)) => {
                            print_or_exit(&text);
                            probe_ok
                        }
                        Err(e) => {
                            eprintln!("neko-sidecar: cannot start the async runtime: {e}");
                            false
                        }
                    },
                    _ => true,
                };
                exit_unless(ok && probed, 1)
            }
            Prepared::Run {
                config,
                stop_on_stdin_eof,
            } => {
                // Before the runtime: signal settings the daemon inherited
                // are put right, and the guardian forked while the process
                // is small (src/os).
                crate::os::prepare_daemon_process();
                block_on(run_daemon(*config, stop_on_stdin_eof))
            }
            Prepared::Demo(args) => {
                let opts = demo::DemoOptions {
                    keep_running: args.keep_running,
                    report: args.report,
                };
                let mut all_ok = true;
                let code = block_on(async {
                    all_ok = demo::run(opts).await?;
                    Ok(())
                });
                if code == ExitCode::SUCCESS && !all_ok {
                    ExitCode::from(1)
                } else {
                    code
                }
            }
            Prepared::Status(args) => {
                match client_command(admin::status(
                    &args.config,
                    args.admin.as_deref(),
                    args.json,
                    args.calls,
                )) {
                    Ok(report) => {
                        print_or_exit(&report.text);
                        exit_unless(report.ready, 1)
                    }
                    Err(code) => code,
                }
            }
            Prepared::Call(args) => {
                let opts = admin::CallOptions {
                    tool: args.tool,
                    args: args.args,
                    raw_args: args.raw_args,
                };
                match client_command(admin::call(&args.config, args.admin.as_deref(), &opts)) {
                    Ok(report) => {
                        let text = serde_json::to_string_pretty(&report.answer)
                            .unwrap_or_else(|_| report.answer.to_string());
                        print_or_exit(&format!("{text}\n"));
                        exit_unless(!report.is_error, 1)
                    }
                    Err(code) => code,
                }
            }
            Prepared::Auth(args) => {
                let admin = args.admin.as_deref();
                let r = match &args.action {
                    AuthAction::Login { name, no_browser } => {
                        client_command(admin::auth_login(&args.config, admin, name, !no_browser))
                    }
                    AuthAction::Logout { name } => {
                        client_command(admin::auth_logout(&args.config, admin, name))
                    }
                    AuthAction::List => client_command(admin::auth_list(&args.config, admin)),
                };
                match r {
                    Ok(report) => {
                        print_or_exit(&report.text);
                        exit_unless(report.ok, 1)
                    }
                    Err(code) => code,
                }
            }
            Prepared::DevServer(args) => block_on(async move {
                devserver::run_cli(args).await?;
                Ok(())
            }),
            Prepared::DevMcp(args) => block_on(async move {
                devmcp::run_cli(args).await?;
                Ok(())
            }),
            Prepared::Schema(of) => {
                let text = match of {
                    SchemaOf::Manifest => crate::editor_schemas::MANIFEST,
                    SchemaOf::Config => crate::editor_schemas::CONFIG,
                };
                // A reader that stops early (`| head`) is no failure.
                match std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("neko-sidecar schema: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
            Prepared::DevHandler => {
                match std::io::copy(&mut std::io::stdin().lock(), &mut std::io::stdout().lock()) {
                    Ok(_) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("neko-sidecar dev-handler: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
        }
    }
}

fn text_log(level: &str, flag_level: Option<&str>) -> LogSettings {
    LogSettings {
        format: LogFormat::Text,
        level: level.to_owned(),
        flag_level: flag_level.map(str::to_owned),
    }
}

/// Success when `ok`, otherwise `code`.
fn exit_unless(ok: bool, code: u8) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(code)
    }
}

/// `neko-sidecar run`: the daemon until SIGTERM/SIGINT (or, with
/// `stop_on_stdin_eof`, the end of stdin).
async fn run_daemon(cfg: AgentConfig, stop_on_stdin_eof: bool) -> Result<(), Box<dyn Error>> {
    let notifier = systemd::Notifier::from_env().unwrap_or_else(|e| {
        tracing::warn!("systemd notifications are off: {e}");
        systemd::Notifier::disabled()
    });
    let shutdown = CancellationToken::new();
    // Signal handlers first: a SIGTERM during start-up must still run the
    // shutdown path, not kill the process with its tools registered.
    let (reload_tx, reload_rx) = daemon::reload_channel();
    daemon::signals::install(shutdown.clone(), reload_tx.clone())?;
    if stop_on_stdin_eof {
        daemon::signals::follow_stdin(shutdown.clone());
    }
    let opts = daemon::DaemonOptions {
        notifier: Some(notifier),
        callback_listener: None,
        reloads: Some((reload_tx, reload_rx)),
    };
    let daemon = daemon::start(cfg, opts, shutdown.clone()).await?;
    admin::start_for(&daemon, &shutdown).await;
    daemon.wait().await;
    Ok(())
}

/// Runs a future on a fresh single-threaded runtime.
///
/// One thread is enough for every command: the daemon's work (calls that
/// mostly wait for handlers, the engine, reloads, the admin endpoint) is
/// waiting, and a work-stealing pool would cost an idle daemon a thread per
/// CPU, each with its stack and allocator heap (BENCHMARKS.md, "Idle").
/// Blocking work (reading manifests) goes to `spawn_blocking`.
fn on_runtime<F: Future>(fut: F) -> Result<F::Output, std::io::Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(runtime.block_on(fut))
}

/// Runs `status` or `call`; one that could not do its job exits 2.
fn client_command<T, E: std::fmt::Display>(
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, ExitCode> {
    let failure = |e: &dyn std::fmt::Display| {
        eprintln!("neko-sidecar: {e}");
        ExitCode::from(EX_CLIENT_FAILURE)
    };
    match on_runtime(fut) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(failure(&e)),
        Err(e) => Err(failure(&e)),
    }
}

/// Runs a command on [`on_runtime`] and maps its result.
fn block_on(fut: impl Future<Output = Result<(), Box<dyn Error>>>) -> ExitCode {
    match on_runtime(fut) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("neko-sidecar: {}", diag::with_causes(e.as_ref()));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("neko-sidecar: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints to stdout; a closed pipe (`check | head`) is not an error.
fn print_or_exit(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("neko-sidecar: cannot write to stdout: {e}");
        }
    }
}
