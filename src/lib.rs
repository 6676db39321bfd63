//! neko-sidecar: keeps the LLM tools of non-Rust plugins registered with the
//! N.E.K.O main_server and serves their callbacks.
//!
//! The binary (`src/main.rs`) only parses arguments, sets up logging and calls
//! into this library; see ARCHITECTURE.md for the module map.
#![forbid(unsafe_code)]

pub mod callback;
pub mod cli;
pub mod config;
pub mod desired;
pub mod devserver;
pub mod diag;
pub mod duration;
pub mod manifest;
pub mod tomldoc;
