//! A bounded sliding window over timestamped values: a ring of `B` buckets
//! each covering `width / B`, holding count, sum, minimum and maximum.
//!
//! Model: the window at time `now` is the buckets from the one holding
//! `now` back `B - 1` buckets, so it spans between `width * (B - 1) / B`
//! and `width` of history: aggregates are exact up to one bucket's worth of
//! the oldest samples. State is `B` buckets of 32 bytes whatever the event
//! rate. A sample older than the window is dropped.

#[derive(Clone, Copy, Debug)]
pub(crate) struct Bucket {
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

impl Bucket {
    const EMPTY: Bucket = Bucket {
        count: 0,
        sum: 0.0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
    };

    fn add(&mut self, v: f64) {
        self.count += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    fn merge(&mut self, o: &Bucket) {
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Window {
    bucket_ns: u64,
    buckets: Vec<Bucket>,
    /// Absolute index (time / bucket_ns) of the newest bucket.
    head: u64,
    /// The merged buckets, valid until a sample arrives or a bucket leaves
    /// (so repeated evaluations without input cost no merge).
    cached: Option<Bucket>,
}

impl Window {
    /// A window of `width_ns` in `b` buckets (`b >= 1`).
    pub fn new(width_ns: u64, b: usize) -> Window {
        let b = b.max(1);
        Window {
            bucket_ns: (width_ns / b as u64).max(1),
            buckets: vec![Bucket::EMPTY; b],
            head: 0,
            cached: None,
        }
    }

    fn len(&self) -> u64 {
        self.buckets.len() as u64
    }

    fn slot(&self, abs: u64) -> usize {
        (abs % self.len()) as usize
    }

    fn advance(&mut self, now_ns: u64) {
        let n = now_ns / self.bucket_ns;
        if n <= self.head {
            return;
        }
        let steps = (n - self.head).min(self.len());
        for i in 1..=steps {
            let s = self.slot(self.head + i);
            if self.buckets[s].count > 0 {
                self.cached = None;
            }
            self.buckets[s] = Bucket::EMPTY;
        }
        self.head = n;
    }

    pub fn add(&mut self, t_ns: u64, v: f64) {
        self.advance(t_ns);
        let n = t_ns / self.bucket_ns;
        if self.head - n >= self.len() {
            return;
        }
        let s = self.slot(n);
        self.buckets[s].add(v);
        self.cached = None;
    }

    pub fn stats(&mut self, now_ns: u64) -> Bucket {
        self.advance(now_ns);
        if let Some(c) = self.cached {
            return c;
        }
        let mut acc = Bucket::EMPTY;
        for b in &self.buckets {
            acc.merge(b);
        }
        self.cached = Some(acc);
        acc
    }

    /// When the oldest non-empty bucket leaves the window (the next time the
    /// aggregates change without a new sample), in nanoseconds.
    pub fn next_change(&self) -> Option<u64> {
        let oldest = self.head.saturating_sub(self.len() - 1);
        (oldest..=self.head)
            .find(|&abs| self.buckets[self.slot(abs)].count > 0)
            .map(|abs| (abs + self.len()).saturating_mul(self.bucket_ns))
    }

    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Window>() + self.buckets.len() * std::mem::size_of::<Bucket>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_leave_after_the_window() {
        let mut w = Window::new(1_000, 10);
        w.add(50, 1.0);
        w.add(150, 3.0);
        let s = w.stats(500);
        assert_eq!((s.count, s.sum, s.min, s.max), (2, 4.0, 1.0, 3.0));
        assert_eq!(w.next_change(), Some(1_000));
        assert_eq!(w.stats(1_000).count, 1);
        assert_eq!(w.next_change(), Some(1_100));
        assert_eq!(w.stats(1_100).count, 0);
        assert_eq!(w.next_change(), None);
        // Too old to count.
        w.add(10, 9.0);
        assert_eq!(w.stats(1_100).count, 0);
    }
}
