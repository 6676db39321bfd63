//! The state one stand-in server shares between its HTTP handlers and its
//! handle: the registry (with its ledger) and eviction counts, the faults,
//! the request log, and a change counter tests can wait on.
//!
//! It also keeps the serialised `GET /api/tools` bodies of the current
//! registry generation: clients poll GET far more often than anything
//! registers, so an unchanged registry is served without serialising again.
//!
//! Locks are std mutexes held only for short, synchronous sections, never
//! across an await; when two are held, `world` is taken before
//! `listing_cache`. This module owns no HTTP and no sockets.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use axum::body::Bytes;

use tokio::sync::watch;

use super::builtin::BuiltinTool;
use super::eviction::EvictionCounter;
use super::faults::Faults;
use super::registry::{Registry, UnknownRole};
use super::request_log::RequestLog;
use crate::contract::MAX_CALLBACK_CONNECTIONS;

/// What a main_server restart wipes: the registry, its ledger and the
/// eviction counts.
#[derive(Debug)]
pub(crate) struct World {
    pub registry: Registry,
    pub eviction: EvictionCounter,
    /// Bumped on every write access, so cached listings know they are stale.
    generation: u64,
}

/// Serialised GET bodies, by role filter, valid for one world generation.
#[derive(Debug, Default)]
struct ListingCache {
    generation: u64,
    bodies: HashMap<Option<String>, Bytes>,
}

/// Everything shared by one stand-in server.
#[derive(Debug)]
pub(crate) struct Shared {
    world: Mutex<World>,
    listing_cache: Mutex<ListingCache>,
    faults: Mutex<Faults>,
    log: Mutex<RequestLog>,
    /// The built-ins every role gets at start, at restart and when added.
    pub builtins: Vec<BuiltinTool>,
    /// Bumped on every registry change and every logged request, so a test
    /// waits on a condition instead of sleeping.
    changes: watch::Sender<u64>,
    /// The connections of this server's one callback client
    /// (`contract::MAX_CALLBACK_CONNECTIONS`), as main_server's httpx client
    /// holds them: one pool per server, not per process.
    pub callback_connections: tokio::sync::Semaphore,
}

/// Locks a mutex, carrying on after a panic elsewhere: every section here
/// leaves the data consistent, so a poisoned lock holds valid data.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    pub(crate) fn new(roles: &[String], builtins: Vec<BuiltinTool>) -> Self {
        let registry = Registry::new(roles, &builtins);
        Shared {
            world: Mutex::new(World {
                registry,
                eviction: EvictionCounter::default(),
                generation: 0,
            }),
            listing_cache: Mutex::new(ListingCache::default()),
            faults: Mutex::new(Faults::default()),
            log: Mutex::new(RequestLog::default()),
            builtins,
            changes: watch::channel(0).0,
            callback_connections: tokio::sync::Semaphore::new(MAX_CALLBACK_CONNECTIONS),
        }
    }

    /// Reads or changes the world; a change notifies waiters.
    pub(crate) fn with_world<R>(&self, f: impl FnOnce(&mut World) -> R) -> R {
        let out = {
            let mut world = lock(&self.world);
            world.generation = world.generation.wrapping_add(1);
            f(&mut world)
        };
        self.notify();
        out
    }

    /// The `GET /api/tools` body for `role` (`None`: every role), served
    /// from the cache while the registry is unchanged.
    pub(crate) fn listing(&self, role: Option<&str>) -> Result<Bytes, UnknownRole> {
        let world = lock(&self.world);
        let mut cache = lock(&self.listing_cache);
        if cache.generation != world.generation {
            cache.bodies.clear();
            cache.generation = world.generation;
        }
        let key = role.map(str::to_owned);
        if let Some(body) = cache.bodies.get(&key) {
            return Ok(body.clone());
        }
        if let Some(r) = role {
            world.registry.target_roles(Some(r))?;
        }
        let body = Bytes::from(world.registry.listing_json(role));
        cache.bodies.insert(key, body.clone());
        Ok(body)
    }

    /// Reads the world without notifying anyone.
    pub(crate) fn read_world<R>(&self, f: impl FnOnce(&World) -> R) -> R {
        f(&lock(&self.world))
    }

    pub(crate) fn with_faults<R>(&self, f: impl FnOnce(&mut Faults) -> R) -> R {
        f(&mut lock(&self.faults))
    }

    pub(crate) fn with_log<R>(&self, f: impl FnOnce(&mut RequestLog) -> R) -> R {
        let out = f(&mut lock(&self.log));
        self.notify();
        out
    }

    /// Reads the log without notifying anyone: a `wait_for` condition that
    /// reads it must not wake itself.
    pub(crate) fn read_log<R>(&self, f: impl FnOnce(&RequestLog) -> R) -> R {
        f(&lock(&self.log))
    }

    /// Forgets every registration and the ledger, as a main_server restart
    /// does: each role holds only the built-ins again. Roles and faults stay.
    pub(crate) fn restart(&self) {
        self.with_world(|w| {
            let roles = w.registry.role_names();
            w.registry = Registry::new(&roles, &self.builtins);
            w.eviction = EvictionCounter::default();
        });
    }

    /// A receiver that sees every later change.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn notify(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devserver::builtin::default_builtins;

    #[test]
    fn cached_listing_follows_every_change() {
        let shared = Shared::new(&["A".into(), "B".into()], default_builtins());
        let first = shared.listing(None).unwrap();
        assert_eq!(shared.listing(None).unwrap(), first);
        shared.with_world(|w| w.registry.clear_source("A", "builtin"));
        let after = shared.listing(None).unwrap();
        assert_ne!(after, first);
        let v: serde_json::Value = serde_json::from_slice(&after).unwrap();
        assert_eq!(v["tools_by_role"]["A"], serde_json::json!([]));
        let only_b: serde_json::Value =
            serde_json::from_slice(&shared.listing(Some("B")).unwrap()).unwrap();
        assert_eq!(only_b["tools_by_role"].as_object().unwrap().len(), 1);
        assert_eq!(shared.listing(Some("C")), Err(UnknownRole("C".into())));
    }
}
