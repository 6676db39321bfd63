//! The chaos test: the whole daemon in-process against the in-process
//! stand-in, 16 tools in 5 manifest files (some role-scoped, one exec), an
//! echo handler that sometimes lags or hangs, and 40 s of seeded faults
//! (restarts, main_server down, evictions, outside unregisters, 409
//! windows, 5xx bursts, answers held past the request timeout, a role's
//! sync failing, a role vanishing, manifest edits good and broken) while
//! four workers keep calling the tools as the model would.
//!
//! Then, faults cleared, it checks exact invariants: every call was
//! answered with the expected handler output or failure envelope within
//! its timeout, or legitimately found no tool (counted apart); never a
//! transport failure or a non-envelope; the stand-in converges to every
//! desired tool with its latest good schema; the daemon's loops still run
//! and nothing panicked; idle is quiet again; shutdown removes everything.
//!
//! The seed (`NEKO_CHAOS_SEED`, random when unset) fixes the schedule and
//! the workers' choices; it is printed at start and in every failure.
//! `NEKO_CHAOS_SECS` lengthens the chaos for runs by hand;
//! `NEKO_CHAOS_LOG=neko_sidecar=debug` shows the daemon's logs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use neko_sidecar::callback::Outcome;
use neko_sidecar::registration::ToolState;

use crate::support::chaos::calls::{Class, Ledger, Mode, call_and_file, worker};
use crate::support::chaos::manifests::{FILES, OPTIONAL_TOOL, SOURCE, all_tools};
use crate::support::chaos::plan::{Action, plan, summary};
use crate::support::chaos::*;
use crate::support::daemon::InProcess;
use crate::support::{dev_server, impatient_client};

/// Workers calling tools at once.
const WORKERS: u64 = 4;
/// The most convergence may take once the faults stop: backoff cap
/// (500 ms) + poll (100 ms) + debounce (50 ms), many times over for a
/// loaded machine.
const CONVERGE: Duration = Duration::from_secs(20);

#[test]
fn chaos_converges_and_every_call_gets_an_envelope() {
    // A runtime of its own, its threads named: the panics that count are
    // the ones of this test, not of the others sharing the process.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(THREADS)
        .enable_all()
        .build()
        .unwrap()
        .block_on(chaos());
}

async fn chaos() {
    let seed = seed();
    let length = chaos_length();
    eprintln!(
        "chaos: seed {seed}, {length:?} of faults; replay with NEKO_CHAOS_SEED={seed} cargo test --test it under_chaos::"
    );
    record_panics();
    hang_guard(seed, length + Duration::from_secs(150));
    maybe_log();
    let started = Instant::now();

    let handler_url = echo_handler().await;
    let mut ws = Workspace::new(handler_url);
    let h = dev_server().await;
    let (daemon, shutdown) = InProcess::start(&ws.config(&h.url())).await.into_parts();
    ws.watch(daemon.reload.desired());
    let cb = daemon.callback.clone();
    let url_for = move |name: &str| cb.url_for(name);

    // Registered from cold, before any fault.
    let expected = ws.expected();
    assert!(
        h.wait_for(CONVERGE, |h| mismatches(
            &h.registry_snapshot(),
            &expected,
            &url_for
        )
        .is_empty())
            .await,
        "seed {seed}: never registered from cold: {:#?}",
        mismatches(&h.registry_snapshot(), &expected, &url_for)
    );

    let steps = plan(seed, length);
    eprintln!("chaos: {} steps: {}", steps.len(), summary(&steps));

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = tokio_util::sync::CancellationToken::new();
    let workers: Vec<_> = (0..WORKERS)
        .map(|id| tokio::spawn(worker(id, seed, h.clone(), ledger.clone(), stop.clone())))
        .collect();

    // The faults, each at its offset.
    let http = impatient_client(Duration::from_secs(5));
    let mut effects = Effects::default();
    let mut log: Vec<String> = Vec::new();
    let t0 = tokio::time::Instant::now();
    for step in &steps {
        tokio::time::sleep_until(t0 + step.at).await;
        let note = execute(&step.action, &h, &mut ws, &http, &mut effects).await;
        log.push(format!(
            "{:>6} ms (planned {:>6}) {} {note}",
            t0.elapsed().as_millis(),
            step.at.as_millis(),
            step.action
        ));
    }
    clear_faults(&h).await;
    let faults_off = Instant::now();
    stop.cancel();
    for w in workers {
        w.await.unwrap();
    }
    let chaos_took = t0.elapsed();
    let tail = log[log.len().saturating_sub(25)..].join("\n");
    let ctx = |what: &str| format!("seed {seed}: {what}\nlast steps:\n{tail}");

    // Every call so far was answered as its arguments asked, or found no
    // tool; never a transport failure, a non-envelope or a late answer.
    {
        let l = ledger.lock().unwrap();
        eprintln!(
            "chaos: seed {seed}: calls during the chaos: {}",
            l.summary()
        );
        assert!(
            l.violations.is_empty(),
            "{}",
            ctx(&format!(
                "{} calls answered wrongly, first ones:\n{}",
                l.violations.len(),
                l.violations
                    .iter()
                    .take(10)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n")
            ))
        );
    }

    // Phase 1: the last good generation of every file is in force, a file
    // whose last write was broken included.
    let broken_last = steps
        .iter()
        .rev()
        .find_map(|s| match s.action {
            Action::Edit { file, .. } => Some(file),
            _ => None,
        })
        .expect("the plan ends with a broken edit");
    assert_ne!(
        ws.written[broken_last],
        ws.good[broken_last],
        "{}",
        ctx("the last edit must be broken")
    );
    converge(&h, &daemon, &ws, &url_for, &ctx("after the faults stopped")).await;
    let phase1 = Instant::now();

    // The loops still run: passes go on.
    let passes = daemon.registration.snapshot().passes;
    daemon
        .registration
        .wait_until(CONVERGE, |s| s.passes >= passes + 3)
        .await
        .unwrap_or_else(|s| panic!("{}: passes stuck at {}", ctx("engine stalled"), s.passes));

    // Every tool answers from every role that holds it, now.
    let before = ledger.lock().unwrap().total(Class::Answered);
    let mut sweep = 0;
    for t in all_tools().filter(|t| ws.expected().contains_key(t.name)) {
        let roles: Vec<&str> = match t.role {
            Some(r) => vec![r],
            None => vec!["小八", "Lanlan"],
        };
        for role in roles {
            let class = call_and_file(&h, &ledger, t.name, role, Mode::Ok, "final").await;
            assert_eq!(
                class,
                Class::Answered,
                "{}",
                ctx(&format!("{} from {role} after convergence", t.name))
            );
            sweep += 1;
        }
    }
    assert_eq!(
        ledger.lock().unwrap().total(Class::Answered),
        before + sweep
    );

    // Phase 2: the reloader still runs: a good edit of every file is
    // registered in place.
    for file in 0..FILES.len() {
        ws.edit(file, None, file % 2 == 0).await;
    }
    converge(&h, &daemon, &ws, &url_for, &ctx("after the final edits")).await;

    // Idle is quiet again: nothing but one GET per poll.
    h.clear_request_log();
    let passes = daemon.registration.snapshot().passes;
    daemon
        .registration
        .wait_until(CONVERGE, |s| s.passes >= passes + 5)
        .await
        .unwrap_or_else(|_| panic!("{}", ctx("no passes while idle")));
    let noisy: Vec<_> = h
        .requests()
        .into_iter()
        .filter(|r| !(r.method == "GET" && r.path == "/api/tools"))
        .collect();
    assert!(
        noisy.is_empty(),
        "{}",
        ctx(&format!("idle after chaos sent more than GETs: {noisy:#?}"))
    );

    // Counters: losses were noticed, never more often than tools were
    // taken away; nothing we sent was refused as invalid.
    let status = daemon.registration.snapshot();
    assert!(
        status.loss_events >= 1 && status.loss_events <= effects.removals,
        "{}",
        ctx(&format!(
            "{} loss events for {} removals",
            status.loss_events, effects.removals
        ))
    );
    assert_eq!(
        status.registrations.rejected,
        0,
        "{}",
        ctx("a registration was refused as invalid")
    );

    // The sidecar counted exactly the calls that reached it, each with the
    // outcome its arguments asked for; none was turned away at the door
    // except the optional tool's calls while it was not routed.
    let stats = daemon.callback.stats();
    {
        let l = ledger.lock().unwrap();
        for t in all_tools().filter(|t| t.name != OPTIONAL_TOOL) {
            let Some(served) = stats.tools.get(t.name) else {
                panic!("{}", ctx(&format!("{} is not served", t.name)));
            };
            for outcome in Outcome::ALL {
                let want = l.reached.get(&(t.name, outcome)).copied().unwrap_or(0);
                assert_eq!(
                    served.count(outcome),
                    want,
                    "{}",
                    ctx(&format!(
                        "{}: the sidecar counted {} calls {}, the model saw {want}",
                        t.name,
                        served.count(outcome),
                        outcome.label()
                    ))
                );
            }
            assert_eq!(served.in_flight, 0, "{}", ctx(t.name));
        }
        let r = stats.rejections;
        assert_eq!(
            (
                r.forbidden_peer,
                r.body_too_large,
                r.unknown_token,
                r.unknown_tool
            ),
            (0, 0, 0, l.total(Class::NotRouted)),
            "{}",
            ctx("callback rejections")
        );
    }

    // Shutdown: every tool of ours removed, calls drained, within the deadline.
    shutdown.cancel();
    let report = tokio::time::timeout(CONVERGE, daemon.wait())
        .await
        .unwrap_or_else(|_| panic!("{}", ctx("shutdown hung")));
    assert!(report.cleared.is_ok(), "{}", ctx(&format!("{report:?}")));
    assert!(
        report.took <= Duration::from_secs(3) + Duration::from_millis(500),
        "{}",
        ctx(&format!("shutdown took {:?}", report.took))
    );
    let left: Vec<String> = h
        .registry_snapshot()
        .roles
        .iter()
        .flat_map(|r| r.tools.iter())
        .filter(|t| t.source == SOURCE)
        .map(|t| t.name.clone())
        .collect();
    assert!(
        left.is_empty(),
        "{}",
        ctx(&format!("left behind: {left:?}"))
    );

    let l = ledger.lock().unwrap();
    eprintln!(
        "chaos: seed {seed}: {} steps in {chaos_took:?}, {} removals ({} refused by a fault), \
         {} loss events, {} registrations accepted, {} failed, {} for an unknown role; converged {:?} after the faults; \
         calls: {} (slowest {:?}); whole test {:?}",
        steps.len(),
        effects.removals,
        effects.refused_by_fault,
        status.loss_events,
        status.registrations.accepted,
        status.registrations.failed,
        status.registrations.unknown_role,
        phase1.duration_since(faults_off),
        l.summary(),
        l.slowest,
        started.elapsed()
    );
    // Not a vacuous run: enough calls reached a handler, with its output or
    // the failure envelope it must give, for the checks above to mean
    // something. Typical seeds reach 900 to 1,100; the schedule can keep
    // main_server restarting or down for most of the 40 s (seed
    // 7291656295782076778: 173 reached on an idle machine, 120 with the
    // Windows build beside it in `.ci/run`, where a floor of 100 answered
    // alone failed), so the floor is far below both.
    let reached = l.total(Class::Answered) + l.total(Class::ExpectedError);
    assert!(
        reached >= 50,
        "{}",
        ctx(&format!("too few calls reached a handler: {}", l.summary()))
    );
    let p = panics();
    assert!(p.is_empty(), "{}", ctx(&format!("panics: {p:#?}")));
}

/// Waits until the stand-in holds exactly the expected tools with their
/// latest schema, and the daemon reports every one registered.
async fn converge(
    h: &neko_sidecar::devserver::DevServerHandle,
    daemon: &neko_sidecar::daemon::Daemon,
    ws: &Workspace,
    url_for: &dyn Fn(&str) -> String,
    ctx: &str,
) {
    let expected = ws.expected();
    let ok = h
        .wait_for(CONVERGE, |h| {
            mismatches(&h.registry_snapshot(), &expected, url_for).is_empty()
        })
        .await;
    assert!(
        ok,
        "{ctx}\nnot converged within {CONVERGE:?}: {:#?}\ndaemon: {:#?}",
        mismatches(&h.registry_snapshot(), &expected, url_for),
        daemon.registration.snapshot()
    );
    let names: Vec<&str> = expected.keys().copied().collect();
    daemon
        .registration
        .wait_until(CONVERGE, |s| {
            s.converged
                && s.tools.keys().map(String::as_str).eq(names.iter().copied())
                && s.tools.values().all(|t| t.state == ToolState::Registered)
        })
        .await
        .unwrap_or_else(|s| panic!("{ctx}\nthe daemon never reported convergence: {s:#?}"));
}

#[test]
fn the_schedule_is_a_function_of_the_seed() {
    let a = plan(7, Duration::from_secs(40));
    assert_eq!(a, plan(7, Duration::from_secs(40)));
    assert_ne!(a, plan(8, Duration::from_secs(40)));
    // Dozens of restarts, every window closed, sorted, ending broken.
    let restarts = a
        .iter()
        .filter(|s| matches!(s.action, Action::Restart))
        .count();
    assert!(restarts >= 24, "{restarts} restarts");
    assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
    let opened = |on: &Action, off: &Action| {
        a.iter().filter(|s| s.action == *on).count()
            == a.iter().filter(|s| s.action == *off).count()
    };
    assert!(opened(
        &Action::StorageBlocked(true),
        &Action::StorageBlocked(false)
    ));
    assert!(opened(&Action::RoleGone(true), &Action::RoleGone(false)));
    assert!(opened(
        &Action::RoleSyncFails(true),
        &Action::RoleSyncFails(false)
    ));
    assert_eq!(
        a.iter()
            .filter(|s| matches!(s.action, Action::ListenerDown { .. }))
            .count(),
        a.iter()
            .filter(|s| matches!(s.action, Action::ListenerUp))
            .count()
    );
    assert!(matches!(
        a.last().unwrap().action,
        Action::Edit {
            broken: Some(_),
            ..
        }
    ));
}
