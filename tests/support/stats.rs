//! Figures of the benchmarks.

/// The p-th percentile (nearest rank, `p` in percent) of `sorted`, sorted ascending, not empty.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
