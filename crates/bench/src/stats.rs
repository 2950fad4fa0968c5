//! Latency samples and the few statistics the report needs.

use std::time::Duration;

/// Latency samples in nanoseconds.
#[derive(Debug, Default, Clone)]
pub struct Latencies {
    nanos: Vec<u64>,
}

impl Latencies {
    pub fn push(&mut self, d: Duration) {
        self.nanos
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn len(&self) -> usize {
        self.nanos.len()
    }

    pub fn extend(&mut self, other: &Latencies) {
        self.nanos.extend_from_slice(&other.nanos);
    }

    /// The `q` quantile (0.0..=1.0) in microseconds, nearest rank.
    pub fn quantile_us(&self, q: f64) -> f64 {
        let mut sorted = self.nanos.clone();
        sorted.sort_unstable();
        quantile(&sorted, q) / 1e3
    }

    pub fn median_ms(&self) -> f64 {
        self.quantile_us(0.5) / 1e3
    }

    /// Every sample in milliseconds, in the order taken.
    pub fn samples_ms(&self) -> Vec<f64> {
        self.nanos.iter().map(|&n| n as f64 / 1e6).collect()
    }
}

/// Nearest-rank quantile of sorted samples; 0 for none.
fn quantile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let mut l = Latencies::default();
        for us in 1..=100 {
            l.push(Duration::from_micros(us));
        }
        assert_eq!(l.quantile_us(0.5), 50.0);
        assert_eq!(l.quantile_us(0.99), 99.0);
        assert_eq!(l.quantile_us(1.0), 100.0);
        assert_eq!(Latencies::default().quantile_us(0.5), 0.0);
    }
}
