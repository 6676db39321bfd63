//! Property tests: the answer rules, the tool fingerprint and the
//! registration planner. Each module's past failures are in
//! `MODULE.proptest-regressions` beside it, replayed before new cases.

mod envelope;
mod fingerprint;
mod planner;
