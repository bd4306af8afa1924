//! Acceptance of issue 5 (priority congestion control, DTL) on the
//! simulator: the `polite`, `latecomer`, `multcp`, `switch` and `five`
//! scenarios of `braid_lab::harness::priority_sim` at the paper's durations (virtual
//! time: a few seconds of CPU each), with the issue's assertions.

use braid_lab::harness::priority_sim::{
    five, jain_index, latecomer, multcp, multcp_pair, polite, run, switch, PhaseResult,
    ScenarioOptions, ScenarioReport,
};

fn opts() -> ScenarioOptions {
    ScenarioOptions::default()
}

fn phase<'a>(r: &'a ScenarioReport, name: &str) -> &'a PhaseResult {
    r.phases
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no phase {name}"))
}

fn mbps(p: &PhaseResult, label: &str) -> f64 {
    p.flows
        .iter()
        .find(|f| f.label == label)
        .unwrap_or_else(|| panic!("no flow {label} in phase {}", p.name))
        .mbps
}

fn capacity_share(p: &PhaseResult, label: &str) -> f64 {
    p.flows
        .iter()
        .find(|f| f.label == label)
        .and_then(|f| f.share_of_capacity)
        .expect("a rate-limited link")
}

/// Everything the report says, for failure messages (without the series).
fn dump(r: &ScenarioReport) -> String {
    let mut r = r.clone();
    for f in &mut r.flows {
        f.throughput_mbps.clear();
    }
    r.queue_drops.clear();
    serde_json::to_string_pretty(&r).unwrap()
}

fn no_errors(r: &ScenarioReport) {
    for f in &r.flows {
        assert!(f.error.is_none(), "{}: {:?}", f.label, f.error);
    }
}

/// One LEDBAT flow and one TCP flow, 10 Mbit/s, 40 ms RTT: alone, LEDBAT
/// fills ≥ 90% of the link with its added queuing delay ≤ target + 10%;
/// while TCP runs, TCP gets ≥ 90% of the capacity.
#[test]
fn polite_ledbat_fills_the_link_alone_and_yields_to_tcp() {
    let r = run(&polite(&opts()).unwrap()).unwrap();
    no_errors(&r);
    let d = dump(&r);
    for name in ["alone", "alone_again"] {
        let p = phase(&r, name);
        assert!(capacity_share(p, "ledbat") >= 0.9, "{name}\n{d}");
        let p99 = p.queuing_delay_p99_ms.expect("probe samples");
        assert!(p99 <= 110.0, "{name}: queuing delay p99 {p99} ms\n{d}");
    }
    let p = phase(&r, "with_tcp");
    assert!(capacity_share(p, "tcp") >= 0.9, "{d}");
    assert!(capacity_share(p, "ledbat") <= 0.05, "{d}");
}

/// LEDBAT++ (60 ms target, slowdowns) in the same scenario: it yields as
/// well, keeps the delay near its lower target, and fills most of the link
/// (its slowdowns cost up to 10% by design).
#[test]
fn polite_ledbat_plus_plus() {
    let o = ScenarioOptions {
        dtl_params: vec![("variant".into(), 1.0), ("target_ms".into(), 60.0)],
        ..opts()
    };
    let r = run(&polite(&o).unwrap()).unwrap();
    no_errors(&r);
    let d = dump(&r);
    let alone = phase(&r, "alone");
    assert!(capacity_share(alone, "ledbat") >= 0.85, "{d}");
    assert!(alone.queuing_delay_p99_ms.unwrap() <= 66.0, "{d}");
    assert!(capacity_share(phase(&r, "with_tcp"), "tcp") >= 0.9, "{d}");
}

/// Two LEDBAT flows 30 s apart: Jain's index ≥ 0.95 over the overlap (DTL
/// Table 2); RFC 6817's additive decrease, the baseline, leaves the link
/// to the latecomer, and loses more packets over the overlap (DTL Table 2:
/// the multiplicative decrease has less loss).
#[test]
fn latecomer_shares_fairly_with_the_multiplicative_decrease() {
    let md = run(&latecomer(&opts(), false).unwrap()).unwrap();
    let ad = run(&latecomer(&opts(), true).unwrap()).unwrap();
    no_errors(&md);
    no_errors(&ad);
    let (d, da) = (dump(&md), dump(&ad));
    let jain = phase(&md, "overlap").jain.unwrap();
    assert!(jain >= 0.95, "Jain {jain}\n{d}");
    let jain_additive = phase(&ad, "overlap").jain.unwrap();
    assert!(
        jain_additive < jain,
        "additive {jain_additive} vs {jain}\n{da}"
    );
    let (loss, loss_additive) = (phase(&md, "overlap").loss, phase(&ad, "overlap").loss);
    assert!(
        loss < loss_additive,
        "overlap loss {loss} vs additive {loss_additive}\n{d}\n{da}"
    );
    assert!(
        phase(&md, "settled").loss <= phase(&ad, "settled").loss,
        "{d}\n{da}"
    );
    assert!(
        phase(&md, "overlap").queuing_delay_p50_ms.unwrap() <= 100.0,
        "{d}"
    );
}

/// One MulTCP(N) flow against one TCP flow: the throughput ratio averaged
/// over three seeds is within ±20% of N for N = 1..4, and no single run is
/// off by more than 35%. One run's ratio is a noisy estimate (random loss,
/// a few hundred loss epochs): over seeds 1-10 single runs spread 2.76-3.91
/// at N = 3 and 3.29-5.02 at N = 4, with means 3.16 and 4.27; the mean of
/// seeds is what estimates the controller's share.
#[test]
fn multcp_takes_n_shares() {
    for n in [1.0, 2.0, 3.0, 4.0] {
        let mut ratios = Vec::new();
        for seed in 1..=3 {
            let o = ScenarioOptions { seed, ..opts() };
            let r = run(&multcp(&o, n).unwrap()).unwrap();
            no_errors(&r);
            let p = phase(&r, "steady");
            let ratio = mbps(p, &format!("multcp{n}")) / mbps(p, "tcp");
            ratios.push(ratio);
            assert!(
                (ratio - n).abs() <= 0.35 * n,
                "seed {seed}, N = {n}: ratio {ratio:.2}\n{}",
                dump(&r)
            );
            assert!(p.utilization.unwrap() >= 0.9, "{}", dump(&r));
        }
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        assert!((mean - n).abs() <= 0.2 * n, "N = {n}: mean ratio {mean:.2} of {ratios:.2?}");
    }
}

/// Two MulTCP(N) flows of equal N: Jain's index ≥ 0.95.
#[test]
fn equal_multcp_flows_share_fairly() {
    for n in [1.0, 2.0, 3.0, 4.0] {
        let r = run(&multcp_pair(&opts(), n).unwrap()).unwrap();
        no_errors(&r);
        let jain = phase(&r, "steady").jain.unwrap();
        assert!(jain >= 0.95, "N = {n}: Jain {jain}\n{}", dump(&r));
    }
}

/// Against CUBIC (the kernel's default TCP) the priority flows are N
/// virtual CUBIC flows (`multcp_base` = 1, picked by the scenario): one
/// MulTCP(N) flow against one CUBIC flow still takes N shares (±25%), and
/// two equal ones share fairly.
#[test]
fn multcp_takes_n_shares_against_cubic() {
    let o = ScenarioOptions {
        tcp: braid::CcAlgorithm::Cubic,
        ..opts()
    };
    for n in [1.0, 2.0, 3.0, 4.0] {
        let r = run(&multcp(&o, n).unwrap()).unwrap();
        no_errors(&r);
        let p = phase(&r, "steady");
        let ratio = mbps(p, &format!("multcp{n}")) / mbps(p, "tcp");
        assert!(
            (ratio - n).abs() <= 0.25 * n,
            "N = {n}: ratio {ratio:.2}\n{}",
            dump(&r)
        );
    }
    let r = run(&multcp_pair(&o, 2.0).unwrap()).unwrap();
    let jain = phase(&r, "steady").jain.unwrap();
    assert!(jain >= 0.95, "Jain {jain}\n{}", dump(&r));
}

/// DTL Fig. 6 against CUBIC: the three regimes with CUBIC-based priority
/// flows; Reno-based MulTCP (`multcp_base` = 0) falls short of one CUBIC
/// flow's share behind the deep queue, which is why CUBIC flows are the
/// default.
#[test]
fn switch_against_cubic() {
    let o = ScenarioOptions {
        tcp: braid::CcAlgorithm::Cubic,
        ..opts()
    };
    let ratios = |o: &ScenarioOptions| {
        let r = run(&switch(o).unwrap()).unwrap();
        no_errors(&r);
        let d = dump(&r);
        assert!(capacity_share(phase(&r, "p0"), "dtl") <= 0.1, "{d}");
        for s in &r.switches {
            assert!(s.stall_rtts <= 2.0, "{s:?}\n{d}");
        }
        let ratio = |name| mbps(phase(&r, name), "dtl") / mbps(phase(&r, name), "tcp");
        (ratio("p1"), ratio("p2"), d)
    };
    let (p1, p2, d) = ratios(&o);
    assert!((0.75..=1.33).contains(&p1), "p1 ratio {p1}\n{d}");
    assert!(
        (1.5..=3.5).contains(&p2) && p2 >= p1 + 0.5,
        "p2 ratio {p2}\n{d}"
    );
    let reno = ScenarioOptions {
        dtl_params: vec![("multcp_base".into(), 0.0)],
        ..o
    };
    let (reno_p1, reno_p2, d) = ratios(&reno);
    assert!(
        reno_p1 < p1 && reno_p2 < p2,
        "Reno flows {reno_p1}, {reno_p2}\n{d}"
    );
}

/// DTL Fig. 6: 5 Mbit/s, RTT 25 ms, one TCP flow; the DTL flow at p = 0
/// yields, at p = 1 shares equally, at p = 2 takes about twice TCP's share;
/// no stall longer than 2 RTT at a switch.
#[test]
fn switch_shows_three_regimes_without_stalls() {
    let r = run(&switch(&opts()).unwrap()).unwrap();
    no_errors(&r);
    let d = dump(&r);
    let p0 = phase(&r, "p0");
    assert!(capacity_share(p0, "tcp") >= 0.85, "{d}");
    assert!(capacity_share(p0, "dtl") <= 0.1, "{d}");
    let ratio1 = mbps(phase(&r, "p1"), "dtl") / mbps(phase(&r, "p1"), "tcp");
    assert!((0.75..=1.33).contains(&ratio1), "p1 ratio {ratio1}\n{d}");
    // About twice; up to 3.5 with the drop-tail queue's synchronised losses
    // (see `five_flows_follow_their_priorities`).
    let ratio2 = mbps(phase(&r, "p2"), "dtl") / mbps(phase(&r, "p2"), "tcp");
    assert!(
        (1.5..=3.5).contains(&ratio2) && ratio2 >= ratio1 + 0.5,
        "p2 ratio {ratio2}\n{d}"
    );
    assert_eq!(r.switches.len(), 2);
    for s in &r.switches {
        assert!(s.stall_rtts <= 2.0, "{s:?}\n{d}");
        assert!(s.srtt_ms > 0.0);
    }
    // The plot's data: one throughput value per second and flow.
    assert!(r.flows.iter().all(|f| f.throughput_mbps.len() == 480));
}

/// DTL Fig. 7: five flows at p = 0 share equally; at 120 s four go to 1
/// and the p = 0 flow yields to them while they share equally; at 230 s two
/// go to 2 and get about twice the p = 1 flows' throughput.
#[test]
fn five_flows_follow_their_priorities() {
    let r = run(&five(&opts()).unwrap()).unwrap();
    no_errors(&r);
    let d = dump(&r);
    let all = phase(&r, "all_p0");
    assert!(all.jain.unwrap() >= 0.95, "{d}");

    let four = phase(&r, "four_p1");
    let p1: Vec<f64> = (1..5).map(|i| mbps(four, &format!("dtl{i}"))).collect();
    assert!(jain_index(&p1).unwrap() >= 0.95, "{p1:?}\n{d}");
    assert!(
        mbps(four, "dtl0") <= 0.1 * p1.iter().cloned().fold(f64::MAX, f64::min),
        "{d}"
    );

    let two = phase(&r, "two_p2");
    let p2 = [mbps(two, "dtl1"), mbps(two, "dtl2")];
    let p1 = [mbps(two, "dtl3"), mbps(two, "dtl4")];
    assert!(
        jain_index(&p2).unwrap() >= 0.95 && jain_index(&p1).unwrap() >= 0.95,
        "{d}"
    );
    // "About twice". MulTCP2's decrease is exact for random losses; the
    // drop-tail queue (which LEDBAT needs here) drops from every flow in
    // the same overflow, and with fully synchronised losses MulTCP(2) would
    // get (a/b)/(a₁/b₁) = 3.5 times MulTCP(1). Measured here: 2.1–2.8.
    let ratio = (p2[0] + p2[1]) / (p1[0] + p1[1]);
    assert!((1.5..=3.5).contains(&ratio), "p2/p1 {ratio}\n{d}");
    // Yielding: a tenth of what a priority-1 flow gets on average (the
    // smaller of the two would tie the bar to how evenly those two split;
    // at its two-packet floor the p = 0 flow gets 0.13-0.16 Mbit/s here).
    assert!(mbps(two, "dtl0") <= 0.1 * (p1[0] + p1[1]) / 2.0, "{d}");
    assert_eq!(r.switches.len(), 6);
    for s in &r.switches {
        assert!(s.stall_rtts <= 2.0, "{s:?}\n{d}");
    }
}

/// The JSON report carries, per phase, each flow's mean throughput, Jain's
/// index, queuing delay p50/p99 and loss.
#[test]
fn json_report_has_the_issue_keys() {
    let o = ScenarioOptions {
        scale: 0.1,
        ..opts()
    };
    let r = run(&switch(&o).unwrap()).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    for key in [
        "scenario",
        "link",
        "link_mbps",
        "flows",
        "phases",
        "switches",
        "queuing_delay_p50_ms",
        "queuing_delay_p99_ms",
        "trace_hash",
        "queue_drops",
    ] {
        assert!(v.get(key).is_some(), "missing `{key}`");
    }
    let p = &v["phases"][1];
    for key in [
        "name",
        "start_secs",
        "end_secs",
        "jain",
        "queuing_delay_p50_ms",
        "queuing_delay_p99_ms",
        "loss",
        "utilization",
    ] {
        assert!(p.get(key).is_some(), "phase lacks `{key}`: {p}");
    }
    for key in [
        "label",
        "priority",
        "mbps",
        "share_of_capacity",
        "share_of_total",
    ] {
        assert!(p["flows"][0].get(key).is_some(), "phase flow lacks `{key}`");
    }
    assert_eq!(p["flows"][1]["priority"], 1.0);
    for key in ["label", "cc", "mean_mbps", "loss", "throughput_mbps"] {
        assert!(v["flows"][0].get(key).is_some(), "flow lacks `{key}`");
    }
    assert_eq!(run(&switch(&o).unwrap()).unwrap(), r, "same seed, same run");
}
