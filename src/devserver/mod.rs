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
pub(crate) mod builtin;
pub(crate) mod callback_url;
mod control;
pub(crate) mod eviction;
mod faults;
pub(crate) mod gates;
mod http;
pub(crate) mod invoke;
pub(crate) mod ledger;
pub(crate) mod pydantic;
pub(crate) mod registry;
pub(crate) mod request_log;
pub(crate) mod requests;
mod router;
mod run;
mod server;
mod state;
pub(crate) mod tool;
mod tool_api;

pub use builtin::{BUILTIN_SOURCE, BuiltinTool, RECALL_MEMORY, default_builtins};
pub use invoke::{InvokeAnswer, InvokeError, InvokeRequest};
pub use request_log::RequestRecord;
pub(crate) use run::run_cli;
pub use server::{
    DevServer, DevServerBuilder, DevServerError, DevServerHandle, RegistrySnapshot, default_roles,
};
pub use tool::{Scope, Tool};
