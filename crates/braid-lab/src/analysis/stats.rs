//! Summary statistics, Student's t distribution and Welch's t-test.
//!
//! Percentiles interpolate linearly between order statistics: for sorted
//! values `x[0..n]` the `p`-quantile is at rank `h = (n - 1) p`, between
//! `x[floor(h)]` and `x[floor(h) + 1]`. This is numpy's default
//! (`method="linear"`, Hyndman & Fan type 7), so figures match a
//! `numpy.percentile` of the exported data. The standard deviation is the
//! sample one (divisor `n - 1`); the 95% confidence interval of the mean is
//! `mean ± t(0.975, n - 1) · sd / √n`, and has no value for `n = 1`.
//!
//! The t distribution's CDF comes from the regularized incomplete beta
//! function (continued fraction, Numerical Recipes §6.4) and its quantile
//! from a safeguarded Newton iteration on it: no statistics crate needed.
//!
//! ```
//! use braid_lab::analysis::stats::{summarize, t_quantile};
//! let s = summarize(&mut [3.0, 1.0, 2.0, 4.0]).unwrap();
//! assert_eq!((s.n, s.mean, s.median), (4, 2.5, 2.5));
//! assert!((t_quantile(0.975, 10.0) - 2.228138851986274).abs() < 1e-9);
//! ```

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

/// The distribution of one metric in one group.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of values.
    pub n: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// 50th percentile.
    pub median: f64,
    /// 5th percentile (linear interpolation).
    pub p5: f64,
    /// 95th percentile (linear interpolation).
    pub p95: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Sample standard deviation (`n - 1`); none for `n = 1`.
    pub sd: Option<f64>,
    /// 95% confidence interval of the mean (Student t); none for `n = 1`.
    pub ci95: Option<(f64, f64)>,
}

/// Summarize `values` (sorted in place). `None` when empty.
pub fn summarize(values: &mut [f64]) -> Option<Summary> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable_by(f64::total_cmp);
    let n = values.len();
    let mean = mean(values)?;
    let sd = variance(values).map(f64::sqrt);
    let ci95 = sd.map(|sd| {
        let half = t_critical_95(n as f64 - 1.0) * sd / (n as f64).sqrt();
        (mean - half, mean + half)
    });
    Some(Summary {
        n: n as u64,
        mean,
        median: percentile_sorted(values, 0.5)?,
        p5: percentile_sorted(values, 0.05)?,
        p95: percentile_sorted(values, 0.95)?,
        min: values[0],
        max: values[n - 1],
        sd,
        ci95,
    })
}

/// Arithmetic mean; `None` when empty.
pub fn mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        None
    } else {
        Some(values.iter().sum::<f64>() / values.len() as f64)
    }
}

/// Sample variance (divisor `n - 1`, two passes); `None` for fewer than two
/// values.
pub fn variance(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let m = mean(values)?;
    Some(values.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (values.len() - 1) as f64)
}

/// The `p`-quantile (`p` in `0..=1`) of sorted values, interpolated
/// linearly (numpy's default). `None` when empty or `p` is outside `0..=1`.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&p) {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    let frac = h - lo as f64;
    let (a, b) = (sorted[lo], sorted[hi]);
    // a + frac (b - a), written so that equal neighbours give exactly a.
    Some(if frac == 0.0 || a == b { a } else { a + frac * (b - a) })
}

/// Welch's unequal-variance t-test of two samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Welch {
    /// Size of the first sample.
    pub n_a: u64,
    /// Size of the second sample.
    pub n_b: u64,
    /// The t statistic (mean a − mean b over its standard error); infinite
    /// when both samples have no spread and different means (JSON: null).
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
}

/// Welch's t-test of `a` against `b`; `None` when either has fewer than
/// two values (no spread to judge a difference by).
///
/// Two samples without any spread: equal means give `p = 1`, different
/// means `p = 0` (the difference is exact).
pub fn welch_t_test(a: &[f64], b: &[f64]) -> Option<Welch> {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (ma, mb) = (mean(a)?, mean(b)?);
    let (va, vb) = (variance(a)?, variance(b)?);
    let (sa, sb) = (va / na, vb / nb);
    let se2 = sa + sb;
    let (n_a, n_b) = (a.len() as u64, b.len() as u64);
    if se2 == 0.0 {
        let df = na + nb - 2.0;
        return Some(if ma == mb {
            Welch { n_a, n_b, t: 0.0, df, p: 1.0 }
        } else {
            Welch { n_a, n_b, t: if ma > mb { f64::INFINITY } else { f64::NEG_INFINITY }, df, p: 0.0 }
        });
    }
    let t = (ma - mb) / se2.sqrt();
    let df = se2 * se2 / (sa * sa / (na - 1.0) + sb * sb / (nb - 1.0));
    let p = (2.0 * t_cdf(-t.abs(), df)).clamp(0.0, 1.0);
    Some(Welch { n_a, n_b, t, df, p })
}

/// CDF of Student's t distribution with `df > 0` degrees of freedom.
pub fn t_cdf(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return if t > 0.0 { 1.0 } else { 0.0 };
    }
    let x = df / (df + t * t);
    let tail = 0.5 * beta_inc(df / 2.0, 0.5, x);
    if t > 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// Quantile of Student's t distribution: the `t` with `t_cdf(t, df) = p`,
/// for `p` in `(0, 1)` and `df > 0`; NaN outside.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    if !(p > 0.0 && p < 1.0) || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if p == 0.5 {
        return 0.0;
    }
    if p < 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    // Bracket the root, then Newton steps that fall back to bisection
    // whenever they leave the bracket.
    let (mut lo, mut hi) = (0.0, 2.0);
    while t_cdf(hi, df) < p {
        lo = hi;
        hi *= 2.0;
        if !hi.is_finite() {
            return f64::INFINITY;
        }
    }
    let mut t = 0.5 * (lo + hi);
    for _ in 0..200 {
        let f = t_cdf(t, df) - p;
        if f == 0.0 {
            return t;
        }
        if f < 0.0 {
            lo = t;
        } else {
            hi = t;
        }
        let step = f / t_pdf(t, df);
        let next = t - step;
        t = if next > lo && next < hi && step.is_finite() { next } else { 0.5 * (lo + hi) };
        if (hi - lo) <= 4.0 * f64::EPSILON * t.abs() || step.abs() <= 1e-15 * t.abs() {
            break;
        }
    }
    t
}

/// `t_quantile(0.975, df)`, memoized: summaries of many groups ask for the
/// same few degrees of freedom.
pub fn t_critical_95(df: f64) -> f64 {
    static CACHE: OnceLock<Mutex<HashMap<u64, f64>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let key = df.to_bits();
    if let Some(v) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return *v;
    }
    let v = t_quantile(0.975, df);
    let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
    if map.len() < 100_000 {
        map.insert(key, v);
    }
    v
}

/// Density of Student's t distribution.
fn t_pdf(t: f64, df: f64) -> f64 {
    let ln = ln_gamma((df + 1.0) / 2.0)
        - ln_gamma(df / 2.0)
        - 0.5 * (df * std::f64::consts::PI).ln()
        - (df + 1.0) / 2.0 * (t * t / df).ln_1p();
    ln.exp()
}

/// Natural log of the gamma function for `x > 0` (Lanczos, g = 7, n = 9;
/// relative error about 1e-15).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 − x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Regularized incomplete beta function `I_x(a, b)`.
fn beta_inc(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    // The continued fraction converges fast for x below the mean of the
    // distribution; above it, use the symmetry I_x(a, b) = 1 − I_{1−x}(b, a).
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

/// The continued fraction of the incomplete beta function (modified
/// Lentz).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const EPS: f64 = 1e-15;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / away_from_zero(1.0 - qab * x / qap);
    let mut h = d;
    for m in 1..=100_000 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        // Each iteration takes the fraction's even then its odd term.
        h *= lentz_step(m * (b - m) * x / ((qam + m2) * (a + m2)), &mut c, &mut d);
        let del = lentz_step(-(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)), &mut c, &mut d);
        h *= del;
        if (del - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

/// One step of the modified Lentz method with the term `aa`: updates the
/// ratios `c` and `d` and returns the factor the fraction is multiplied by.
fn lentz_step(aa: f64, c: &mut f64, d: &mut f64) -> f64 {
    *d = 1.0 / away_from_zero(1.0 + aa * *d);
    *c = away_from_zero(1.0 + aa / *c);
    *d * *c
}

/// `v`, or a tiny number where `v` is (nearly) zero, so that Lentz's
/// divisions stay finite.
fn away_from_zero(v: f64) -> f64 {
    const TINY: f64 = 1e-300;
    if v.abs() < TINY {
        TINY
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    // Reference values: scipy.stats.t.ppf(0.975, df), scipy 1.17.
    #[test]
    fn t_quantiles_match_scipy() {
        let table = [
            (1.0, 12.706204736174694),
            (2.0, 4.302652729749462),
            (3.0, 3.1824463052837078),
            (5.0, 2.5705818356363146),
            (10.0, 2.228138851986274),
            (30.0, 2.0422724563012378),
            (100.0, 1.9839715185235518),
            (1000.0, 1.9623390808264083),
        ];
        for (df, want) in table {
            let got = t_quantile(0.975, df);
            assert!(close(got, want, 1e-10), "df {df}: {got} vs {want}");
            assert!(close(t_quantile(0.025, df), -want, 1e-10));
            assert!(close(t_critical_95(df), want, 1e-10));
        }
    }

    // scipy.stats.t.cdf(1.5, 3) and t.cdf(-2.0, 7.5).
    #[test]
    fn t_cdf_matches_scipy() {
        assert!(close(t_cdf(1.5, 3.0), 0.8847080673775886, 1e-12));
        assert!(close(t_cdf(-2.0, 7.5), 0.041448497649083156, 1e-12));
        assert_eq!(t_cdf(0.0, 4.0), 0.5);
    }

    // scipy.stats.ttest_ind(a, b, equal_var=False).
    #[test]
    fn welch_matches_scipy() {
        let a = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4];
        let b = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4];
        let w = welch_t_test(&a, &b).unwrap();
        assert!(close(w.t, -2.455356398286006, 1e-12), "{w:?}");
        assert!(close(w.df, 24.988529290231416, 1e-12), "{w:?}");
        assert!(close(w.p, 0.021378001462866992, 1e-9), "{w:?}");
        let w = welch_t_test(&[1.0, 2.0, 3.0], &[10.0, 11.5, 9.0, 12.0]).unwrap();
        assert!(close(w.t, -9.599395142235483, 1e-12) && close(w.df, 4.996533795493934, 1e-12), "{w:?}");
        assert!(close(w.p, 0.00020869747420777996, 1e-8), "{w:?}");
        assert!(welch_t_test(&[1.0], &[2.0, 3.0]).is_none());
        assert_eq!(welch_t_test(&[1.0, 1.0], &[1.0, 1.0]).unwrap().p, 1.0);
        assert_eq!(welch_t_test(&[2.0, 2.0], &[1.0, 1.0]).unwrap().p, 0.0);
    }

    // numpy.percentile(x, [5, 50, 95]), mean, std(ddof=1) and the t interval.
    #[test]
    fn summary_matches_numpy() {
        let mut x = [3.1, 4.1, 5.9, 2.6, 5.3, 5.8, 9.7, 9.3, 2.3, 8.4];
        let s = summarize(&mut x).unwrap();
        assert_eq!(s.n, 10);
        assert!(close(s.p5, 2.435, 1e-12) && close(s.median, 5.55, 1e-12) && close(s.p95, 9.52, 1e-12), "{s:?}");
        assert!(close(s.mean, 5.65, 1e-12));
        assert!(close(s.sd.unwrap(), 2.726923378298538, 1e-12));
        let (lo, hi) = s.ci95.unwrap();
        assert!(close(lo, 3.699276529281285, 1e-10) && close(hi, 7.600723470718714, 1e-10), "{s:?}");
        let one = summarize(&mut [4.0]).unwrap();
        assert_eq!((one.mean, one.median, one.p5, one.p95, one.sd, one.ci95), (4.0, 4.0, 4.0, 4.0, None, None));
        assert!(summarize(&mut []).is_none());
    }

    /// A naive quantile: the definition, evaluated by walking ranks.
    fn naive_quantile(values: &[f64], p: f64) -> f64 {
        let mut v = values.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let h = (v.len() - 1) as f64 * p;
        let below = v.iter().enumerate().rfind(|(i, _)| (*i as f64) <= h).unwrap();
        match v.get(below.0 + 1) {
            Some(next) => below.1 + (h - below.0 as f64) * (next - below.1),
            None => *below.1,
        }
    }

    proptest! {
        #[test]
        fn summary_matches_naive(values in proptest::collection::vec(-1e6f64..1e6, 1..60)) {
            let mut v = values.clone();
            let s = summarize(&mut v).unwrap();
            let n = values.len() as f64;
            let naive_mean = values.iter().sum::<f64>() / n;
            prop_assert!(close(s.mean, naive_mean, 1e-9));
            let mut sorted = values.clone();
            sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let naive_median = if sorted.len() % 2 == 1 {
                sorted[sorted.len() / 2]
            } else {
                (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0
            };
            prop_assert!(close(s.median, naive_median, 1e-9), "{} vs {}", s.median, naive_median);
            prop_assert!(close(s.p5, naive_quantile(&values, 0.05), 1e-9));
            prop_assert!(close(s.p95, naive_quantile(&values, 0.95), 1e-9));
            prop_assert!(s.min <= s.p5 && s.p5 <= s.median && s.median <= s.p95 && s.p95 <= s.max);
            if values.len() > 1 {
                let naive_var = values.iter().map(|x| (x - naive_mean).powi(2)).sum::<f64>() / (n - 1.0);
                prop_assert!(close(s.sd.unwrap(), naive_var.sqrt(), 1e-6));
                let (lo, hi) = s.ci95.unwrap();
                prop_assert!(lo <= s.mean && s.mean <= hi);
            } else {
                prop_assert!(s.sd.is_none() && s.ci95.is_none());
            }
        }

        #[test]
        fn quantile_inverts_cdf(p in 0.001f64..0.999, df in 0.5f64..500.0) {
            let t = t_quantile(p, df);
            prop_assert!((t_cdf(t, df) - p).abs() < 1e-9, "p {} df {} t {}", p, df, t);
        }

        #[test]
        fn welch_is_antisymmetric(a in proptest::collection::vec(0f64..100.0, 2..20), b in proptest::collection::vec(0f64..100.0, 2..20)) {
            if let (Some(x), Some(y)) = (welch_t_test(&a, &b), welch_t_test(&b, &a)) {
                prop_assert!(close(x.p, y.p, 1e-9));
                prop_assert!(x.t == -y.t || (x.t + y.t).abs() < 1e-9 * x.t.abs().max(1.0));
                prop_assert!((0.0..=1.0).contains(&x.p));
            }
        }
    }
}
