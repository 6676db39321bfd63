//! The state one stand-in server shares between its HTTP handlers and its
//! handle: the registry and eviction counts, the faults, the request log,
//! and a change counter tests can wait on.
//!
//! Locks are std mutexes held only for short, synchronous sections, never
//! across an await. This module owns no HTTP and no sockets.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::watch;

use super::builtin::BuiltinTool;
use super::eviction::EvictionCounter;
use super::faults::Faults;
use super::registry::Registry;
use super::request_log::RequestLog;

/// What a main_server restart wipes: the registry and the eviction counts.
#[derive(Debug)]
pub struct World {
    pub registry: Registry,
    pub eviction: EvictionCounter,
}

/// Everything shared by one stand-in server.
#[derive(Debug)]
pub struct Shared {
    world: Mutex<World>,
    faults: Mutex<Faults>,
    log: Mutex<RequestLog>,
    /// The built-ins every role gets at start, at restart and when added.
    pub builtins: Vec<BuiltinTool>,
    /// Bumped on every registry change and every logged request, so a test
    /// waits on a condition instead of sleeping.
    changes: watch::Sender<u64>,
}

/// Locks a mutex, carrying on after a panic elsewhere: every section here
/// leaves the data consistent, so a poisoned lock holds valid data.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    pub fn new(roles: &[String], builtins: Vec<BuiltinTool>) -> Self {
        let registry = Registry::new(roles, &builtins);
        Shared {
            world: Mutex::new(World {
                registry,
                eviction: EvictionCounter::default(),
            }),
            faults: Mutex::new(Faults::default()),
            log: Mutex::new(RequestLog::default()),
            builtins,
            changes: watch::channel(0).0,
        }
    }

    /// Reads or changes the world; a change notifies waiters.
    pub fn with_world<R>(&self, f: impl FnOnce(&mut World) -> R) -> R {
        let out = f(&mut lock(&self.world));
        self.notify();
        out
    }

    /// Reads the world without notifying anyone.
    pub fn read_world<R>(&self, f: impl FnOnce(&World) -> R) -> R {
        f(&lock(&self.world))
    }

    pub fn with_faults<R>(&self, f: impl FnOnce(&mut Faults) -> R) -> R {
        f(&mut lock(&self.faults))
    }

    pub fn with_log<R>(&self, f: impl FnOnce(&mut RequestLog) -> R) -> R {
        let out = f(&mut lock(&self.log));
        self.notify();
        out
    }

    /// Forgets every registration, as a main_server restart does: each role
    /// holds only the built-ins again. Roles and faults stay.
    pub fn restart(&self) {
        self.with_world(|w| {
            let roles = w.registry.role_names();
            w.registry = Registry::new(&roles, &self.builtins);
            w.eviction = EvictionCounter::default();
        });
    }

    /// A receiver that sees every later change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn notify(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}
