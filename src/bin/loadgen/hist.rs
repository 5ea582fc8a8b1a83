//! A log-linear latency histogram in the manner of HdrHistogram: fixed memory
//! whatever the length of the run (a soak at 5k requests/s for an hour holds
//! the same ~450 KiB as a 10 s smoke), about 0.1% relative error, and exact
//! count, sum, minimum and maximum.

use std::time::Duration;

/// Sub-buckets per power of two, as bits: 2^10 gives < 0.1% relative error.
const SUB_BITS: u32 = 10;
/// Sub-buckets per power of two.
const SUB: usize = 1 << SUB_BITS;
/// Buckets to cover every `u64`: values below `2 * SUB` are exact, then one
/// group of `SUB` buckets per further power of two.
const BUCKETS: usize = (65 - SUB_BITS as usize) * SUB;

/// Nanosecond latencies, bucketed.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

/// The bucket of a value.
fn index(v: u64) -> usize {
    if v < (SUB as u64) << 1 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let group = (e - SUB_BITS + 1) as usize;
    let sub = (v >> (e - SUB_BITS)) as usize - SUB;
    group * SUB + sub
}

/// The middle of a bucket's range.
fn value(index: usize) -> u64 {
    let (group, sub) = (index / SUB, index % SUB);
    if group <= 1 {
        return index as u64;
    }
    let shift = group - 1;
    let lower = ((SUB + sub) as u64) << shift;
    lower + ((1u64 << shift) - 1) / 2
}

impl Histogram {
    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        let v = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[index(v)] += 1;
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The latency at quantile `q` (0..=1): the smallest recorded value with
    /// at least `q` of the values at or below it; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        if q >= 1.0 {
            return Some(Duration::from_nanos(self.max));
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Duration::from_nanos(value(i).clamp(self.min, self.max)));
            }
        }
        Some(Duration::from_nanos(self.max))
    }

    /// The largest latency recorded; `None` when empty.
    pub fn max(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration::from_nanos(self.max))
    }

    /// The mean latency; `None` when empty.
    pub fn mean(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration::from_nanos((self.sum / u128::from(self.count)) as u64))
    }

    /// Forgets every value (keeps the allocation).
    pub fn reset(&mut self) {
        self.counts.fill(0);
        self.count = 0;
        self.sum = 0;
        self.min = u64::MAX;
        self.max = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_cover_every_u64() {
        assert_eq!(index(0), 0);
        assert_eq!(index((SUB as u64) * 2 - 1), SUB * 2 - 1);
        assert_eq!(index((SUB as u64) * 2), SUB * 2);
        assert_eq!(index(u64::MAX), BUCKETS - 1);
        let mut last = 0;
        for v in (0..1_000_000u64).step_by(7) {
            let i = index(v);
            assert!(i >= last, "{v}");
            last = i;
        }
    }

    #[test]
    fn bucket_values_are_within_a_thousandth() {
        for v in [
            1u64,
            999,
            2_048,
            12_345,
            1_000_000,
            3_210_987,
            9_999_999_999,
            u64::MAX / 3,
        ] {
            let back = value(index(v));
            let err = (back as f64 - v as f64).abs() / v as f64;
            assert!(err < 0.001, "{v} -> {back}");
        }
    }

    #[test]
    fn quantiles_of_a_uniform_run() {
        let mut h = Histogram::default();
        for us in 1..=10_000u64 {
            h.record(Duration::from_micros(us));
        }
        let ms = |q: f64| h.quantile(q).map(|d| d.as_secs_f64() * 1e3).unwrap_or(f64::NAN);
        assert!((ms(0.5) - 5.0).abs() < 0.01, "{}", ms(0.5));
        assert!((ms(0.99) - 9.9).abs() < 0.01, "{}", ms(0.99));
        assert!((ms(0.999) - 9.99).abs() < 0.01, "{}", ms(0.999));
        assert_eq!(h.quantile(1.0), Some(Duration::from_millis(10)));
        assert_eq!(h.max(), Some(Duration::from_millis(10)));
        assert_eq!(h.count(), 10_000);
        assert_eq!(h.mean(), Some(Duration::from_nanos(5_000_500)));
        h.reset();
        assert_eq!(h.quantile(0.5), None);
        assert_eq!(h.mean(), None);
    }
}
