//! Retry policy maths, pure: exponential backoff with a cap and jitter. Used by the bulk
//! writer between attempts and by the outbox for `available_at`.

use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// Delay before attempt `attempt + 1` after `attempt` failures (1-based), with
    /// `jitter` in `[0, 1)` spreading it over `[d/2, d)` so that many failing clients do
    /// not retry in lockstep.
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let raw = self.base.saturating_mul(1u32 << exp.min(20));
        let capped = raw.min(self.cap);
        let factor = 0.5 + jitter.clamp(0.0, 1.0) / 2.0;
        capped.mul_f64(factor)
    }

    /// `delay` with a random jitter.
    pub fn delay_random(&self, attempt: u32) -> Duration {
        self.delay(attempt, rand::random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Backoff = Backoff {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(10),
    };

    #[test]
    fn doubles_until_the_cap() {
        assert_eq!(B.delay(1, 1.0), Duration::from_millis(100));
        assert_eq!(B.delay(2, 1.0), Duration::from_millis(200));
        assert_eq!(B.delay(4, 1.0), Duration::from_millis(800));
        assert_eq!(B.delay(30, 1.0), Duration::from_secs(10));
        assert_eq!(B.delay(u32::MAX, 1.0), Duration::from_secs(10));
    }

    #[test]
    fn jitter_spreads_over_the_upper_half() {
        assert_eq!(B.delay(2, 0.0), Duration::from_millis(100));
        let d = B.delay_random(2);
        assert!(d >= Duration::from_millis(100) && d <= Duration::from_millis(200));
    }
}
