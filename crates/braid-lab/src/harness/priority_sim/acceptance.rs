//! Issue 5's acceptance criteria, with issue 25's for `polite` (TCP beside
//! the p = 0 flow against TCP alone on the same link, ≥ 0.9, ≥ 0.8 under an
//! AQM; p = 0 alone against the link or TCP alone, whichever is less),
//! evaluated on the reports of one scenario (from the simulator or the
//! emulator), so that `braid sim priority` and `braid bench priority`
//! print the same verdicts computed the same way.

use super::report::{jain_index, PhaseResult, ScenarioReport};
use super::timing::has_aqm;

/// One criterion: what was measured against what is wanted.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Check {
    /// What is measured, e.g. `polite.with_tcp.tcp_share`.
    pub name: String,
    /// The measured value (`None` if the report lacks it).
    pub value: Option<f64>,
    /// The requirement, e.g. `>= 0.9`.
    pub want: String,
    /// Whether the value meets it.
    pub pass: bool,
}

fn check(name: impl Into<String>, value: Option<f64>, lo: Option<f64>, hi: Option<f64>) -> Check {
    let want = match (lo, hi) {
        (Some(l), Some(h)) => format!("{l:.3}..={h:.3}"),
        (Some(l), None) => format!(">= {l:.3}"),
        (None, Some(h)) => format!("<= {h:.3}"),
        (None, None) => "any".to_string(),
    };
    let pass = value.is_some_and(|v| lo.is_none_or(|l| v >= l) && hi.is_none_or(|h| v <= h));
    Check {
        name: name.into(),
        value,
        want,
        pass,
    }
}

fn phase<'a>(r: &'a ScenarioReport, name: &str) -> Option<&'a PhaseResult> {
    r.phases.iter().find(|p| p.name == name)
}

fn flow_mbps(p: Option<&PhaseResult>, label: &str) -> Option<f64> {
    p?.flows.iter().find(|f| f.label == label).map(|f| f.mbps)
}

fn capacity_share(p: Option<&PhaseResult>, label: &str) -> Option<f64> {
    p?.flows
        .iter()
        .find(|f| f.label == label)?
        .share_of_capacity
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn max_stall(r: &ScenarioReport) -> Option<f64> {
    r.switches.iter().map(|s| s.stall_rtts).reduce(f64::max)
}

/// The criteria of the scenario that produced `reports` (the output of
/// [`super::scenarios`] run in order). `ledbat_target_ms` is the p = 0
/// controller's target (100 ms for LEDBAT, 60 ms for LEDBAT++).
pub fn checks(reports: &[ScenarioReport], ledbat_target_ms: f64) -> Vec<Check> {
    let mut out = Vec::new();
    let find = |name: &str| reports.iter().find(|r| r.scenario == name);
    for r in reports {
        let s = r.scenario.as_str();
        match s {
            "polite" => {
                // The yardstick is TCP alone on the same link (issue 25):
                // on a shallow buffer it cannot fill the link either. A
                // report without the `tcp_alone` phase (from before it
                // existed) is judged against the capacity, as then.
                let alone_tcp = phase(r, "tcp_alone");
                let tcp_alone_mbps = flow_mbps(alone_tcp, "tcp_alone");
                let with = phase(r, "with_tcp");
                if tcp_alone_mbps.is_some() {
                    // An AQM drops early, from both flows: the delay-based
                    // flow sees little queue to back off from.
                    let lo = if has_aqm(&r.link) { 0.8 } else { 0.9 };
                    out.push(check(
                        "polite.with_tcp.tcp_over_tcp_alone",
                        ratio(flow_mbps(with, "tcp"), tcp_alone_mbps),
                        Some(lo),
                        None,
                    ));
                } else {
                    out.push(check(
                        "polite.with_tcp.tcp_share",
                        capacity_share(with, "tcp"),
                        Some(0.9),
                        None,
                    ));
                }
                // p = 0 alone: 0.9 of the link, or of TCP alone where TCP
                // alone reaches less.
                let yardstick = capacity_share(alone_tcp, "tcp_alone").map_or(1.0, |s| s.min(1.0));
                for name in ["alone", "alone_again"] {
                    let p = phase(r, name);
                    out.push(check(
                        format!("polite.{name}.ledbat_share"),
                        capacity_share(p, "ledbat"),
                        Some(0.9 * yardstick),
                        None,
                    ));
                    out.push(check(
                        format!("polite.{name}.queuing_delay_p99_ms"),
                        p.and_then(|p| p.queuing_delay_p99_ms),
                        None,
                        Some(ledbat_target_ms * 1.1),
                    ));
                }
            }
            "latecomer" => {
                let overlap = phase(r, "overlap");
                out.push(check(
                    "latecomer.overlap.jain",
                    overlap.and_then(|p| p.jain),
                    Some(0.95),
                    None,
                ));
                if let Some(ad) = find("latecomer_additive") {
                    let ad_overlap = phase(ad, "overlap");
                    let (md_loss, ad_loss) = (overlap.map(|p| p.loss), ad_overlap.map(|p| p.loss));
                    // Less loss than the additive decrease: the difference
                    // must be positive.
                    let less = match (md_loss, ad_loss) {
                        (Some(m), Some(a)) => Some(a - m),
                        _ => None,
                    };
                    let mut c = check(
                        "latecomer.overlap.loss_additive_minus_multiplicative",
                        less,
                        None,
                        None,
                    );
                    c.want = "> 0".to_string();
                    c.pass = less.is_some_and(|d| d > 0.0);
                    out.push(c);
                    out.push(check(
                        "latecomer_additive.overlap.jain",
                        ad_overlap.and_then(|p| p.jain),
                        None,
                        None,
                    ));
                }
            }
            "switch" => {
                let (p0, p1, p2) = (phase(r, "p0"), phase(r, "p1"), phase(r, "p2"));
                out.push(check(
                    "switch.p0.tcp_share",
                    capacity_share(p0, "tcp"),
                    Some(0.85),
                    None,
                ));
                out.push(check(
                    "switch.p0.dtl_share",
                    capacity_share(p0, "dtl"),
                    None,
                    Some(0.1),
                ));
                out.push(check(
                    "switch.p1.dtl_over_tcp",
                    ratio(flow_mbps(p1, "dtl"), flow_mbps(p1, "tcp")),
                    Some(0.75),
                    Some(1.33),
                ));
                out.push(check(
                    "switch.p2.dtl_over_tcp",
                    ratio(flow_mbps(p2, "dtl"), flow_mbps(p2, "tcp")),
                    Some(1.5),
                    Some(3.5),
                ));
                out.push(check(
                    "switch.max_stall_rtts",
                    max_stall(r),
                    None,
                    Some(2.0),
                ));
            }
            "five" => {
                let all = phase(r, "all_p0");
                out.push(check(
                    "five.all_p0.jain",
                    all.and_then(|p| p.jain),
                    Some(0.95),
                    None,
                ));
                let four = phase(r, "four_p1");
                let p1: Option<Vec<f64>> = (1..5)
                    .map(|i| flow_mbps(four, &format!("dtl{i}")))
                    .collect();
                out.push(check(
                    "five.four_p1.jain_p1",
                    p1.as_deref().and_then(jain_index),
                    Some(0.95),
                    None,
                ));
                let min_p1 = p1
                    .as_ref()
                    .map(|v| v.iter().copied().fold(f64::MAX, f64::min));
                out.push(check(
                    "five.four_p1.p0_over_min_p1",
                    ratio(flow_mbps(four, "dtl0"), min_p1),
                    None,
                    Some(0.1),
                ));
                let two = phase(r, "two_p2");
                let get = |l: &str| flow_mbps(two, l);
                let (p2, p1) = ([get("dtl1"), get("dtl2")], [get("dtl3"), get("dtl4")]);
                let sum = |v: [Option<f64>; 2]| Some(v[0]? + v[1]?);
                out.push(check(
                    "five.two_p2.p2_over_p1",
                    ratio(sum(p2), sum(p1)),
                    Some(1.5),
                    Some(3.5),
                ));
                let jain2 = |v: [Option<f64>; 2]| jain_index(&[v[0]?, v[1]?]);
                out.push(check("five.two_p2.jain_p2", jain2(p2), Some(0.95), None));
                out.push(check("five.two_p2.jain_p1", jain2(p1), Some(0.95), None));
                out.push(check("five.max_stall_rtts", max_stall(r), None, Some(2.0)));
            }
            _ => {
                if s.starts_with("multcp_pair_") {
                    out.push(check(
                        format!("{s}.steady.jain"),
                        phase(r, "steady").and_then(|p| p.jain),
                        Some(0.95),
                        None,
                    ));
                } else if let Some(n) = s
                    .strip_prefix("multcp_")
                    .and_then(|n| n.parse::<f64>().ok())
                {
                    let p = phase(r, "steady");
                    let x = ratio(flow_mbps(p, &format!("multcp{n}")), flow_mbps(p, "tcp"));
                    out.push(check(
                        format!("{s}.steady.multcp_over_tcp"),
                        x,
                        Some(0.75 * n),
                        Some(1.25 * n),
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::priority_sim::{run, scenarios, ScenarioOptions};

    fn names(c: &[Check]) -> Vec<&str> {
        c.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn bounds_decide_pass() {
        assert!(check("x", Some(0.9), Some(0.9), None).pass);
        assert!(!check("x", Some(0.89), Some(0.9), None).pass);
        assert!(check("x", Some(1.0), Some(0.75), Some(1.25)).pass);
        assert!(!check("x", Some(1.3), Some(0.75), Some(1.25)).pass);
        assert!(
            !check("x", None, None, Some(2.0)).pass,
            "a missing value never passes"
        );
        assert_eq!(check("x", Some(1.0), None, Some(2.0)).want, "<= 2.000");
    }

    #[test]
    fn every_scenario_gets_its_checks() {
        let opts = ScenarioOptions {
            scale: 0.02,
            ns: vec![2.0],
            ..ScenarioOptions::default()
        };
        let expect: [(&str, &[&str]); 3] = [
            (
                "switch",
                &[
                    "switch.p0.tcp_share",
                    "switch.p1.dtl_over_tcp",
                    "switch.max_stall_rtts",
                ],
            ),
            (
                "latecomer",
                &[
                    "latecomer.overlap.jain",
                    "latecomer.overlap.loss_additive_minus_multiplicative",
                ],
            ),
            (
                "multcp",
                &[
                    "multcp_2.steady.multcp_over_tcp",
                    "multcp_pair_2.steady.jain",
                ],
            ),
        ];
        for (name, wanted) in expect {
            let reports: Vec<_> = scenarios(name, &opts)
                .unwrap()
                .iter()
                .map(|c| run(c).unwrap())
                .collect();
            let c = checks(&reports, 100.0);
            for w in wanted {
                assert!(names(&c).contains(w), "{name}: no {w} in {:?}", names(&c));
            }
            assert!(c.iter().all(|c| c.value.is_some()), "{name}: {c:?}");
        }
        let multcp = checks(
            &[run(&scenarios("multcp", &opts).unwrap()[0]).unwrap()],
            100.0,
        );
        assert_eq!(multcp[0].want, "1.500..=2.500");
    }

    #[test]
    fn polite_is_judged_against_tcp_alone_and_leniently_under_an_aqm() {
        let cfg = crate::harness::priority_sim::polite(&ScenarioOptions {
            scale: 0.02,
            ..ScenarioOptions::default()
        })
        .unwrap();
        let mut r = run(&cfg).unwrap();
        // The default link: 10 Mbit/s.
        let set = |r: &mut ScenarioReport, phase: &str, label: &str, mbps: f64| {
            let p = r.phases.iter_mut().find(|p| p.name == phase).unwrap();
            let f = p.flows.iter_mut().find(|f| f.label == label).unwrap();
            f.mbps = mbps;
            f.share_of_capacity = Some(mbps / 10.0);
        };
        let get = |r: &ScenarioReport, name: &str| {
            checks(std::slice::from_ref(r), 100.0)
                .into_iter()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("no {name}"))
        };
        set(&mut r, "tcp_alone", "tcp_alone", 8.5);
        set(&mut r, "with_tcp", "tcp", 7.8);
        set(&mut r, "alone", "ledbat", 7.7);
        let c = get(&r, "polite.with_tcp.tcp_over_tcp_alone");
        assert!(c.pass && (c.value.unwrap() - 7.8 / 8.5).abs() < 1e-9, "{c:?}");
        // 0.9 of TCP alone's 0.85 of the link.
        let c = get(&r, "polite.alone.ledbat_share");
        assert!(c.pass && c.want == ">= 0.765", "{c:?}");
        set(&mut r, "alone", "ledbat", 7.6);
        assert!(!get(&r, "polite.alone.ledbat_share").pass);
        set(&mut r, "with_tcp", "tcp", 7.2);
        assert!(!get(&r, "polite.with_tcp.tcp_over_tcp_alone").pass);
        r.link.push_str(",aqm=codel");
        let c = get(&r, "polite.with_tcp.tcp_over_tcp_alone");
        assert!(c.pass && c.want == ">= 0.800", "{c:?}");
        // A report from before the TCP-alone phase: the capacity.
        r.phases.retain(|p| p.name != "tcp_alone");
        let c = get(&r, "polite.with_tcp.tcp_share");
        assert!(!c.pass && c.want == ">= 0.900", "{c:?}");
        assert_eq!(get(&r, "polite.alone_again.ledbat_share").want, ">= 0.900");
    }
}
