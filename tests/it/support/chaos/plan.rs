//! The chaos schedule: a pure function of the seed. It lists every fault the
//! chaos test fires and when (an offset from the start), windows included
//! (a fault switched on, then off again), so a seed names one schedule and a
//! failing run can be replayed with the same faults in the same order.
//!
//! It never does I/O and never sleeps; `under_chaos.rs` carries the steps out.
//! What a seed cannot fix is thread timing: the daemon's own passes land
//! between the steps wherever the machine puts them.

use std::fmt;
use std::time::Duration;

use super::manifests::{Breakage, FILES};

/// The role whose sync fails, and which vanishes and comes back.
pub const FLAKY_ROLE: &str = "Lanlan";

/// One fault, or the end of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// main_server restarts without downtime: every registration forgotten.
    Restart,
    /// main_server goes down (listener closed). `forget`: it comes back as a
    /// restarted process, its registry empty (forgotten at once, so calls
    /// made meanwhile already see the loss).
    ListenerDown {
        forget: bool,
    },
    ListenerUp,
    /// Every tool of our source removed from every role through the API,
    /// which is what an eviction does to the registry.
    Evict,
    /// One of our tools removed by someone else through the API.
    Unregister {
        tool: &'static str,
    },
    /// 409 `storage_startup_blocked` on every `/api/*` route, or no more.
    StorageBlocked(bool),
    /// The next `count` `/api/*` requests answer `status`.
    FailNext {
        count: u32,
        status: u16,
    },
    /// Every `/api/*` answer held this long (past the request timeout), or
    /// no more (`None`).
    Delay(Option<Duration>),
    /// `FLAKY_ROLE`'s sync fails (`ok:false`, registry still written), or
    /// succeeds again.
    RoleSyncFails(bool),
    /// `FLAKY_ROLE` removed from main_server (`true`), or added back.
    RoleGone(bool),
    /// A manifest file rewritten with the next generation of its schema,
    /// broken on purpose when `broken` is set; `atomic`: written to a
    /// dotfile and renamed over, as editors do, else rewritten in place.
    Edit {
        file: usize,
        broken: Option<Breakage>,
        atomic: bool,
    },
}

impl Action {
    /// A short name, for counting steps by kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Restart => "restart",
            Action::ListenerDown { .. } => "listener_down",
            Action::ListenerUp => "listener_up",
            Action::Evict => "evict",
            Action::Unregister { .. } => "unregister",
            Action::StorageBlocked(true) => "storage_blocked",
            Action::StorageBlocked(false) => "storage_unblocked",
            Action::FailNext { .. } => "fail_next",
            Action::Delay(Some(_)) => "delay_on",
            Action::Delay(None) => "delay_off",
            Action::RoleSyncFails(true) => "role_sync_fails",
            Action::RoleSyncFails(false) => "role_sync_ok",
            Action::RoleGone(true) => "role_gone",
            Action::RoleGone(false) => "role_back",
            Action::Edit { broken: None, .. } => "edit",
            Action::Edit {
                broken: Some(_), ..
            } => "broken_edit",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::ListenerDown { forget } => write!(f, "listener_down(forget={forget})"),
            Action::Unregister { tool } => write!(f, "unregister({tool})"),
            Action::FailNext { count, status } => write!(f, "fail_next({count}x{status})"),
            Action::Delay(Some(d)) => write!(f, "delay_on({}ms)", d.as_millis()),
            Action::Edit {
                file,
                broken,
                atomic,
            } => write!(
                f,
                "edit({}, broken={broken:?}, atomic={atomic})",
                FILES[*file].name
            ),
            other => f.write_str(other.kind()),
        }
    }
}

/// An action at an offset from the start of the chaos.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub at: Duration,
    pub action: Action,
}

/// Which fault windows are open at the end of a plan prefix; used to keep
/// two windows of one kind from overlapping (the second `off` would close
/// the first early) and to start no window past the end.
#[derive(Default)]
struct Busy {
    listener: Duration,
    blocked: Duration,
    delay: Duration,
    role_sync: Duration,
    role_gone: Duration,
}

fn ms(rng: &mut fastrand::Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.u64(lo..=hi))
}

/// The schedule for `seed` over `length`: events every 40 to 360 ms
/// (about 200 ms on average), windows closed no later than `length`, and a
/// broken edit last, so the end state always holds a file whose latest
/// write must be ignored.
pub fn plan(seed: u64, length: Duration) -> Vec<Step> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut steps = Vec::new();
    let mut busy = Busy::default();
    let mut t = Duration::ZERO;
    let tools: Vec<&'static str> = FILES
        .iter()
        .flat_map(|f| f.tools.iter().map(|t| t.name))
        .collect();
    loop {
        t += ms(&mut rng, 40, 360);
        if t + Duration::from_millis(100) >= length {
            break;
        }
        // A window: on now, off after `dur` (clamped to the end).
        let window =
            |steps: &mut Vec<Step>, slot: &mut Duration, dur: Duration, on: Action, off: Action| {
                let end = (t + dur).min(length);
                steps.push(Step { at: t, action: on });
                steps.push(Step {
                    at: end,
                    action: off,
                });
                *slot = end;
            };
        let roll = rng.u32(0..100);
        match roll {
            0..20 => steps.push(Step {
                at: t,
                action: Action::Restart,
            }),
            20..27 if busy.listener <= t => {
                let dur = ms(&mut rng, 100, 1500);
                let forget = rng.bool();
                window(
                    &mut steps,
                    &mut busy.listener,
                    dur,
                    Action::ListenerDown { forget },
                    Action::ListenerUp,
                );
            }
            27..35 => steps.push(Step {
                at: t,
                action: Action::Evict,
            }),
            35..43 => steps.push(Step {
                at: t,
                action: Action::Unregister {
                    tool: tools[rng.usize(..tools.len())],
                },
            }),
            43..51 if busy.blocked <= t => {
                let dur = ms(&mut rng, 100, 1200);
                window(
                    &mut steps,
                    &mut busy.blocked,
                    dur,
                    Action::StorageBlocked(true),
                    Action::StorageBlocked(false),
                );
            }
            51..61 => {
                let count = rng.u32(1..=6);
                let status = [500, 502, 503][rng.usize(..3)];
                steps.push(Step {
                    at: t,
                    action: Action::FailNext { count, status },
                });
            }
            61..67 if busy.delay <= t => {
                let dur = ms(&mut rng, 300, 1500);
                let held = ms(&mut rng, 600, 1200);
                window(
                    &mut steps,
                    &mut busy.delay,
                    dur,
                    Action::Delay(Some(held)),
                    Action::Delay(None),
                );
            }
            67..72 if busy.role_sync <= t => {
                let dur = ms(&mut rng, 200, 1500);
                window(
                    &mut steps,
                    &mut busy.role_sync,
                    dur,
                    Action::RoleSyncFails(true),
                    Action::RoleSyncFails(false),
                );
            }
            72..76 if busy.role_gone <= t => {
                let dur = ms(&mut rng, 200, 1500);
                window(
                    &mut steps,
                    &mut busy.role_gone,
                    dur,
                    Action::RoleGone(true),
                    Action::RoleGone(false),
                );
            }
            76..100 => {
                let broken = (rng.u32(0..100) < 20).then(|| Breakage::pick(&mut rng));
                steps.push(Step {
                    at: t,
                    action: Action::Edit {
                        file: rng.usize(..FILES.len()),
                        broken,
                        atomic: rng.bool(),
                    },
                });
            }
            // A window kind already open: nothing this turn.
            _ => {}
        }
    }
    steps.push(Step {
        at: length.saturating_sub(Duration::from_millis(50)),
        action: Action::Edit {
            file: rng.usize(..FILES.len()),
            broken: Some(Breakage::pick(&mut rng)),
            atomic: rng.bool(),
        },
    });
    // Stable: an `off` at the same instant as a later `on` stays first only
    // if it was pushed first, which `Busy` guarantees for one kind.
    steps.sort_by_key(|s| s.at);
    steps
}

/// How many steps of each kind, for the log line at start.
pub fn summary(steps: &[Step]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for s in steps {
        *counts.entry(s.action.kind()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}
