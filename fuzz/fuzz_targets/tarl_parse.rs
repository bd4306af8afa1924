//! Any text given to the TARL front end compiles or yields a positioned
//! error, never a panic; a rule that compiles evaluates on a small world
//! (within a small budget) without panicking, and its pretty-printed form
//! parses back to the same AST.
#![no_main]

use braid_tarl::sim::geometric_world;
use braid_tarl::{compile, geometric_schema, parse, pretty, Budget, Engine, EngineConfig, NodeId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    if let Ok(ast) = parse(&src) {
        let again = parse(&pretty(&ast)).expect("pretty output parses");
        assert_eq!(again, ast, "pretty/parse round trip");
    }
    match compile("fuzz", &src, &geometric_schema(false)) {
        Err(e) => {
            assert!(e.line >= 1 && e.col >= 1);
            let _ = e.to_string();
        }
        Ok(rule) => {
            let budget = Budget {
                max_steps: 20_000,
                max_matches: 20_000,
            };
            let engine = Engine::new(
                geometric_schema(false),
                vec![rule],
                EngineConfig { k: 2, budget },
            )
            .expect("k >= 1");
            let mut world = geometric_world(12, 0.4, 7, false, false);
            for v in 0..12 {
                let _ = engine.step(&mut world, NodeId(v));
            }
        }
    }
});
