//! The registration engine alone against the stand-in: recovery, failure
//! modes, ownership of tool names, and scale.

mod faults;
mod ownership;
mod recovery;
mod scale;
