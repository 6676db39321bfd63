//! The stand-in main_server's own controls and its callback half
//! (`/__dev/invoke`); its tool API is held to the contract in `contract`.

mod faults;
mod invoke;
