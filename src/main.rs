//! The `neko-sidecar` binary: parse the command line, set up logging, call the
//! library, and map the result to an exit code. Nothing else lives here.
//!
//! Exit codes: 0 success; 1 `check` found errors or a command failed;
//! 78 (EX_CONFIG) the daemon's config or manifests are invalid. `status`:
//! 1 not every tool registered, 2 admin endpoint unreachable or bad config;
//! `call`: 1 the model would see an error, 2 the call could not be made.

use std::future::Future;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use neko_sidecar::cli::{Cli, Command};
use neko_sidecar::logging::LogFormat;

/// mimalloc instead of glibc's malloc: every call allocates and frees a
/// few dozen small buffers, where glibc spent 11 % of the daemon's CPU
/// (BENCHMARKS.md, benchmark 1). Built with `no_thp`: with transparent huge
/// pages its arenas made an idle daemon 13 MiB larger (26 against 12 MiB
/// resident), against the goal of an idle daemon under 10 MiB.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check(args) => {
            let loaded = neko_sidecar::check::load_all(&args.config);
            let (text, ok) = neko_sidecar::check::render(&loaded, args.verbose);
            print_or_exit(&text);
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Run(args) => run(args),
        Command::Demo(args) => {
            let level = if args.verbose { "info" } else { "warn" };
            neko_sidecar::logging::init(LogFormat::Text, level, Some(level));
            let opts = neko_sidecar::demo::DemoOptions {
                keep_running: args.keep_running,
                report: args.report,
            };
            let mut all_ok = true;
            let code = block_on(async {
                all_ok = neko_sidecar::demo::run(opts).await?;
                Ok(())
            });
            if code == ExitCode::SUCCESS && !all_ok {
                ExitCode::from(1)
            } else {
                code
            }
        }
        Command::Status(args) => {
            let r = on_client_runtime(neko_sidecar::admin::status(
                &args.config,
                args.admin.as_deref(),
                args.json,
            ));
            match r {
                Ok(Ok(report)) => {
                    print_or_exit(&report.text);
                    ExitCode::from(if report.ready { 0 } else { 1 })
                }
                Ok(Err(e)) => client_failure(&e),
                Err(e) => client_failure(&e),
            }
        }
        Command::Call(args) => {
            let opts = neko_sidecar::admin::CallOptions {
                tool: args.tool,
                args: args.args,
                raw_args: args.raw_args,
            };
            let r = on_client_runtime(neko_sidecar::admin::call(
                &args.config,
                args.admin.as_deref(),
                &opts,
            ));
            match r {
                Ok(Ok(report)) => {
                    let text = serde_json::to_string_pretty(&report.answer)
                        .unwrap_or_else(|_| report.answer.to_string());
                    print_or_exit(&format!("{text}\n"));
                    ExitCode::from(if report.is_error { 1 } else { 0 })
                }
                Ok(Err(e)) => client_failure(&e),
                Err(e) => client_failure(&e),
            }
        }
        Command::DevServer(args) => {
            neko_sidecar::logging::init(LogFormat::Text, "info", None);
            block_on(async move { Ok(neko_sidecar::devserver::run_cli(args).await?) })
        }
    }
}

/// Exit status for an invalid config (sysexits' EX_CONFIG); the systemd
/// unit does not restart on it.
const EX_CONFIG: u8 = 78;

/// `neko-sidecar run`: the daemon until SIGTERM/SIGINT.
fn run(args: neko_sidecar::cli::RunArgs) -> ExitCode {
    let (cfg, diags) = neko_sidecar::config::load(&args.config);
    for d in &diags {
        eprintln!("{d}");
    }
    let Some(cfg) = cfg else {
        eprintln!(
            "neko-sidecar: the agent config {} is invalid; `neko-sidecar check --config {}` lists every problem",
            args.config.display(),
            args.config.display()
        );
        return ExitCode::from(EX_CONFIG);
    };
    let format = match args.log_format.as_deref() {
        Some("json") => LogFormat::Json,
        Some(_) => LogFormat::Text,
        None => cfg.log.format,
    };
    neko_sidecar::logging::init(format, &cfg.log.level, args.log_level.as_deref());
    block_on(async move {
        let notifier = neko_sidecar::systemd::Notifier::from_env().unwrap_or_else(|e| {
            tracing::warn!("systemd notifications are off: {e}");
            neko_sidecar::systemd::Notifier::disabled()
        });
        let shutdown = tokio_util::sync::CancellationToken::new();
        // Signal handlers first: a SIGTERM during start-up must still run
        // the shutdown path, not kill the process with its tools registered.
        let (reload_tx, reload_rx) = neko_sidecar::daemon::reload_channel();
        neko_sidecar::daemon::signals::install(shutdown.clone(), reload_tx.clone())?;
        let opts = neko_sidecar::daemon::DaemonOptions {
            notifier: Some(notifier),
            callback_listener: None,
            reloads: Some((reload_tx, reload_rx)),
        };
        let daemon = neko_sidecar::daemon::start(cfg, opts, shutdown.clone()).await?;
        neko_sidecar::admin::start_for(&daemon, &shutdown).await;
        daemon.wait().await;
        Ok(())
    })
}

/// Runs a client command's future on a small single-threaded runtime.
fn on_client_runtime<F: Future>(fut: F) -> Result<F::Output, std::io::Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(runtime.block_on(fut))
}

/// `status` and `call` could not do their job: exit 2.
fn client_failure(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("neko-sidecar: {e}");
    ExitCode::from(2)
}

/// Runs a future on a fresh single-threaded runtime and maps its result.
///
/// One thread is enough for every command: the daemon's calls run on the
/// callback server's own worker threads, which leaves the engine, reloads
/// and the admin endpoint to this one; the stand-in main_server and the
/// demo are test peers. The work-stealing pool this replaced cost an idle
/// daemon about 2 MiB of resident memory on two CPUs (BENCHMARKS.md,
/// "Idle"): a worker thread per CPU, each with its stack and its allocator
/// heap holding freed memory, and libm, which only its statistics used.
/// Blocking work (reading manifests) goes to `spawn_blocking`.
fn block_on(fut: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    let built = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let runtime = match built {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("neko-sidecar: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(fut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("neko-sidecar: {e:#}");
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
