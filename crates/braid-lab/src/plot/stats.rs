//! The numbers a box plot draws: quartiles by linear interpolation,
//! Tukey's whiskers (the most extreme values within 1.5 IQR of the box)
//! and the outliers beyond them. Pure functions, so the figures a plot
//! shows can be checked without drawing it.
//!
//! ```
//! use braid_lab::plot::box_stats;
//! let s = box_stats(&[1.0, 2.0, 3.0, 4.0, 100.0, f64::NAN]).unwrap();
//! assert_eq!((s.q1, s.median, s.q3), (2.0, 3.0, 4.0));
//! assert_eq!((s.lower_whisker, s.upper_whisker), (1.0, 4.0));
//! assert_eq!(s.outliers, vec![100.0]);
//! assert_eq!(s.n, 5); // the NaN is skipped
//! ```

use serde::Serialize;

/// How far beyond the box (in IQRs) a value may lie and still be reached
/// by a whisker (Tukey's convention, also matplotlib's and R's).
pub const WHISKER_IQR: f64 = 1.5;

/// The five numbers and outliers of one box.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BoxStats {
    /// Number of finite values the box summarises.
    pub n: usize,
    /// Smallest finite value.
    pub min: f64,
    /// First quartile (25th percentile).
    pub q1: f64,
    /// Median.
    pub median: f64,
    /// Third quartile (75th percentile).
    pub q3: f64,
    /// Largest finite value.
    pub max: f64,
    /// Smallest value not below `q1 - 1.5 IQR`, or `q1` if that value is
    /// above `q1`.
    pub lower_whisker: f64,
    /// Largest value not above `q3 + 1.5 IQR`, or `q3` if that value is
    /// below `q3`.
    pub upper_whisker: f64,
    /// Values beyond the whiskers, ascending.
    pub outliers: Vec<f64>,
}

/// The `p`-quantile (`0 <= p <= 1`) of ascending `sorted` values by linear
/// interpolation between the closest ranks (Hyndman & Fan type 7, the
/// default of numpy and R): position `h = (n - 1) p`, value
/// `x[⌊h⌋] + (h - ⌊h⌋) (x[⌊h⌋+1] - x[⌊h⌋])`. `None` when `sorted` is
/// empty or `p` is outside `0..=1`.
///
/// ```
/// use braid_lab::plot::quantile_sorted;
/// assert_eq!(quantile_sorted(&[1.0, 2.0, 3.0, 4.0], 0.25), Some(1.75));
/// assert_eq!(quantile_sorted(&[], 0.5), None);
/// ```
pub fn quantile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    // One definition for the boxes and the analysis tables, so a box's
    // median is the median `braid lab show` prints.
    crate::analysis::stats::percentile_sorted(sorted, p)
}

/// The box of `values`, skipping NaN and infinite values; `None` when no
/// finite value is left.
pub fn box_stats(values: &[f64]) -> Option<BoxStats> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let q1 = quantile_sorted(&sorted, 0.25)?;
    let median = quantile_sorted(&sorted, 0.5)?;
    let q3 = quantile_sorted(&sorted, 0.75)?;
    let reach = WHISKER_IQR * (q3 - q1);
    let (low_fence, high_fence) = (q1 - reach, q3 + reach);
    let inside = |v: &&f64| **v >= low_fence && **v <= high_fence;
    // A whisker ends at the last value inside its fence, but never inside
    // the box: when the box's edge is interpolated between a value beyond
    // the fence and one above the edge, the whisker shrinks to the edge
    // (as matplotlib draws it).
    let lower_whisker = sorted.iter().find(inside).map_or(q1, |v| v.min(q1));
    let upper_whisker = sorted.iter().rev().find(inside).map_or(q3, |v| v.max(q3));
    let outliers = sorted.iter().copied().filter(|v| *v < low_fence || *v > high_fence).collect();
    Some(BoxStats {
        n: sorted.len(),
        min: sorted[0],
        q1,
        median,
        q3,
        max: sorted[sorted.len() - 1],
        lower_whisker,
        upper_whisker,
        outliers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quartiles_match_numpy_linear_interpolation() {
        // numpy.percentile([7, 1, 3, 9, 5, 11], [25, 50, 75]) = [3.5, 6, 8.5]
        let s = box_stats(&[7.0, 1.0, 3.0, 9.0, 5.0, 11.0]).unwrap();
        assert_eq!((s.q1, s.median, s.q3), (3.5, 6.0, 8.5));
        assert_eq!((s.min, s.max, s.n), (1.0, 11.0, 6));
        assert!(s.outliers.is_empty());
        assert_eq!((s.lower_whisker, s.upper_whisker), (1.0, 11.0));
    }

    #[test]
    fn outliers_on_both_sides_and_whiskers_at_the_last_value_inside() {
        let v = [-50.0, 6.0, 7.0, 10.0, 11.0, 11.0, 12.0, 13.0, 16.0, 17.0, 90.0];
        let s = box_stats(&v).unwrap();
        assert_eq!((s.q1, s.median, s.q3), (8.5, 11.0, 14.5));
        // IQR 6, so the fences are -0.5 and 23.5.
        assert_eq!((s.lower_whisker, s.upper_whisker), (6.0, 17.0));
        assert_eq!(s.outliers, vec![-50.0, 90.0]);
    }

    #[test]
    fn a_whisker_never_ends_inside_the_box() {
        // q1 = -100 lies between -400 (beyond the fence at -250) and 0.
        let s = box_stats(&[-400.0, 0.0, 0.0, 0.0]).unwrap();
        assert_eq!((s.q1, s.q3), (-100.0, 0.0));
        assert_eq!((s.lower_whisker, s.upper_whisker), (-100.0, 0.0));
        assert_eq!(s.outliers, vec![-400.0]);
    }

    #[test]
    fn one_value_is_a_flat_box() {
        let s = box_stats(&[4.0]).unwrap();
        assert_eq!((s.q1, s.median, s.q3, s.lower_whisker, s.upper_whisker), (4.0, 4.0, 4.0, 4.0, 4.0));
    }

    #[test]
    fn non_finite_values_are_skipped_and_none_left_is_none() {
        assert_eq!(box_stats(&[]), None);
        assert_eq!(box_stats(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY]), None);
        assert_eq!(box_stats(&[f64::NAN, 2.0, 1.0]), box_stats(&[1.0, 2.0]));
    }

    #[test]
    fn quantile_rejects_p_outside_the_unit_interval() {
        assert_eq!(quantile_sorted(&[1.0, 2.0], 1.5), None);
        assert_eq!(quantile_sorted(&[1.0, 2.0], -0.1), None);
        assert_eq!(quantile_sorted(&[1.0, 2.0], f64::NAN), None);
        assert_eq!(quantile_sorted(&[1.0, 3.0], 0.5), Some(2.0));
    }

    proptest! {
        #[test]
        fn the_box_is_ordered_and_every_value_is_inside_or_an_outlier(
            v in prop::collection::vec(prop_oneof![9 => -1e6f64..1e6, 1 => Just(f64::NAN)], 0..60)
        ) {
            let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
            let Some(s) = box_stats(&v) else {
                prop_assert!(finite.is_empty());
                return Ok(());
            };
            prop_assert_eq!(s.n, finite.len());
            prop_assert!(s.min <= s.lower_whisker && s.lower_whisker <= s.q1);
            prop_assert!(s.q1 <= s.median && s.median <= s.q3);
            prop_assert!(s.q3 <= s.upper_whisker && s.upper_whisker <= s.max);
            let reach = WHISKER_IQR * (s.q3 - s.q1);
            for x in &finite {
                let is_outlier = *x < s.q1 - reach || *x > s.q3 + reach;
                prop_assert_eq!(is_outlier, s.outliers.contains(x));
                if !is_outlier {
                    prop_assert!(s.lower_whisker <= *x && *x <= s.upper_whisker);
                }
            }
            // Whiskers end at data points, or at the box when no value lies
            // between the box and the fence.
            prop_assert!(finite.contains(&s.lower_whisker) || s.lower_whisker == s.q1);
            prop_assert!(finite.contains(&s.upper_whisker) || s.upper_whisker == s.q3);
            let outliers_count = finite.iter().filter(|x| s.outliers.contains(x)).count();
            prop_assert_eq!(outliers_count, s.outliers.len());
        }

        #[test]
        fn quantiles_do_not_depend_on_input_order(mut v in prop::collection::vec(-1e3f64..1e3, 1..40), seed in any::<u64>()) {
            let a = box_stats(&v).unwrap();
            // A deterministic shuffle: rotate by the seed, then reverse.
            let k = (seed % v.len() as u64) as usize;
            v.rotate_left(k);
            v.reverse();
            prop_assert_eq!(a, box_stats(&v).unwrap());
        }
    }
}
