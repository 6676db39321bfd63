//! The retry policy of the registration engine: capped exponential backoff
//! with full jitter, infinite (it never gives up), reset on success.
//!
//! This module owns the arithmetic and the per-thing attempt counter
//! (`Retry`); it never sleeps and never draws randomness by itself except in
//! `Jitter::random`, so every delay is unit-tested from a given random value.
//! The engine is the only caller, and it sleeps through
//! `tokio::time::sleep_until` inside a `select!` with the shutdown token, so
//! a pending retry is cancelled at once.
//!
//! Why not backon's `ExponentialBuilder`: its `with_jitter` *adds* a random
//! part of up to one more delay on top (`d + d * rand`), so with a 30 s cap a
//! delay can reach 60 s, and it is not full jitter. The cap must hold for
//! every delay (the engine promises recovery within cap + one poll), and full
//! jitter is what spreads many sidecars reconnecting to one restarted
//! main_server. The formula is three lines; owning it keeps it testable.

use std::time::Duration;

/// A validated backoff policy: the first ceiling and the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BackoffPolicy {
    initial: Duration,
    max: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackoffError {
    #[error("the initial backoff must be greater than zero")]
    ZeroInitial,
    #[error(
        "the initial backoff ({initial:?}) is larger than the cap ({max:?}): the first delay must not exceed the cap"
    )]
    InitialAboveMax { initial: Duration, max: Duration },
}

impl BackoffPolicy {
    /// Refuses `initial > max` and a zero `initial` (which would make every
    /// ceiling zero: a busy loop).
    pub(crate) fn new(initial: Duration, max: Duration) -> Result<Self, BackoffError> {
        if initial.is_zero() {
            return Err(BackoffError::ZeroInitial);
        }
        if initial > max {
            return Err(BackoffError::InitialAboveMax { initial, max });
        }
        Ok(Self { initial, max })
    }

    /// The ceiling of the delay before retry number `attempt` (1-based):
    /// `initial * 2^(attempt-1)`, capped at `max`. Saturates instead of
    /// overflowing, however many attempts there were.
    pub(crate) fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(63);
        let factor = 1u64 << doublings;
        let nanos = self.initial.as_nanos().saturating_mul(u128::from(factor));
        let max = self.max.as_nanos();
        Duration::from_nanos(u64::try_from(nanos.min(max)).unwrap_or(u64::MAX))
    }

    /// Full jitter: a delay uniformly in `[0, ceiling]`, from `unit` in
    /// `[0, 1]`. Out-of-range or NaN units are clamped, so the delay can
    /// never pass the cap whatever the random source returns.
    pub(crate) fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let unit = if unit.is_nan() {
            1.0
        } else {
            unit.clamp(0.0, 1.0)
        };
        self.ceiling(attempt).mul_f64(unit).min(self.max)
    }
}

/// Where the random part of a delay comes from; injected so tests can fix it.
#[derive(Clone)]
pub struct Jitter(std::sync::Arc<dyn Fn() -> f64 + Send + Sync>);

impl Jitter {
    /// Uniform in `[0, 1)` from a thread-local fast RNG (not cryptographic:
    /// it only spreads retries).
    pub(crate) fn random() -> Self {
        Self(std::sync::Arc::new(fastrand::f64))
    }

    /// Always the same unit, e.g. 1.0 for "always the full ceiling".
    pub fn fixed(unit: f64) -> Self {
        Self(std::sync::Arc::new(move || unit))
    }

    pub(crate) fn unit(&self) -> f64 {
        (self.0)()
    }
}

impl std::fmt::Debug for Jitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Jitter")
    }
}

/// The one helper through which the policy is used: the attempt counter of
/// one retried thing (main_server's reachability, or one tool).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Retry {
    attempt: u32,
}

impl Retry {
    /// Counts a failure and returns the delay before the next try, from a
    /// random `unit` in `[0, 1]` (see `Jitter`). Things that failed together
    /// may share one unit, so that they are retried together, in one pass.
    pub(crate) fn failed(&mut self, policy: &BackoffPolicy, unit: f64) -> Duration {
        self.attempt = self.attempt.saturating_add(1);
        policy.delay(self.attempt, unit)
    }

    /// Success: the next failure starts again from the initial ceiling.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Failures since the last success.
    pub(crate) fn attempt(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn initial_above_max_cannot_be_built() {
        assert_eq!(
            BackoffPolicy::new(ms(200), ms(100)),
            Err(BackoffError::InitialAboveMax {
                initial: ms(200),
                max: ms(100)
            })
        );
        assert_eq!(
            BackoffPolicy::new(Duration::ZERO, ms(100)),
            Err(BackoffError::ZeroInitial)
        );
        assert!(BackoffPolicy::new(ms(100), ms(100)).is_ok());
    }

    #[test]
    fn ceilings_double_up_to_the_cap_and_stay_there() {
        let p = BackoffPolicy::new(ms(100), ms(1000)).unwrap();
        let ceilings: Vec<u64> = (1..=7).map(|a| p.ceiling(a).as_millis() as u64).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(p.ceiling(u32::MAX), ms(1000));
        assert_eq!(p.ceiling(0), ms(100));
    }

    #[test]
    fn full_jitter_spans_zero_to_the_ceiling_and_never_passes_the_cap() {
        let p = BackoffPolicy::new(ms(100), ms(1000)).unwrap();
        assert_eq!(p.delay(3, 0.0), Duration::ZERO);
        assert_eq!(p.delay(3, 0.5), ms(200));
        assert_eq!(p.delay(3, 1.0), ms(400));
        for unit in [1.0, 1.5, f64::INFINITY, f64::NAN, -3.0] {
            for attempt in [1, 5, 40, u32::MAX] {
                assert!(p.delay(attempt, unit) <= ms(1000), "{attempt} {unit}");
            }
        }
        assert_eq!(p.delay(2, -1.0), Duration::ZERO);
    }

    #[test]
    fn retry_counts_failures_and_reset_starts_over() {
        let p = BackoffPolicy::new(ms(100), ms(1000)).unwrap();
        let mut r = Retry::default();
        let delays: Vec<Duration> = (0..6).map(|_| r.failed(&p, 1.0)).collect();
        assert_eq!(
            delays,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        assert_eq!(r.attempt(), 6);
        r.reset();
        assert_eq!(r.attempt(), 0);
        assert_eq!(r.failed(&p, 1.0), ms(100));
        assert_eq!(r.failed(&p, 0.5), ms(100));
    }

    #[test]
    fn the_random_jitter_stays_in_the_unit_interval() {
        let j = Jitter::random();
        for _ in 0..1000 {
            let u = j.unit();
            assert!((0.0..1.0).contains(&u), "{u}");
        }
    }
}
