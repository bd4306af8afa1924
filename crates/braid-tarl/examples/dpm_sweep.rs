//! A small DPM study: messages per detected match for distributed pattern
//! matching (k = 1, 2, 4) against non-distributed matching (k = 3, the
//! pattern's horizon), over the edge-weight threshold that sets the pattern
//! frequency, for mean degree 2 and 4, with and without broadcast.
//!
//! Run: `cargo run --release -p braid-tarl --example dpm_sweep [nodes] [seeds] [larger]`
//! (`larger`: the horizon-4 pattern, whose non-distributed matcher needs k = 4).

use braid_tarl::dpm::{larger_pattern_rule, listing_7_2_rule, study_point_for, StudyParams};

fn main() {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let seeds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let larger = args.next().as_deref() == Some("larger");
    let pattern = |thr: f64| {
        if larger {
            larger_pattern_rule(thr)
        } else {
            listing_7_2_rule(thr)
        }
    };
    let base_k = if larger { 4 } else { 3 };
    println!(
        "nodes={nodes} seeds={seeds} pattern={}; msgs/node (msgs/match)",
        if larger {
            "horizon 4"
        } else {
            "Listing 7.2 (horizon 3)"
        }
    );
    println!(
        "{:>4} {:>5} {:>5} {:>8} | {:>16} {:>16} {:>16} | {:>16}",
        "deg",
        "bcast",
        "thr",
        "freq",
        "DPM k=1",
        "DPM k=2",
        "DPM k=4",
        format!("non-distr. k={base_k}")
    );
    for deg in [2.0, 4.0] {
        for broadcast in [false, true] {
            for thr in [0.2, 0.4, 0.6, 0.8, 1.0] {
                let mut freq = 0.0;
                let mut cells = Vec::new();
                let mut base = (0.0, 0.0, 0u64);
                for k in [1u32, 2, 4] {
                    let (mut msgs, mut matches) = (0u64, 0u64);
                    for seed in 0..seeds {
                        let params = StudyParams {
                            nodes,
                            mean_degree: deg,
                            weight_threshold: thr,
                            k,
                            broadcast,
                            seed,
                        };
                        let m = study_point_for(&params, &pattern(thr)).expect("study point");
                        assert!(m.same_matches, "DPM missed or invented matches");
                        msgs += m.dpm.messages;
                        matches += m.dpm.matches;
                        if k == 1 {
                            freq += m.pattern_frequency / seeds as f64;
                            base.0 += m.baseline.messages as f64;
                            base.2 += m.baseline.matches;
                        }
                    }
                    let per_node = msgs as f64 / (nodes as u64 * seeds) as f64;
                    let per_match = if matches > 0 {
                        format!("{:.1}", msgs as f64 / matches as f64)
                    } else {
                        "-".into()
                    };
                    cells.push(format!("{per_node:>7.1} ({per_match:>6})"));
                }
                base.1 = base.0 / (nodes as u64 * seeds) as f64;
                let bpm = if base.2 > 0 {
                    format!("{:.1}", base.0 / base.2 as f64)
                } else {
                    "-".into()
                };
                println!(
                    "{deg:>4} {:>5} {thr:>5} {freq:>8.3} | {} | {:>7.1} ({bpm:>6})",
                    broadcast,
                    cells.join(" "),
                    base.1
                );
            }
        }
    }
}
