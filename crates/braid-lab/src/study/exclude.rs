//! `[[exclude]]`: combinations of a study's values that do not exist.
//!
//! A study's experiments are the Cartesian product of its lists, but some
//! combinations are not experiments at all (a browser player over a
//! transport browsers cannot speak, a multipath scheduler on one path).
//! Optuna calls the answer a conditional search space; a study keeps it
//! simple and explicit: each `[[exclude]]` table names some of the listed
//! parameters with one value or a list, and an experiment whose value of
//! every named parameter is among that table's values is not planned.
//!
//! Excluding never changes the experiments that remain: ids and seeds
//! derive from the parameter values alone ([`crate::plan`]), so adding an
//! exclude to a stored study keeps the stored ids of the rest and resumes.
//!
//! Internally each table is a [`Mask`] over the grid's axes (for each axis
//! it names, which of the axis's values it matches), so counting what is
//! left never walks the product (`kept`) and enumerating it skips whole
//! excluded blocks ([`Points`]).

use std::collections::HashMap;
use std::path::Path;

use toml::de::{DeTable, DeValue};

use super::{entries, value_list, FieldError, Location, ParamValues, Source, StudyError};
use crate::param::{Params, Value};
use crate::search::Axis;

/// One `[[exclude]]` table: an experiment matching every entry is not
/// planned.
#[derive(Debug, Clone, PartialEq)]
pub struct Exclude {
    /// Where the table is in the study file (its first key).
    pub at: Location,
    /// Each parameter it names with the values it matches, in file order.
    pub values: Vec<(String, Vec<Value>)>,
}

impl Exclude {
    /// Whether the experiment with `params` is excluded: each named
    /// parameter has one of the listed values (compared in canonical form,
    /// so `65536` and `"64KiB"` are the same size).
    pub fn matches(&self, params: &Params) -> bool {
        self.values.iter().all(|(name, values)| {
            params.get(name).is_ok_and(|v| {
                let text = v.to_text();
                values.iter().any(|w| w.to_text() == text)
            })
        })
    }
}

/// The study file's `exclude` array, checked against the study's lists
/// (`params`, every parameter of the template).
pub(super) fn parse(
    src: &Source<'_>,
    base: &Path,
    doc: &DeTable<'_>,
    params: &[ParamValues],
    template: &str,
) -> Result<Vec<Exclude>, StudyError> {
    let Some(value) = doc.get("exclude") else { return Ok(Vec::new()) };
    const ALLOWED: &str = "an array of tables: one [[exclude]] per combination, e.g. [[exclude]] player = \"dashjs\"";
    let not_tables = || -> StudyError {
        FieldError {
            at: src.at(value.span()),
            key: "exclude".into(),
            allowed: ALLOWED.into(),
            got: src.snippet(value.span()),
        }
        .into()
    };
    let DeValue::Array(items) = value.get_ref() else { return Err(not_tables()) };
    let listed: Vec<String> = params.iter().filter(|p| p.listed).map(|p| p.decl.name.clone()).collect();
    let mut excludes = Vec::with_capacity(items.len());
    for item in items.iter() {
        let DeValue::Table(table) = item.get_ref() else { return Err(not_tables()) };
        let entries = entries(table);
        let Some((first, _)) = entries.first() else {
            return Err(StudyError::EmptyExclude { at: src.at(item.span()) });
        };
        let mut values = Vec::with_capacity(entries.len());
        for (key, value) in &entries {
            let name = key.get_ref().as_ref();
            let at = src.at(key.span());
            let Some(p) = params.iter().find(|p| p.decl.name == name) else {
                return Err(StudyError::ExcludeUnknownParam {
                    at,
                    key: name.to_string(),
                    template: template.to_string(),
                    listed: listed.clone(),
                });
            };
            if !p.listed {
                return Err(StudyError::ExcludeUnlisted {
                    at,
                    key: name.to_string(),
                    default: p.decl.default.to_text(),
                    listed: listed.clone(),
                });
            }
            let list = value_list(src, base, &p.decl, name, value)?;
            // A value the study does not list is a typo: it would match
            // nothing and exclude nothing.
            let items: Vec<_> = match value.get_ref() {
                DeValue::Array(items) => items.iter().collect(),
                _ => vec![*value],
            };
            for (v, item) in list.iter().zip(items) {
                let text = v.to_text();
                if !p.values.iter().any(|w| w.to_text() == text) {
                    return Err(StudyError::ExcludeValue {
                        at: src.at(item.span()),
                        key: name.to_string(),
                        value: text,
                        allowed: p.values.iter().map(Value::to_text).collect(),
                    });
                }
            }
            values.push((name.to_string(), list));
        }
        excludes.push(Exclude { at: src.at(first.span()), values });
    }
    Ok(excludes)
}

/// Every exclude removes something the others do not, and something is
/// left to run. `axes` are the study's grid axes.
pub(super) fn check(axes: &[Axis], excludes: &[Exclude]) -> Result<(), StudyError> {
    let masks = masks(axes, excludes);
    let lens: Vec<usize> = axes.iter().map(|a| a.values.len()).collect();
    let all: Vec<&Mask> = masks.iter().collect();
    let left = kept(&lens, &all);
    for (j, exclude) in excludes.iter().enumerate() {
        let others: Vec<&Mask> = masks.iter().enumerate().filter(|(i, _)| *i != j).map(|(_, m)| m).collect();
        if kept(&lens, &others) == left {
            let by = excludes
                .iter()
                .zip(&masks)
                .enumerate()
                .filter(|(i, (_, m))| *i != j && m.overlaps(&masks[j]))
                .map(|(_, (e, _))| e.at.line)
                .collect();
            return Err(StudyError::ExcludeRemovesNothing { at: exclude.at.clone(), by });
        }
    }
    if left == 0 {
        if let Some(first) = excludes.first() {
            return Err(StudyError::AllExcluded { at: first.at.clone(), count: lens.iter().map(|&n| n as u128).product() });
        }
    }
    Ok(())
}

/// One exclude over the grid's axes: for each axis it names (ascending),
/// which of the axis's values it matches. An exclude naming a parameter
/// that is not an axis matches nothing (`never`), one naming none matches
/// everything (neither is in a parsed study; a study's fields are public).
#[derive(Debug, Clone)]
pub(crate) struct Mask {
    axes: Vec<(usize, Vec<bool>)>,
    never: bool,
}

impl Mask {
    /// Whether the point with these axis indices matches.
    fn matches(&self, digits: &[usize]) -> bool {
        !self.never
            && self.axes.iter().all(|(a, m)| digits.get(*a).is_some_and(|&d| m.get(d).copied().unwrap_or(false)))
    }

    /// Whether it matches value `v` of `axis` (an axis it does not name:
    /// every value).
    fn matches_value(&self, axis: usize, v: usize) -> bool {
        !self.never
            && self.axes.iter().find(|(a, _)| *a == axis).is_none_or(|(_, m)| m.get(v).copied().unwrap_or(false))
    }

    /// The last (fastest varying) axis it names.
    fn last_axis(&self) -> Option<usize> {
        self.axes.last().map(|(a, _)| *a)
    }

    /// Whether some point matches both.
    fn overlaps(&self, other: &Mask) -> bool {
        let mine: HashMap<usize, &Vec<bool>> = self.axes.iter().map(|(a, m)| (*a, m)).collect();
        !self.never
            && !other.never
            && self.axes.iter().all(|(_, m)| m.iter().any(|&b| b))
            && other.axes.iter().all(|(a, m)| match mine.get(a) {
                Some(n) => m.iter().zip(n.iter()).any(|(x, y)| *x && *y),
                None => m.iter().any(|&b| b),
            })
    }
}

/// The excludes as masks over `axes`.
pub(crate) fn masks(axes: &[Axis], excludes: &[Exclude]) -> Vec<Mask> {
    excludes
        .iter()
        .map(|e| {
            let mut never = false;
            let mut named: Vec<(usize, Vec<bool>)> = Vec::with_capacity(e.values.len());
            for (name, values) in &e.values {
                match axes.iter().position(|a| &a.name == name) {
                    Some(i) => {
                        let texts: Vec<String> = values.iter().map(Value::to_text).collect();
                        named.push((i, axes[i].values.iter().map(|v| texts.contains(&v.to_text())).collect()));
                    }
                    None => never = true,
                }
            }
            named.sort_by_key(|(i, _)| *i);
            // A name given twice (only in code) must match both lists.
            named.dedup_by(|b, a| {
                if a.0 == b.0 {
                    a.1.iter_mut().zip(&b.1).for_each(|(x, y)| *x &= *y);
                    true
                } else {
                    false
                }
            });
            Mask { axes: named, never }
        })
        .collect()
}

/// How many points of the product of axes of `lens` values no mask
/// matches, without walking the product: the axes no mask names only
/// multiply; over the others, values that leave the same masks possible
/// are counted together.
pub(crate) fn kept(lens: &[usize], masks: &[&Mask]) -> u128 {
    let masks: Vec<&Mask> = masks.iter().copied().filter(|m| !m.never).collect();
    let masks = masks.as_slice();
    let mut named: Vec<usize> = masks.iter().flat_map(|m| m.axes.iter().map(|(a, _)| *a)).collect();
    named.sort_unstable();
    named.dedup();
    let free: u128 = (0..lens.len()).filter(|a| !named.contains(a)).map(|a| lens[a] as u128).product();
    let mut memo = HashMap::new();
    let active: Vec<usize> = (0..masks.len()).collect();
    free.saturating_mul(kept_from(lens, masks, &named, 0, active, &mut memo))
}

/// [`kept`] over the named axes from `named[k]` on, for the points whose
/// earlier values every mask in `active` (and only those) matches.
fn kept_from(
    lens: &[usize],
    masks: &[&Mask],
    named: &[usize],
    k: usize,
    active: Vec<usize>,
    memo: &mut HashMap<(usize, Vec<usize>), u128>,
) -> u128 {
    let rest = || named[k..].iter().map(|&a| lens.get(a).copied().unwrap_or(0) as u128).product::<u128>();
    if active.is_empty() {
        return rest();
    }
    // A mask naming no axis from here on matches every remaining point.
    let from = named.get(k).copied();
    if active.iter().any(|&i| match (masks[i].last_axis(), from) {
        (None, _) | (_, None) => true,
        (Some(last), Some(from)) => last < from,
    }) {
        return 0;
    }
    let Some(axis) = from else { return 0 };
    if let Some(n) = memo.get(&(k, active.clone())) {
        return *n;
    }
    let mut groups: HashMap<Vec<usize>, u128> = HashMap::new();
    for v in 0..lens.get(axis).copied().unwrap_or(0) {
        let still: Vec<usize> = active.iter().copied().filter(|&i| masks[i].matches_value(axis, v)).collect();
        *groups.entry(still).or_default() += 1;
    }
    let n = groups
        .into_iter()
        .map(|(still, count)| count.saturating_mul(kept_from(lens, masks, named, k + 1, still, memo)))
        .fold(0u128, u128::saturating_add);
    memo.insert((k, active), n);
    n
}

/// The points of a grid no mask matches, in the grid's order (the first
/// axis slowest). A point a mask matches skips, with it, every point that
/// differs only in axes after the mask's last one.
pub(crate) struct Points {
    axes: Vec<Axis>,
    masks: Vec<Mask>,
    /// The current point's value indices; `None` when done.
    digits: Option<Vec<usize>>,
}

impl Points {
    pub(crate) fn new(axes: Vec<Axis>, masks: Vec<Mask>) -> Points {
        let digits = axes.iter().all(|a| !a.values.is_empty()).then(|| vec![0; axes.len()]);
        Points { axes, masks, digits }
    }

    /// Move to the next point that differs at axis `pos` or before;
    /// `None` (everything after): the end.
    fn advance(&mut self, pos: Option<usize>) {
        let Some(digits) = self.digits.as_mut() else { return };
        let Some(mut i) = pos else {
            self.digits = None;
            return;
        };
        for d in &mut digits[i + 1..] {
            *d = 0;
        }
        loop {
            digits[i] += 1;
            if digits[i] < self.axes[i].values.len() {
                return;
            }
            digits[i] = 0;
            if i == 0 {
                self.digits = None;
                return;
            }
            i -= 1;
        }
    }
}

impl Iterator for Points {
    type Item = Params;

    fn next(&mut self) -> Option<Params> {
        loop {
            let digits = self.digits.as_ref()?;
            match self.masks.iter().find(|m| m.matches(digits)) {
                Some(m) => {
                    let last = m.last_axis();
                    self.advance(last);
                }
                None => {
                    let mut params = Params::default();
                    for (axis, &d) in self.axes.iter().zip(digits) {
                        params.insert(&axis.name, axis.values[d].clone());
                    }
                    self.advance(self.axes.len().checked_sub(1));
                    return Some(params);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::path::Path;
    use std::sync::Arc;

    use proptest::prelude::*;

    use crate::param::{ParamDecl, ParamType, Params, Value};
    use crate::plan::{Plan, PlannedExperiment};
    use crate::study::{Study, StudyError};
    use crate::template::{Context, Template, TemplateError};

    /// The shape of the `dash` template's conflict: players, transports,
    /// schedulers; a size and an unlisted link.
    struct T;
    impl Template for T {
        fn name(&self) -> &str {
            "t"
        }
        fn description(&self) -> &str {
            "test"
        }
        fn params(&self) -> Vec<ParamDecl> {
            vec![
                ParamDecl::config("player", ParamType::one_of(&["braid", "dashjs"]), Value::Enum("braid".into())),
                ParamDecl::config(
                    "transport",
                    ParamType::one_of(&["tcp", "braid", "multipath"]),
                    Value::Enum("tcp".into()),
                ),
                ParamDecl::config(
                    "scheduler",
                    ParamType::one_of(&["default", "ecf", "redundant"]),
                    Value::Enum("default".into()),
                ),
                ParamDecl::config("chunk", ParamType::Size, Value::Size(4096)),
                ParamDecl::env("rate", ParamType::int_range(0, 1000), Value::Int(10)),
                ParamDecl::env("link", ParamType::Link, Value::Link("rtt=10ms".into())),
            ]
        }
        fn run(&self, _: &mut Context<'_>) -> Result<(), TemplateError> {
            Ok(())
        }
    }

    fn parse(text: &str) -> Result<Study, StudyError> {
        Study::parse(text, Path::new("dir/s.toml"), &[Arc::new(T) as Arc<dyn Template>])
    }

    const LISTS: &str = "template = \"t\"\nrepetitions = 2\nseed = 3\n\
        [configuration]\nplayer = [\"braid\", \"dashjs\"]\ntransport = [\"tcp\", \"braid\", \"multipath\"]\n\
        scheduler = [\"default\", \"ecf\"]\nchunk = [\"64KiB\", \"1MiB\"]\n[environment]\nrate = [5, 50]\n";

    const EXCLUDES: &str = "[[exclude]]\nplayer = \"dashjs\"\ntransport = [\"braid\", \"multipath\"]\n\
        [[exclude]]\ntransport = [\"tcp\", \"braid\"]\nscheduler = \"ecf\"\n";

    fn key(e: &PlannedExperiment) -> (String, u64, Params) {
        (e.id.clone(), e.seed, e.params.clone())
    }

    fn is_dead(p: &Params) -> bool {
        let (player, transport, scheduler) =
            (p.str("player").unwrap(), p.str("transport").unwrap(), p.str("scheduler").unwrap());
        (player == "dashjs" && transport != "tcp") || (scheduler == "ecf" && transport != "multipath")
    }

    #[test]
    fn excluded_combinations_are_not_planned_and_the_rest_keep_their_ids() {
        let full = parse(LISTS).unwrap();
        assert!(full.excludes.is_empty(), "a file without [[exclude]] parses as before");
        let study = parse(&format!("{LISTS}{EXCLUDES}")).unwrap();
        assert_eq!(study.excludes.len(), 2);
        assert_eq!((study.excludes[0].at.line, study.excludes[1].at.line), (12, 15));
        // Of 2 players x 3 transports x 2 schedulers, braid keeps every
        // transport with default and multipath with ecf, dashjs only tcp
        // with default (ecf is multipath's): 5 of 12, x 2 chunks x 2 rates x 2.
        let plan = Plan::new(&study);
        assert_eq!((plan.count(), study.count(), study.excluded()), (40, 40, 56));
        let kept: Vec<_> = Plan::new(&full).experiments.iter().filter(|e| !is_dead(&e.params)).map(key).collect();
        assert_eq!(plan.experiments.iter().map(key).collect::<Vec<_>>(), kept, "same ids, seeds, order");
        assert_eq!(kept.len(), 40);
        let s = plan.summary(1);
        assert_eq!((s.count, s.configurations, s.environments, s.excluded, s.excludes), (40, 24, 2, 56, 2));
        assert!(
            s.to_string().contains("40 experiments = 24 configurations x 2 environments x 2 repetitions - 56 excluded by 2 [[exclude]] tables"),
            "{s}"
        );
        assert_eq!(Plan::new(&full).summary(1).excluded_text(), "");
        // The stored text is the file, and parses back to the same study.
        let again = parse(&study.text).unwrap();
        assert_eq!((again.excludes.clone(), Plan::new(&again)), (study.excludes.clone(), plan));
    }

    #[test]
    fn values_compare_in_canonical_form() {
        let study = parse(&format!("{LISTS}[[exclude]]\nchunk = 65536\nrate = [50]\n")).unwrap();
        let plan = Plan::new(&study);
        assert_eq!(plan.count(), 96 - 24);
        assert!(plan.experiments.iter().all(|e| !(e.params.size("chunk") == Ok(65536) && e.params.int("rate") == Ok(50))));
    }

    #[test]
    fn a_list_one_exclude_would_make_too_large_can_fit() {
        let list: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
        let text = format!("template = \"t\"\nrepetitions = 1001\n[environment]\nrate = [{}]\n", list.join(","));
        assert!(matches!(parse(&text), Err(StudyError::TooLarge { .. })));
        let study = parse(&format!("{text}[[exclude]]\nrate = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n")).unwrap();
        assert_eq!((study.count(), study.excluded()), (990 * 1001, 10 * 1001));
    }

    #[test]
    fn every_error_names_the_line_and_the_allowed_form() {
        type Case = (&'static str, usize, fn(&StudyError) -> bool, &'static str);
        let cases: &[Case] = &[
            ("[[exclude]]\nbogus = 1\n", 12, |e| matches!(e, StudyError::ExcludeUnknownParam { .. }), "player, transport, scheduler, chunk, rate"),
            ("[[exclude]]\nlink = \"rtt=10ms\"\n", 12, |e| matches!(e, StudyError::ExcludeUnlisted { .. }), "does not vary or set `link`"),
            ("[[exclude]]\nplayer = \"dashjs\"\ntransport = [\"tcp\", \"quic\"]\n", 13, |e| matches!(e, StudyError::BadValue { .. }), "one of"),
            ("[[exclude]]\nrate = [5, 7]\n", 12, |e| matches!(e, StudyError::ExcludeValue { .. }), "expected one of: 5, 50"),
            ("[[exclude]]\nscheduler = \"redundant\"\n", 12, |e| matches!(e, StudyError::ExcludeValue { .. }), "expected one of: default, ecf"),
            ("[[exclude]]\nrate = []\n", 12, |e| matches!(e, StudyError::EmptyList { .. }), "non-empty list"),
            ("[[exclude]]\nrate = [5, 5]\n", 12, |e| matches!(e, StudyError::DuplicateValue { .. }), "listed twice"),
            ("[[exclude]]\n", 11, |e| matches!(e, StudyError::EmptyExclude { .. }), "PARAMETER = VALUE"),
            ("[[exclude]]\nrate = 5\n[[exclude]]\nrate = 5\nplayer = \"braid\"\n", 14, |e| {
                matches!(e, StudyError::ExcludeRemovesNothing { by, .. } if by == &[12])
            }, "line 12 removes every experiment"),
            ("[[exclude]]\nrate = 5\nplayer = \"braid\"\n[[exclude]]\nrate = 5\n", 12, |e| {
                matches!(e, StudyError::ExcludeRemovesNothing { by, .. } if by == &[15])
            }, "delete it"),
            ("[[exclude]]\nrate = 5\n[[exclude]]\nplayer = \"braid\"\n[[exclude]]\nrate = 5\nplayer = \"braid\"\n", 16, |e| {
                matches!(e, StudyError::ExcludeRemovesNothing { by, .. } if by == &[12, 14])
            }, "lines 12, 14 remove"),
            ("[[exclude]]\nrate = 5\n[[exclude]]\nrate = 50\n", 12, |e| matches!(e, StudyError::AllExcluded { count: 48, .. }), "nothing would run"),
            ("exclude = 1\n", 1, |e| matches!(e, StudyError::Field(_)), "an array of tables"),
            ("[exclude]\nrate = 5\n", 11, |e| matches!(e, StudyError::Field(_)), "[[exclude]]"),
            ("exclude = [1]\n", 1, |e| matches!(e, StudyError::Field(_)), "an array of tables"),
        ];
        for (tail, line, is, says) in cases {
            // A top-level key goes before the tables.
            let text = if tail.starts_with("exclude") { format!("{tail}{LISTS}") } else { format!("{LISTS}{tail}") };
            let e = parse(&text).unwrap_err();
            assert!(is(&e), "{tail:?}: {e:?}");
            assert_eq!(e.location().map(|l| l.line), Some(*line), "{tail:?}: {e}");
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("dir/s.toml:{line}:")), "{msg}");
            assert!(msg.contains(says), "{tail:?}: {msg}");
        }
    }

    /// Lists of 1-3 values for `a`, `b`, `c` (ints) and `rate`.
    struct Ints;
    impl Template for Ints {
        fn name(&self) -> &str {
            "ints"
        }
        fn description(&self) -> &str {
            "test"
        }
        fn params(&self) -> Vec<ParamDecl> {
            ["a", "b", "c"]
                .iter()
                .map(|n| ParamDecl::config(n, ParamType::int(), Value::Int(0)))
                .chain([ParamDecl::env("rate", ParamType::int(), Value::Int(0))])
                .collect()
        }
        fn run(&self, _: &mut Context<'_>) -> Result<(), TemplateError> {
            Ok(())
        }
    }

    const NAMES: [&str; 4] = ["a", "b", "c", "rate"];

    proptest! {
        /// Random lists and excludes: the plan is the product minus what
        /// an exclude matches (by `Exclude::matches`, point by point), in
        /// the product's order with its ids and seeds, without duplicates;
        /// a study is refused exactly when an exclude removes nothing new
        /// or nothing is left.
        #[test]
        fn planned_is_product_minus_matched(
            lens in proptest::collection::vec(1usize..4, 4),
            reps in 1u32..3,
            raw in proptest::collection::vec(proptest::collection::vec(proptest::option::of(1u8..8), 4), 0..4),
        ) {
            let mut text = format!("template = \"ints\"\nrepetitions = {reps}\n[configuration]\n");
            for (i, name) in NAMES.iter().enumerate() {
                if i == 3 {
                    text.push_str("[environment]\n");
                }
                let values: Vec<String> = (0..lens[i]).map(|v| v.to_string()).collect();
                text.push_str(&format!("{name} = [{}]\n", values.join(", ")));
            }
            let mut excludes = Vec::new();
            for table in &raw {
                text.push_str("[[exclude]]\n");
                let mut named = Vec::new();
                for (i, bits) in table.iter().enumerate() {
                    // The bits of `bits` that fall in the list choose the values.
                    let Some(bits) = bits else { continue };
                    let values: Vec<usize> = (0..lens[i]).filter(|v| bits & (1 << v) != 0).collect();
                    if values.is_empty() {
                        continue;
                    }
                    let shown: Vec<String> = values.iter().map(|v| v.to_string()).collect();
                    text.push_str(&format!("{} = [{}]\n", NAMES[i], shown.join(", ")));
                    named.push((i, values));
                }
                excludes.push(named);
            }
            let templates: Vec<Arc<dyn Template>> = vec![Arc::new(Ints)];
            let full_text = text.split("[[exclude]]").next().unwrap().to_string();
            let full = Plan::new(&Study::parse(&full_text, Path::new("p.toml"), &templates).unwrap());
            let matched = |p: &Params, e: &Vec<(usize, Vec<usize>)>| {
                e.iter().all(|(i, vs)| vs.contains(&(p.int(NAMES[*i]).unwrap() as usize)))
            };
            let expected: Vec<&PlannedExperiment> =
                full.experiments.iter().filter(|x| !excludes.iter().any(|e| matched(&x.params, e))).collect();
            match Study::parse(&text, Path::new("p.toml"), &templates) {
                Ok(study) => {
                    prop_assert!(excludes.iter().all(|e| !e.is_empty()));
                    let plan = Plan::new(&study);
                    prop_assert_eq!(plan.experiments.iter().collect::<Vec<_>>(), expected.clone());
                    prop_assert!(plan.experiments.iter().all(|x| !study.excludes.iter().any(|e| e.matches(&x.params))));
                    prop_assert_eq!((study.count(), study.excluded()), (expected.len(), full.count() - expected.len()));
                    let ids: HashSet<&str> = plan.experiments.iter().map(|x| x.id.as_str()).collect();
                    prop_assert_eq!(ids.len(), plan.count());
                    // Every exclude removes something the others keep.
                    for j in 0..excludes.len() {
                        prop_assert!(full.experiments.iter().any(|x| matched(&x.params, &excludes[j])
                            && !excludes.iter().enumerate().any(|(i, e)| i != j && matched(&x.params, e))));
                    }
                }
                Err(StudyError::EmptyExclude { .. }) => prop_assert!(excludes.iter().any(|e| e.is_empty())),
                Err(StudyError::AllExcluded { .. }) => prop_assert!(expected.is_empty()),
                Err(StudyError::ExcludeRemovesNothing { at, .. }) => {
                    let j = text[..].lines().take(at.line).filter(|l| *l == "[[exclude]]").count() - 1;
                    prop_assert!(full.experiments.iter().all(|x| !matched(&x.params, &excludes[j])
                        || excludes.iter().enumerate().any(|(i, e)| i != j && matched(&x.params, e))));
                }
                Err(e) => prop_assert!(false, "{e}"),
            }
        }
    }
}
