//! The median, minimum and maximum of one figure over runs.

use serde::Serialize;

/// Median, minimum and maximum of one figure over the runs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stat {
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Stat {
    /// The statistics of `values`, or `None` if there are none.
    pub fn of(values: &[f64]) -> Option<Stat> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Some(Stat {
            median,
            min: v[0],
            max: v[v.len() - 1],
        })
    }
}
