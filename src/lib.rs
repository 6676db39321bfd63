//! neko-sidecar: keeps the LLM tools of non-Rust plugins registered with the
//! N.E.K.O main_server and serves their callbacks.
//!
//! The binary (`src/main.rs`) only parses arguments, sets up logging and calls
//! into this library; see ARCHITECTURE.md for the module map.
#![deny(unsafe_code)]

pub mod admin;
pub mod backoff;
pub mod callback;
pub(crate) mod check;
pub mod cli;
pub mod client;
pub mod commands;
pub mod config;
pub mod contract;
pub mod daemon;
pub(crate) mod demo;
pub mod desired;
pub mod devmcp;
pub mod devserver;
pub mod diag;
pub(crate) mod duration;
pub mod editor_schemas;
pub mod engine;
pub mod logging;
pub mod manifest;
pub mod mcp;
pub mod os;
pub mod picture;
pub mod planner;
pub mod registration;
pub mod reload;
pub mod systemd;
pub mod tls;
pub(crate) mod tomldoc;
