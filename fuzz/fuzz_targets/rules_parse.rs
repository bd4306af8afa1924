//! Any text given to the rule front end parses or yields positioned errors
//! that render, never a panic; what parses prints to text that parses back
//! to the same rules and normalises without panicking; what also checks
//! against a small vocabulary runs in the engine on a few samples.
#![no_main]

use braid_core::Instant;
use braid_rules::{check, normalize, parse, ActionKind, Dimension, Engine, EngineConfig, EventId, MetricId, Vocabulary};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    let rules = match parse(&src) {
        Ok(r) => r,
        Err(e) => {
            let _ = e.render("fuzz", &src);
            return;
        }
    };
    let printed = rules.to_string();
    let back = parse(&printed).expect("printed rules parse");
    assert_eq!(back, rules, "print/parse round trip");
    let _ = normalize(&rules).to_string();
    let vocab = Vocabulary::new()
        .metric("rtt", Dimension::Time, 0.0, 2.0)
        .metric("loss", Dimension::Ratio, 0.0, 1.0)
        .metric("hops", Dimension::Count, 0.0, 64.0)
        .event("timeout")
        .choice(ActionKind::Set, "transport", &["tcp", "braid"])
        .number(ActionKind::Set, "priority", Dimension::Count, 0.0, 8.0, true)
        .number(ActionKind::Register, "R1", Dimension::Count, 0.0, 1e6, true);
    match check(&rules, &vocab) {
        Err(e) => {
            let _ = e.render("fuzz", &src);
        }
        Ok(()) => {
            let mut engine = Engine::new(&rules, &vocab, EngineConfig::default()).expect("checked rules build");
            for i in 0..20u64 {
                let t = Instant::from_nanos(i * 250_000_000);
                engine.sample(t, MetricId((i % 3) as usize), (i as f64) * 0.01);
                engine.event(t, EventId(0));
                let _ = engine.evaluate(t);
                let _ = engine.next_deadline();
            }
        }
    }
});
