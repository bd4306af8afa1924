//! The priority-schedule syntax: `0@0s,1@60s,2@120s`.

use std::time::Duration;

/// A `--priority-schedule` that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid priority schedule item `{item}`: {why}; expected comma-separated PRIORITY@TIME items with increasing times, such as 0@0s,1@60s,2@120s (PRIORITY from 0 to 100, TIME such as 90s, 1.5s, 500ms or 2m)")]
pub struct ScheduleError {
    /// The offending item (or the whole text if it is empty).
    pub item: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Parses a priority schedule such as `0@0s,1@60s,2@120s`: at each time
/// (from the start of the transfer) the priority becomes the value.
///
/// ```
/// use braid_lab::harness::priority_sim::parse_priority_schedule;
/// use std::time::Duration;
/// let s = parse_priority_schedule("0@0s, 1@1.5m,2.5@200s").unwrap();
/// assert_eq!(s, vec![
///     (Duration::ZERO, 0.0),
///     (Duration::from_secs(90), 1.0),
///     (Duration::from_secs(200), 2.5),
/// ]);
/// let err = parse_priority_schedule("1@60s,0@30s").unwrap_err();
/// assert!(err.to_string().contains("`0@30s`"));
/// ```
pub fn parse_priority_schedule(text: &str) -> Result<Vec<(Duration, f64)>, ScheduleError> {
    let err = |item: &str, why| ScheduleError {
        item: item.to_string(),
        why,
    };
    if text.trim().is_empty() {
        return Err(err(text, "the schedule is empty"));
    }
    let mut out: Vec<(Duration, f64)> = Vec::new();
    for item in text.split(',').map(str::trim) {
        let (p, t) = item
            .split_once('@')
            .ok_or_else(|| err(item, "no `@` between priority and time"))?;
        let p: f64 = p
            .trim()
            .parse()
            .ok()
            .filter(|p: &f64| (0.0..=100.0).contains(p))
            .ok_or_else(|| err(item, "the priority is not a number from 0 to 100"))?;
        let t = parse_time(t.trim()).ok_or_else(|| err(item, "the time is not a duration"))?;
        if out.last().is_some_and(|&(last, _)| t <= last) {
            return Err(err(item, "times must increase"));
        }
        out.push((t, p));
    }
    Ok(out)
}

/// `90s`, `1.5s`, `500ms`, `2m`, `2min`: non-negative, at most 10⁶ s.
fn parse_time(text: &str) -> Option<Duration> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let secs = value
        * match unit.trim() {
            "ms" => 1e-3,
            "s" => 1.0,
            "m" | "min" => 60.0,
            _ => return None,
        };
    (secs.is_finite() && (0.0..=1e6).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_schedules_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_priority_schedule("0@0s,1@60s,2@120s").unwrap(),
            vec![
                (Duration::ZERO, 0.0),
                (Duration::from_secs(60), 1.0),
                (Duration::from_secs(120), 2.0)
            ]
        );
        assert_eq!(
            parse_priority_schedule("0.5@250ms").unwrap(),
            vec![(Duration::from_millis(250), 0.5)]
        );
        for (bad, why) in [
            ("", "empty"),
            ("1", "no `@`"),
            ("x@1s", "priority"),
            ("-1@1s", "priority"),
            ("101@1s", "priority"),
            ("1@", "time"),
            ("1@5", "time"),
            ("1@5h", "time"),
            ("1@-5s", "time"),
            ("1@10s,2@10s", "increase"),
        ] {
            let e = parse_priority_schedule(bad).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains("0@0s,1@60s,2@120s"),
                "{bad}: {e}"
            );
        }
    }
}
