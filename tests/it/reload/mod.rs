//! Manifest reloads without the daemon: keep-last-good per file on the
//! manifest set, and the reloader against editor and deployment patterns.

mod set;
mod watch;
