use braid_dash::qoe::{Played, Stall};

use super::*;
use crate::template::builtin::test_support::{assert_declarations_valid, assert_each_refused, defaults};

#[test]
fn declarations_are_valid() {
    // `trace`'s and `trace2`'s default (none) is not an existing file.
    assert_declarations_valid(&Dash, &["trace", "trace2"]);
}

#[test]
fn bad_combinations_are_refused_with_the_allowed_form() {
    assert_each_refused(
        &Dash,
        [
            ("abr", Value::Enum("mpc".into()), "player dashjs takes default, throughput, bola, dynamic"),
            ("transport", Value::Enum("braid".into()), "the browser players fetch over tcp only"),
            ("duration", Value::Duration(Duration::from_secs(500)), "at most content_duration"),
            ("buffer", Value::Duration(Duration::from_millis(100)), "from 1s to 600s"),
            ("bandwidth_floor", Value::Float(6.0), "below bandwidth_mean"),
            ("content_duration", Value::Duration(Duration::from_millis(1500)), "whole seconds"),
            ("trace", Value::Trace(PathBuf::from("/etc/hostname")), "give one rate source"),
            ("scheduler", Value::Enum("ecf".into()), "schedules multipath connections only"),
            ("cc", Value::Enum("bbr".into()), "not kernel TCP's"),
        ],
        Settings::from_params,
    );
    let mut p = defaults(&Dash);
    p.insert("player", Value::Enum("shaka".into()));
    p.insert("abr", Value::Enum("bola".into()));
    assert!(Settings::from_params(&p).unwrap_err().to_string().contains("player shaka takes default"));
    let mut p = defaults(&Dash);
    p.insert("player", Value::Enum("braid".into()));
    p.insert("abr", Value::Enum("mpc".into()));
    p.insert("transport", Value::Enum("braid".into()));
    assert!(Settings::from_params(&p).is_ok());
    p.insert("transport", Value::Enum("multipath".into()));
    let e = Settings::from_params(&p).unwrap_err().to_string();
    assert!(e.contains("needs a second path") && e.contains("trace2"), "{e}");
    let mut p = defaults(&Dash);
    p.insert("cut_at", Value::Duration(Duration::from_secs(5)));
    p.insert("link", Value::Link("rtt=10ms;at=5s:rtt=20ms".into()));
    assert!(Settings::from_params(&p).unwrap_err().to_string().contains("without a schedule"));
}

#[test]
fn the_link_gets_the_generated_rate_on_the_server_to_client_direction() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = defaults(&Dash);
    p.insert("bandwidth_mean", Value::Float(2.0));
    p.insert("bandwidth_variance", Value::Float(0.8));
    p.insert("duration", Value::Duration(Duration::from_secs(20)));
    let s = Settings::from_params(&p).unwrap();
    let (link, generated) = s.link(dir.path(), 7).unwrap();
    let text = link.to_string();
    assert!(text.contains("a2b:trace="), "{text}");
    assert!(dir.path().join("bandwidth.trace").is_file());
    let g = generated.unwrap();
    assert_eq!(g.rates_mbps.len() as u64, 20 + TRACE_SLACK_S);
    // The same seed draws the same link; another seed another one.
    let (_, again) = s.link(dir.path(), 7).unwrap();
    assert_eq!(again.unwrap().rates_mbps, g.rates_mbps);
    let (_, other) = s.link(dir.path(), 8).unwrap();
    assert_ne!(other.unwrap().rates_mbps, g.rates_mbps);
    // No process: the link as given.
    p.insert("bandwidth_mean", Value::Float(0.0));
    p.insert("link", Value::Link("rtt=40ms,rate=3mbit".into()));
    let s = Settings::from_params(&p).unwrap();
    let (link, generated) = s.link(dir.path(), 7).unwrap();
    assert!(generated.is_none());
    assert_eq!(link.rate().unwrap().bits_per_sec(), 3_000_000);
}

#[test]
fn the_cut_keeps_the_delay_and_delivers_nothing_for_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = defaults(&Dash);
    p.insert("cut_at", Value::Duration(Duration::from_secs(8)));
    p.insert("cut_for", Value::Duration(Duration::from_secs(10)));
    let s = Settings::from_params(&p).unwrap();
    let (link, _) = s.link(dir.path(), 1).unwrap();
    let cut = s.cut(dir.path(), &link).unwrap().unwrap();
    assert_eq!(cut.during.rtt(), link.rtt());
    assert_eq!((cut.at_s, cut.for_s), (8.0, 10.0));
    let first: u64 = std::fs::read_to_string(dir.path().join("cut.trace")).unwrap().lines().next().unwrap().parse().unwrap();
    assert!(first > 10_000, "the first delivery opportunity is after the cut: {first} ms");
    p.insert("cut_at", Value::Duration(Duration::ZERO));
    assert!(Settings::from_params(&p).unwrap().cut(dir.path(), &link).unwrap().is_none());
}

#[test]
fn the_page_url_carries_the_configuration() {
    let mut p = defaults(&Dash);
    p.insert("player", Value::Enum("shaka".into()));
    p.insert("buffer", Value::Duration(Duration::from_secs(12)));
    p.insert("duration", Value::Duration(Duration::from_secs(20)));
    let q = Settings::from_params(&p).unwrap().page_query();
    assert_eq!(q, "player.html?player=shaka&abr=default&buffer=12&duration=20&mpd=content/manifest.mpd");
}

fn trace(startup: f64, stalls: &[(f64, f64)], played: &[(f64, f64, f64)]) -> PlaybackTrace {
    PlaybackTrace {
        startup_s: Some(startup),
        stalls: stalls.iter().map(|&(start_s, duration_s)| Stall { start_s, duration_s }).collect(),
        played: played.iter().map(|&(start_s, duration_s, kbps)| Played { start_s, duration_s, kbps }).collect(),
        ended: false,
    }
}

#[test]
fn bitrates_are_placed_at_wall_time_after_the_stalls_before_them() {
    // Startup 1 s; 10 s of media at 1000, a 5 s stall at wall 6 s (media
    // 5 s), then 2500 from media 10 s.
    let t = trace(1.0, &[(6.0, 5.0)], &[(0.0, 10.0, 1000.0), (10.0, 5.0, 2500.0)]);
    assert_eq!(wall_bitrates(&t), vec![(1.0, 1000.0), (16.0, 2500.0)]);
    let never = PlaybackTrace::default();
    assert!(wall_bitrates(&never).is_empty());
}

#[test]
fn the_cut_s_stall_is_the_one_that_began_during_it() {
    let t = trace(1.0, &[(3.0, 1.0), (12.5, 8.0), (40.0, 2.0)], &[]);
    assert_eq!(cut_stall(&t, 10.0, 20.0), 8.0);
    assert_eq!(cut_stall(&t, 25.0, 35.0), 0.0);
}

/// A Mahimahi trace of `mbps` (whole packets per millisecond: 12 Mbit/s
/// each) for `ms` milliseconds, written into `dir`.
fn steady_trace(dir: &std::path::Path, name: &str, per_ms: u32, ms: u64) -> PathBuf {
    let mut text = String::new();
    for t in 1..=ms {
        for _ in 0..per_ms {
            text.push_str(&format!("{t}\n"));
        }
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Two traces on two paths, `first` as path 1's `trace`.
fn two_paths(first: &std::path::Path, second: &std::path::Path) -> Params {
    let mut p = defaults(&Dash);
    p.insert("player", Value::Enum("braid".into()));
    p.insert("bandwidth_mean", Value::Float(0.0));
    p.insert("trace", Value::Trace(first.to_path_buf()));
    p.insert("trace2", Value::Trace(second.to_path_buf()));
    p.insert("duration", Value::Duration(Duration::from_secs(20)));
    p
}

#[test]
fn multipath_needs_trace2_and_two_paths_build_both_links() {
    let dir = tempfile::tempdir().unwrap();
    let slow = steady_trace(dir.path(), "slow", 1, 1000);
    let fast = steady_trace(dir.path(), "fast", 3, 1000);
    let mut p = two_paths(&slow, &fast);
    p.insert("transport", Value::Enum("multipath".into()));
    p.insert("link2", Value::Link("rtt=60ms".into()));
    p.insert("queue", Value::Size(60_000));
    let s = Settings::from_params(&p).unwrap();
    let (l1, _) = s.link(dir.path(), 1).unwrap();
    let l2 = s.link2().unwrap().expect("a second path");
    assert_eq!((l1.rtt(), l2.rtt()), (Duration::from_millis(40), Duration::from_millis(60)));
    let text = l2.to_string();
    assert!(text.contains(&format!("a2b:trace={}", fast.display())) && text.contains("a2b:queue="), "{text}");
    // link2 empty: the same link as path 1.
    p.insert("link2", Value::Link(String::new()));
    assert_eq!(Settings::from_params(&p).unwrap().link2().unwrap().unwrap().rtt(), Duration::from_millis(40));
    // Without trace2: one path, and multipath is refused naming trace2.
    p.insert("trace2", Value::Trace(PathBuf::new()));
    let e = Settings::from_params(&p).unwrap_err().to_string();
    assert!(e.contains("trace2"), "{e}");
    p.insert("transport", Value::Enum("tcp".into()));
    assert!(Settings::from_params(&p).unwrap().link2().unwrap().is_none());
    // link2 alone makes no second path: refused rather than ignored.
    p.insert("link2", Value::Link("rtt=60ms".into()));
    assert!(Settings::from_params(&p).unwrap_err().to_string().contains("only trace2 creates"));
    // The link cut replaces one path: not on two.
    let mut p = two_paths(&slow, &fast);
    p.insert("cut_at", Value::Duration(Duration::from_secs(5)));
    assert!(Settings::from_params(&p).unwrap_err().to_string().contains("one-path testbeds only"));
    // A multipath connection takes any shipped scheduler.
    let mut p = two_paths(&slow, &fast);
    p.insert("transport", Value::Enum("multipath".into()));
    p.insert("scheduler", Value::Enum("ecf".into()));
    assert_eq!(Settings::from_params(&p).unwrap().scheduler, "ecf");
    p.insert("cc", Value::Enum("bbr".into()));
    assert_eq!(Settings::from_params(&p).unwrap().cc, braid_proto::CcAlgorithm::Bbr);
    // Browser players share the two-path testbed over tcp.
    let mut p = two_paths(&slow, &fast);
    p.insert("player", Value::Enum("dashjs".into()));
    assert!(Settings::from_params(&p).is_ok());
}

#[test]
fn the_better_path_is_the_one_with_the_higher_mean_trace() {
    let dir = tempfile::tempdir().unwrap();
    let slow = steady_trace(dir.path(), "slow", 1, 1000);
    let fast = steady_trace(dir.path(), "fast", 3, 1000);
    for (first, second, want) in [(&slow, &fast, 1), (&fast, &slow, 0)] {
        let s = Settings::from_params(&two_paths(first, second)).unwrap();
        let (link, _) = s.link(dir.path(), 1).unwrap();
        let means = s.path_means(dir.path(), &link).unwrap();
        let m: Vec<f64> = means.iter().map(|m| m.unwrap()).collect();
        assert_eq!(paths::better(&means), want, "{m:?}");
        let expect = |t: &PathBuf| if *t == slow { 12.0 } else { 36.0 };
        assert!((m[0] - expect(first)).abs() < 0.1 && (m[1] - expect(second)).abs() < 0.1, "{m:?}");
    }
    // Path 1 a generated process (allowed with trace2): ranked by what it drew.
    let mut p = two_paths(&slow, &fast);
    p.insert("trace", Value::Trace(PathBuf::new()));
    p.insert("bandwidth_mean", Value::Float(50.0));
    let s = Settings::from_params(&p).unwrap();
    let (link, generated) = s.link(dir.path(), 3).unwrap();
    let means = s.path_means(dir.path(), &link).unwrap();
    assert!((means[0].unwrap() - generated.unwrap().mean_mbps()).abs() < 0.1, "{means:?}");
    assert_eq!(paths::better(&means), 0);
    // Path 1 with neither a process nor a trace: its link's rate.
    p.insert("bandwidth_mean", Value::Float(0.0));
    p.insert("link", Value::Link("rtt=40ms,rate=1mbit".into()));
    // link2 would be link, whose rate clashes with trace2: named.
    let e = Settings::from_params(&p).unwrap_err().to_string();
    assert!(e.contains("link2 is empty, so it is link"), "{e}");
    p.insert("link2", Value::Link("rtt=40ms".into()));
    let s = Settings::from_params(&p).unwrap();
    let (link, _) = s.link(dir.path(), 3).unwrap();
    let means = s.path_means(dir.path(), &link).unwrap();
    assert_eq!(means[0], Some(1.0));
    assert_eq!(paths::better(&means), 1);
}

#[test]
fn a_bad_trace2_is_refused_naming_trace2() {
    let dir = tempfile::tempdir().unwrap();
    let good = steady_trace(dir.path(), "good", 1, 100);
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "10\nnot a time\n").unwrap();
    for t in [bad, dir.path().join("missing")] {
        let e = Settings::from_params(&two_paths(&good, &t)).unwrap_err().to_string();
        assert!(e.contains("trace2") && e.contains(&t.display().to_string()), "{e}");
    }
}
