//! The stand-in main_server: the tool API of `CONTRACT.md` (register,
//! unregister, clear, list), faithful down to status codes, 422 bodies and
//! the traps, plus `/__dev/` routes and a [`DevServerHandle`] for fault
//! injection, roles (none at all, added, rebuilt with the ledger replayed),
//! calling tools as the model would, and dead-plugin eviction.
//!
//! Used by the test suite (in-process, on a port-0 listener) and by plugin
//! authors (`neko-sidecar dev-server`). It never talks to a real
//! main_server and never persists anything.
//!
//! Map: pure decisions in `callback_url`, `gates`, `pydantic`, `body`,
//! `requests`, `tool`, `registry`, `ledger`, `tool_api`, `eviction` (how an answer
//! is read is `contract`, shared with the sidecar); state in
//! `state`, `faults`, `request_log`; HTTP in `router` (which assembles
//! `api_routes` and `control`) and `http` (what they share); outgoing
//! calls in `invoke`; lifecycle in `server`, `run`.

mod api_routes;
mod body;
pub mod builtin;
pub mod callback_url;
mod control;
pub mod eviction;
mod faults;
pub mod gates;
mod http;
pub mod invoke;
pub mod ledger;
pub mod pydantic;
pub mod registry;
pub mod request_log;
pub mod requests;
mod router;
mod run;
mod server;
mod state;
pub mod tool;
mod tool_api;

pub use crate::contract::Reading;
pub use builtin::{BUILTIN_SOURCE, BuiltinTool, RECALL_MEMORY, default_builtins};
pub use invoke::{InvokeAnswer, InvokeError, InvokeRequest};
pub use ledger::LedgerEntry;
pub use registry::RoleTools;
pub use request_log::RequestRecord;
pub use run::run_cli;
pub use server::{
    DevServer, DevServerBuilder, DevServerError, DevServerHandle, RegistrySnapshot, default_roles,
};
pub use tool::{Scope, Tool};
