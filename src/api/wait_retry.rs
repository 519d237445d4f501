//! When a wait refused by `--max-waits-per-identity` should come back: its `Retry-After`
//! follows how fast the identity's waits are actually ending. A burst of opens from one
//! identity (a CI matrix) whose waits end in 300 ms comes back after 1 s; waits that last
//! minutes keep it at 5 s, so refused clients do not knock every second for nothing.
//!
//! Pure: [`retry_after`] decides from what [`super::waits`] records of the identity (the mean
//! duration of its recent waits, [`mean_after`], and the age of each wait in progress).

use std::time::Duration;

/// The shortest `Retry-After` (the header counts whole seconds).
pub const MIN: Duration = Duration::from_secs(1);
/// The longest: a wait lasts seconds to minutes, so nothing is gained by coming back later.
pub const MAX: Duration = Duration::from_secs(5);

/// The weight of the latest ended wait in the mean: the last five or so count.
const LATEST: f64 = 0.2;

/// The exponentially weighted mean of an identity's wait durations once one more wait, of
/// `took`, has ended; the first ended wait is the mean.
pub fn mean_after(mean: Option<Duration>, took: Duration) -> Duration {
    match mean {
        None => took,
        Some(mean) => mean.mul_f64(1.0 - LATEST) + took.mul_f64(LATEST),
    }
}

/// The `Retry-After` of a wait refused while the identity has waits in progress that have
/// lasted `ages` so far, its recent waits lasting `mean` (None when none has ended while it had
/// waits in progress): the time until the first of them is expected to end and free a place,
/// rounded up to whole seconds, between [`MIN`] and [`MAX`].
///
/// - With a mean, a wait of age `a` is expected to end `mean - a` from now; one that has
///   already outlived the mean says nothing of when it ends, and when all have, [`MAX`].
/// - With none ended yet (the start of a burst), the oldest is taken to last as long again as
///   it has so far: early in a burst that is [`MIN`], and the later the longer, up to [`MAX`].
/// - No wait in progress (a limit of 0) is [`MAX`]: none will ever free a place.
pub fn retry_after(mean: Option<Duration>, ages: &[Duration]) -> Duration {
    let expected = match mean {
        Some(mean) => ages.iter().filter(|a| **a < mean).map(|a| mean - *a).min(),
        None => ages.iter().max().copied(),
    };
    let seconds = expected.map_or(MAX.as_secs(), |d| {
        d.as_secs() + u64::from(d.subsec_nanos() > 0)
    });
    Duration::from_secs(seconds.clamp(MIN.as_secs(), MAX.as_secs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn waits_that_end_quickly_bring_the_refused_back_after_one_second() {
        // 50 waits of about 300 ms in progress, the oldest 200 ms old.
        let ages: Vec<_> = (0..50).map(|i| ms(4 * i)).collect();
        assert_eq!(retry_after(Some(ms(300)), &ages), MIN);
        assert_eq!(
            retry_after(Some(ms(1)), &[ms(0)]),
            MIN,
            "never under a second"
        );
    }

    #[test]
    fn the_wait_expected_to_end_first_decides_rounded_up_to_whole_seconds() {
        // Waits of 4 s on average: the oldest, 1.5 s old, ends in about 2.5 s.
        assert_eq!(retry_after(Some(secs(4)), &[ms(1500), ms(200)]), secs(3));
        assert_eq!(
            retry_after(Some(secs(4)), &[secs(2)]),
            secs(2),
            "exact seconds stay"
        );
        // One has outlived the mean: it says nothing, the next one decides.
        assert_eq!(retry_after(Some(secs(4)), &[secs(30), ms(800)]), secs(4));
    }

    #[test]
    fn long_waits_keep_the_refused_away_five_seconds_at_most() {
        assert_eq!(retry_after(Some(secs(90)), &[secs(10), secs(1)]), MAX);
        assert_eq!(
            retry_after(Some(ms(300)), &[secs(40), secs(20)]),
            MAX,
            "every wait in progress outlived the recent ones: they are not ending as those did"
        );
    }

    #[test]
    fn with_no_wait_ended_yet_the_oldest_is_taken_to_last_as_long_again() {
        assert_eq!(
            retry_after(None, &[ms(30), ms(10)]),
            MIN,
            "the start of a burst"
        );
        assert_eq!(retry_after(None, &[ms(2500), ms(10)]), secs(3));
        assert_eq!(retry_after(None, &[secs(60)]), MAX);
        assert_eq!(retry_after(None, &[]), MAX, "a limit of 0 frees no place");
        assert_eq!(retry_after(Some(secs(1)), &[]), MAX);
    }

    #[test]
    fn the_mean_follows_the_recent_waits() {
        assert_eq!(mean_after(None, ms(300)), ms(300));
        assert_eq!(mean_after(Some(ms(1000)), ms(0)), ms(800));
        let mut mean = Some(secs(60));
        for _ in 0..20 {
            mean = Some(mean_after(mean, ms(300)));
        }
        assert!(
            mean.unwrap() < secs(1),
            "{mean:?}: twenty quick waits outweigh a slow past"
        );
    }
}
