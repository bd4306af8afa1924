//! The language's static rules and its runtime semantics (thesis §3.3 and
//! §3.4.2), each on a small hand-made environment.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use braid_core::Instant;
use braid_progmp::*;

fn env_with(n: u32) -> MemoryEnv {
    let mut env = MemoryEnv::new();
    for id in 1..=n {
        env.add_subflow(SubflowInfo {
            id,
            rtt_us: u64::from(id) * 10_000,
            cwnd: 10,
            ..Default::default()
        });
    }
    env
}

fn scheduler(src: &str) -> Scheduler {
    let p = Program::compile(src).unwrap_or_else(|e| panic!("{}", e.render("test", src)));
    Scheduler::new(Arc::new(p), 1)
}

fn run(src: &str, env: &mut MemoryEnv) -> (Scheduler, RunReport) {
    let mut s = scheduler(src);
    let r = s.run(env, Instant::ZERO);
    (s, r)
}

/// The first diagnostic of a source that must not compile.
fn error(src: &str) -> Diagnostic {
    Program::compile(src)
        .expect_err("must not compile")
        .first()
        .clone()
}

fn error_at(src: &str, line: u32, column: u32, message_part: &str) -> Diagnostic {
    let d = error(src);
    assert_eq!((d.line(), d.column()), (line, column), "{d}");
    assert!(d.message.contains(message_part), "{d}");
    d
}

#[test]
fn every_builtin_compiles_under_its_name() {
    for b in BUILTINS {
        let p =
            Program::compile(b.source).unwrap_or_else(|e| panic!("{}", e.render(b.name, b.source)));
        assert_eq!(p.name(), Some(b.name));
    }
    assert_eq!(builtin("default").unwrap().name, "min_rtt");
}

#[test]
fn arithmetic_is_left_associative_with_conventional_precedence() {
    let mut env = env_with(0);
    run("SET(R1, 10 * 3 / 2); SET(R2, 10 - 4 - 3); SET(R3, 2 + 3 * 4); SET(R4, 7 % 4 * 2); SET(R5, 100 / 0); SET(R6, 5 % 0);", &mut env);
    assert_eq!(env.registers, [15, 3, 14, 6, 0, 0]);
    let mut env = env_with(0);
    env.registers[0] = 200;
    run("VAR x = R1; SET(R2, x * 3 / 2);", &mut env);
    assert_eq!(env.registers[1], 300, "x * 3 / 2 is x times 1.5");
    let mut env = env_with(0);
    env.registers[0] = i64::MAX;
    run("SET(R2, R1 + 1);", &mut env);
    assert_eq!(env.registers[1], i64::MIN, "integers wrap");
}

#[test]
fn not_binds_tighter_than_and() {
    let mut env = env_with(0);
    run("IF (!FALSE AND FALSE) { SET(R1, 1); } IF (!(FALSE AND FALSE)) { SET(R2, 1); } IF (TRUE OR TRUE AND FALSE) { SET(R3, 1); }", &mut env);
    assert_eq!(env.registers[..3], [0, 1, 1]);
}

#[test]
fn type_errors_name_position_and_hint() {
    let d = error_at(
        "VAR x = 3;\nIF (x) { RETURN; }",
        2,
        5,
        "IF condition must be a boolean",
    );
    assert!(d.hint.unwrap().contains("compare"));
    let d = error_at(
        "VAR s = SUBFLOWS.GET(0);\nVAR r = s.RTTX;",
        2,
        11,
        "unknown word RTTX",
    );
    assert!(d.hint.is_some(), "unknown words get a hint: {d}");
    let d = error_at(
        "VAR r = SUBFLOWS.GET(0).LENGTH;",
        1,
        25,
        "not a property of a subflow",
    );
    assert!(d.hint.unwrap().contains("RTT_MS"));
    let d = error_at(
        "VAR rtt = 1;\nVAR x = rt + 1;",
        2,
        9,
        "unknown variable `rt`",
    );
    assert_eq!(d.hint.as_deref(), Some("did you mean `rtt`?"));
    error_at("VAR a = 1;\nVAR a = 2;", 2, 5, "already declared (at 1:5)");
    error_at(
        "VAR s = 1;\nVAR t = SUBFLOWS.FILTER(s => s.RTT > 0);",
        2,
        25,
        "already declared",
    );
    error_at("VAR n = NULL;", 1, 9, "cannot start as NULL");
    error_at(
        "IF (SUBFLOWS == NULL) { }",
        1,
        5,
        "cannot compare a subflow list with NULL",
    );
    error_at(
        "VAR l = SUBFLOWS.FILTER(s => s.RTT);",
        1,
        30,
        "FILTER's lambda must give a boolean",
    );
    error_at("VAR m = SUBFLOWS.MIN(3);", 1, 22, "MIN takes a lambda");
    error_at(
        "PRINT(\"%d and %d\", 1);",
        1,
        7,
        "2 placeholders but PRINT has 1 values",
    );
    error_at("PRINT(\"%s\", 1);", 1, 7, "unsupported placeholder %s");
    error_at(
        "VAR x = SUBFLOWS.GET(0).PUSH(Q.TOP);",
        1,
        25,
        "PUSH is a statement",
    );
    error_at("VAR x = Q.POP;", 1, 11, "POP needs parentheses");
    error_at("VAR x = Q.TOP();", 1, 11, "TOP takes no arguments");
    error_at(
        "VAR x = 1 + TRUE;",
        1,
        13,
        "operand of + must be an integer",
    );
    error_at(
        "SUBFLOWS.GET(0).PUSH(SUBFLOWS.GET(1));",
        1,
        22,
        "PUSH's argument must be a packet",
    );
    error_at("RETURN;\nSET(R1, 1);", 2, 1, "after RETURN is never run");
    error_at(
        "IF (TRUE) { VAR y = 1; }\nSET(R1, y);",
        2,
        9,
        "unknown variable `y`",
    );
}

#[test]
fn side_effects_are_banned_in_conditions_lambdas_foreach_and_print() {
    error_at(
        "IF (Q.POP().SENT_ON(SUBFLOWS.GET(0))) { }",
        1,
        5,
        "not allowed in an IF condition",
    );
    error_at(
        "VAR l = SUBFLOWS.FILTER(s => Q.POP().SENT_ON(s));",
        1,
        30,
        "not allowed in a FILTER lambda",
    );
    error_at(
        "VAR m = SUBFLOWS.MIN(s => Q.POP().LENGTH);",
        1,
        27,
        "not allowed in a MIN lambda",
    );
    error_at(
        "FOREACH (VAR p IN Q.FILTER(x => Q.POP() == x)) { }",
        1,
        33,
        "not allowed in a FOREACH list",
    );
    error_at(
        "PRINT(\"%d\", Q.POP().SEQ);",
        1,
        13,
        "not allowed in a PRINT argument",
    );
    error_at("VAR p = QU.POP();", 1, 12, "POP takes packets from Q or RQ");
    // Allowed: in VAR, PUSH, DROP.
    Program::compile("VAR p = Q.POP(); SUBFLOWS.GET(0).PUSH(Q.POP()); DROP(RQ.POP());").unwrap();
}

#[test]
fn the_checker_reports_every_type_error() {
    let e = Program::compile("VAR a = 1 + TRUE;\nVAR b = c;\nIF (3) { }").unwrap_err();
    let lines: Vec<u32> = e.diagnostics.iter().map(|d| d.line()).collect();
    assert_eq!(lines, [1, 2, 3]);
    // A failed declaration does not cascade into its uses.
    let e = Program::compile("VAR a = nope;\nSET(R1, a + 1);").unwrap_err();
    assert_eq!(e.diagnostics.len(), 1);
}

#[test]
fn thesis_listings_parse_and_check() {
    for src in [
        // Listing 3.1
        "SUBFLOWS.FILTER(sbf => sbf.CWND > sbf.PACKETS_IN_FLIGHT).\n  MIN(sbf => sbf.RTT).PUSH(Q.POP());",
        // Listing 3.3 (comment-only blocks)
        "IF (SUBFLOWS.EMPTY) { /* Nothing to do */\n RETURN;\n}\nIF (!RQ.EMPTY) {\n /* reinject */\n} ELSE IF (!Q.EMPTY) {\n} ELSE {\n}",
        // Listing 3.4
        "FOREACH(VAR sbf IN SUBFLOWS) {\n  sbf.PUSH(Q.TOP);\n}",
        // Listing 3.13
        "VAR topPacket = Q.TOP;\nVAR sbf = SUBFLOWS.MIN(sbf => sbf.RTT);\nsbf.PUSH(Q.TOP);\nIF (topPacket.SEQ == Q.TOP.SEQ) { }\nsbf.PUSH(Q.FILTER(skb => skb.USER == 1).POP());",
        // Listing A.1 (alternatives 2 to 4)
        "VAR skb = Q.TOP;\nVAR a2 = SUBFLOWS.FILTER(s => !skb.SENT_ON(s)).EMPTY;\nVAR a3 = SUBFLOWS.FILTER(s => s.LOSSY AND !skb.SENT_ON(s)).EMPTY;",
        // Listing A.2
        "VAR interPrintInterval_ms = 200;\nIF (R6 < CURRENT_TIME_MS) {\n SET(R6, CURRENT_TIME_MS + interPrintInterval_ms);\n PRINT(\"Number of subflows is %d\", SUBFLOWS.COUNT);\n FOREACH(VAR sbf IN SUBFLOWS) {\n  PRINT(\"Subflow with id = %d ...\", sbf.ID);\n  PRINT(\"... has RTT = %d ...\", sbf.RTT);\n  PRINT(\"... and is backup %d.\", sbf.IS_BACKUP);\n }\n}",
        // Listing 5.21
        "VAR defaultScheduling = 0;\nVAR redundantScheduling = 1;\nIF (R1 == defaultScheduling) {\n} ELSE IF (R1 == redundantScheduling) {\n}",
    ] {
        Program::compile(src).unwrap_or_else(|e| panic!("{}", e.render("listing", src)));
    }
}

#[test]
fn push_on_null_does_not_evaluate_its_argument() {
    let mut env = env_with(2);
    env.write(100, 0, true);
    let (s, r) = run(
        "SUBFLOWS.FILTER(s => s.CWND > 1000).MIN(s => s.RTT).PUSH(Q.POP());",
        &mut env,
    );
    assert!(s.actions().is_empty());
    assert_eq!((r.pushes, r.restored), (0, 0), "POP was never evaluated");
    assert_eq!(env.queue(Queue::Send).len(), 1);
    // Pushing NULL, dropping NULL and SET_USER on NULL do nothing.
    let (s, _) = run(
        "SUBFLOWS.GET(0).PUSH(RQ.TOP); DROP(QU.TOP); SUBFLOWS.GET(9).SET_USER(Q.POP().SEQ);",
        &mut env,
    );
    assert!(s.actions().is_empty());
    assert_eq!(env.queue(Queue::Send).len(), 1);
}

#[test]
fn min_max_get_top_give_null_when_empty_and_null_properties_are_zero() {
    let mut env = env_with(0);
    run(
        "IF (SUBFLOWS.MIN(s => s.RTT) == NULL AND SUBFLOWS.MAX(s => s.RTT) == NULL) { SET(R1, 1); }
         VAR popped = Q.POP();
         IF (Q.TOP == NULL AND Q.GET(0) == NULL AND QU.MIN(p => p.SEQ) == NULL AND popped == NULL) { SET(R2, 1); }
         SET(R3, SUBFLOWS.GET(0).RTT + Q.TOP.LENGTH + 7);
         IF (!SUBFLOWS.GET(0).IS_BACKUP AND !Q.TOP.PSH AND SUBFLOWS.SUM(s => s.CWND) == 0) { SET(R4, 1); }",
        &mut env,
    );
    assert_eq!(env.registers[..4], [1, 1, 7, 1]);
    let mut env = env_with(3);
    run("IF (SUBFLOWS.GET(3) == NULL AND SUBFLOWS.GET(0 - 1) == NULL AND SUBFLOWS.GET(2).ID == 3) { SET(R1, 1); }", &mut env);
    assert_eq!(env.registers[0], 1);
}

#[test]
fn min_max_sum_count_and_ties() {
    let mut env = env_with(3);
    env.subflow_mut(3).unwrap().rtt_us = 10_000; // ties with subflow 1
    run(
        "SET(R1, SUBFLOWS.MIN(s => s.RTT).ID); SET(R2, SUBFLOWS.MAX(s => s.RTT).ID);
         SET(R3, SUBFLOWS.SUM(s => s.RTT_MS)); SET(R4, SUBFLOWS.FILTER(s => s.RTT_MS < 15).COUNT);",
        &mut env,
    );
    assert_eq!(
        env.registers[..4],
        [1, 2, 40, 2],
        "ties go to the first subflow"
    );
}

#[test]
fn the_run_sees_its_own_push_at_once() {
    // Listing 3.12.
    let mut env = env_with(1);
    env.write(100, 0, true);
    run(
        "VAR sbf = SUBFLOWS.GET(0);
         VAR skb = Q.TOP;
         VAR queued = sbf.QUEUED;
         sbf.PUSH(skb);
         IF (skb.SENT_ON(sbf) AND queued + 1 == sbf.QUEUED) { SET(R1, 1); }",
        &mut env,
    );
    assert_eq!(env.registers[0], 1);
}

#[test]
fn top_push_keeps_the_packet_in_q_and_pop_can_take_from_the_middle() {
    // Listing 3.13.
    let mut env = env_with(2);
    let a = env.write(100, 0, false);
    let b = env.write(100, 1, false);
    let (s, _) = run(
        "VAR topPacket = Q.TOP;
         VAR sbf = SUBFLOWS.MIN(sbf => sbf.RTT);
         sbf.PUSH(Q.TOP);
         IF (topPacket.SEQ == Q.TOP.SEQ) { SET(R1, 1); }
         sbf.PUSH(Q.FILTER(skb => skb.USER == 1).POP());",
        &mut env,
    );
    assert_eq!(env.registers[0], 1);
    let kinds: Vec<&str> = s
        .actions()
        .iter()
        .map(|a| match a {
            Action::Push { .. } => "push",
            Action::Remove { .. } => "remove",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["push", "other", "push", "remove"]);
    let q: Vec<PacketId> = env.queue(Queue::Send).iter().map(|p| p.info.id).collect();
    assert_eq!(
        q,
        [a],
        "b left from the middle, a stayed though it was sent"
    );
    assert_eq!(env.queue(Queue::Unacked)[0].info.id, b);
    let sent: Vec<PacketId> = env.transmissions().iter().map(|t| t.packet).collect();
    assert_eq!(sent, [a, b]);
}

#[test]
fn the_run_sees_its_own_pop_set_and_set_user_at_once() {
    let mut env = env_with(2);
    env.write(100, 0, false);
    env.write(100, 0, false);
    run(
        "VAR first = Q.POP();
         IF (Q.COUNT == 1 AND QU.COUNT == 1 AND QU.TOP == first AND Q.TOP != first) { SET(R1, 1); }
         SET(R2, 7);
         SET(R3, R2 + 1);
         SUBFLOWS.GET(1).SET_USER(5);
         IF (SUBFLOWS.FILTER(s => s.USER == 5).GET(0).ID == 2) { SET(R4, 1); }
         SUBFLOWS.GET(0).PUSH(first);",
        &mut env,
    );
    assert_eq!(env.registers[..4], [1, 7, 8, 1]);
    assert_eq!(env.subflows()[1].user, 5, "SET_USER persists");
    assert_eq!(env.queue(Queue::Send).len(), 1);
}

#[test]
fn a_popped_packet_is_never_lost() {
    let mut env = env_with(1);
    let a = env.write(100, 0, false);
    let b = env.write(100, 0, false);
    // Popped, neither pushed nor dropped: back in Q, in order.
    let (s, r) = run("VAR p = Q.POP(); VAR p2 = Q.POP();", &mut env);
    assert!(s.actions().is_empty());
    assert_eq!((r.restored, r.removed), (2, 0));
    let ids: Vec<PacketId> = env.queue(Queue::Send).iter().map(|p| p.info.id).collect();
    assert_eq!(ids, [a, b]);
    // DROP of a packet never sent is refused (Listing 3.8's pitfall).
    let (_, r) = run(
        "SUBFLOWS.FILTER(s => s.CWND > 99).MIN(s => s.RTT).PUSH(Q.TOP); DROP(Q.POP());",
        &mut env,
    );
    assert_eq!((r.refused_drops, r.restored), (1, 1));
    assert_eq!(env.queue(Queue::Send).len(), 2);
    // Once sent, the packet may be dropped from Q: it is in flight.
    run("SUBFLOWS.GET(0).PUSH(Q.TOP);", &mut env);
    let (_, r) = run("DROP(Q.POP());", &mut env);
    assert_eq!((r.removed, r.refused_drops), (1, 0));
    assert_eq!(env.queue(Queue::Send).len(), 1);
    assert_eq!(env.queue(Queue::Unacked)[0].info.id, a);
}

#[test]
fn drop_from_rq_withdraws_the_reinjection_only() {
    let mut env = env_with(2);
    let a = env.write(100, 0, false);
    run("SUBFLOWS.GET(0).PUSH(Q.POP());", &mut env);
    env.lose(a);
    assert_eq!(env.queue(Queue::Reinject).len(), 1);
    let (_, r) = run("VAR p = RQ.POP();", &mut env);
    assert_eq!(r.restored, 1, "an RQ packet popped and left alone stays");
    assert_eq!(env.queue(Queue::Reinject).len(), 1);
    let (_, r) = run("DROP(RQ.TOP);", &mut env);
    assert_eq!(r.removed, 1);
    assert!(env.queue(Queue::Reinject).is_empty());
    assert_eq!(env.queue(Queue::Unacked)[0].info.id, a, "still in flight");
}

#[test]
fn zero_one_or_many_packets_per_run() {
    // Listing 3.10 pushes up to two per run.
    let src =
        "SUBFLOWS.MIN(sbf => sbf.RTT).PUSH(Q.POP());\nSUBFLOWS.MIN(sbf => sbf.RTT).PUSH(Q.POP());";
    let mut env = env_with(2);
    for _ in 0..3 {
        env.write(100, 0, false);
    }
    let mut s = scheduler(src);
    assert_eq!(s.run(&mut env, Instant::ZERO).pushes, 2);
    assert_eq!(s.run(&mut env, Instant::ZERO).pushes, 1);
    assert_eq!(s.run(&mut env, Instant::ZERO).pushes, 0);
    // FOREACH over a queue walks the queue as it was when the loop began.
    let mut env = env_with(1);
    for _ in 0..5 {
        env.write(100, 0, false);
    }
    let (_, r) = run(
        "FOREACH (VAR p IN Q) { SUBFLOWS.GET(0).PUSH(Q.POP()); }",
        &mut env,
    );
    assert_eq!(r.pushes, 5);
    assert!(env.queue(Queue::Send).is_empty());
}

#[test]
fn packet_lists_are_views_subflow_lists_are_values() {
    let mut env = env_with(2);
    for _ in 0..3 {
        env.write(100, 0, false);
    }
    run(
        "VAR pending = Q.FILTER(p => p.LENGTH > 0);
         VAR idle = SUBFLOWS.FILTER(s => s.QUEUED == 0);
         SUBFLOWS.GET(0).PUSH(Q.POP());
         SET(R1, pending.COUNT);
         SET(R2, idle.COUNT);
         SET(R3, SUBFLOWS.FILTER(s => s.QUEUED == 0).COUNT);",
        &mut env,
    );
    assert_eq!(env.registers[..3], [2, 2, 1]);
}

#[test]
fn registers_live_per_connection_and_the_program_is_shared() {
    let program = Arc::new(Program::compile("SET(R1, R1 + 1);").unwrap());
    let (mut a, mut b) = (
        Scheduler::new(program.clone(), 1),
        Scheduler::new(program.clone(), 2),
    );
    let (mut ea, mut eb) = (env_with(1), env_with(1));
    for _ in 0..3 {
        a.run(&mut ea, Instant::ZERO);
    }
    b.run(&mut eb, Instant::ZERO);
    assert_eq!((ea.registers[0], eb.registers[0]), (3, 1));
    assert_eq!(Arc::strong_count(&program), 3);
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Program>();
}

#[test]
fn print_formats_lines_and_is_rate_limited_for_tracing() {
    // The thesis's packetdrill test (Listing A.3).
    let src = "SCHEDULER two_in_q; PRINT(\"Q.COUNT %u\", Q.COUNT); IF(Q.COUNT > 1) { SUBFLOWS.GET(0).PUSH(Q.POP()); SUBFLOWS.GET(0).PUSH(Q.POP()); }";
    let mut env = env_with(2);
    let mut s = scheduler(src);
    env.write(1400, 0, false);
    s.run(&mut env, Instant::ZERO);
    assert_eq!(s.prints().collect::<Vec<_>>(), ["Q.COUNT 1"]);
    env.write(600, 0, true);
    let r = s.run(&mut env, Instant::ZERO);
    assert_eq!(s.prints().collect::<Vec<_>>(), ["Q.COUNT 2"]);
    assert_eq!(r.pushes, 2);

    let mut env = env_with(1);
    let (s, _) = run("PRINT(\"backup %d, 100%% sure; ids %d/%i\", SUBFLOWS.GET(0).IS_BACKUP, 1, 2); PRINT(\"plain\");", &mut env);
    assert_eq!(
        s.prints().collect::<Vec<_>>(),
        ["backup 0, 100% sure; ids 1/2", "plain"]
    );

    let mut s = scheduler("FOREACH (VAR s IN SUBFLOWS) { PRINT(\"sbf %d\", s.ID); }");
    let mut env = env_with(50);
    let r = s.run(&mut env, Instant::ZERO);
    assert_eq!((r.prints, r.prints_suppressed), (50, 50 - PRINT_BURST));
    assert_eq!(s.prints().count(), 50, "all lines stay available");
    let later = Instant::ZERO + Duration::from_millis(500);
    let r = s.run(&mut env, later);
    assert_eq!(r.prints_suppressed, 50 - (PRINT_PER_SECOND / 2) as u32);
}

#[test]
fn current_time_random_and_subflow_limit() {
    let mut env = env_with(0);
    let mut s = scheduler("SET(R1, CURRENT_TIME_MS); SET(R2, RANDOM); SET(R3, RANDOM);");
    s.run(&mut env, Instant::from_nanos(12_345_678_901));
    assert_eq!(env.registers[0], 12_345);
    let (r2, r3) = (env.registers[1], env.registers[2]);
    assert!((0..1 << 31).contains(&r2) && (0..1 << 31).contains(&r3) && r2 != r3);
    let mut env2 = env_with(0);
    scheduler("SET(R1, CURRENT_TIME_MS); SET(R2, RANDOM); SET(R3, RANDOM);")
        .run(&mut env2, Instant::ZERO);
    assert_eq!(env2.registers[1..3], [r2, r3], "same seed, same draws");

    let mut env = env_with(70);
    run(
        "SET(R1, SUBFLOWS.COUNT); SET(R2, SUBFLOWS.MAX(s => s.ID).ID);",
        &mut env,
    );
    assert_eq!(
        env.registers[..2],
        [MAX_SUBFLOWS as i64, MAX_SUBFLOWS as i64]
    );
}

/// Counts how often the scheduler reads each kind of thing.
struct Counting {
    inner: MemoryEnv,
    subflow_reads: Cell<usize>,
}

impl Environment for Counting {
    fn subflow_count(&self) -> usize {
        self.inner.subflow_count()
    }
    fn subflow(&self, i: usize) -> SubflowInfo {
        self.subflow_reads.set(self.subflow_reads.get() + 1);
        self.inner.subflow(i)
    }
    fn queue_len(&self, q: Queue) -> usize {
        self.inner.queue_len(q)
    }
    fn packet(&self, q: Queue, i: usize) -> PacketInfo {
        self.inner.packet(q, i)
    }
    fn sent_on(&self, q: Queue, i: usize, s: usize) -> bool {
        self.inner.sent_on(q, i, s)
    }
    fn has_window_for(&self, s: usize, q: Queue, i: usize) -> bool {
        self.inner.has_window_for(s, q, i)
    }
    fn register(&self, r: Register) -> i64 {
        self.inner.register(r)
    }
    fn apply(&mut self, a: &[Action]) {
        self.inner.apply(a)
    }
}

#[test]
fn subflow_properties_are_read_once_per_run() {
    let mut env = Counting {
        inner: env_with(4),
        subflow_reads: Cell::new(0),
    };
    for _ in 0..10 {
        env.inner.write(100, 0, false);
    }
    let mut s = scheduler(builtin("redundant").unwrap().source);
    s.run(&mut env, Instant::ZERO);
    assert_eq!(env.subflow_reads.get(), 4, "one snapshot of the 4 subflows");
}

#[test]
fn check_renders_errors_for_the_cli() {
    let src = "SCHEDULER x;\nVAR a = SUBFLOWS.GET(0).RTTT;\n";
    let out = check("x.progmp", src).unwrap_err();
    assert!(out.contains("error: unknown word RTTT"), "{out}");
    assert!(out.contains("--> x.progmp:2:25"), "{out}");
    assert!(out.contains("2 | VAR a = SUBFLOWS.GET(0).RTTT;"), "{out}");
    assert!(out.contains("^^^^"), "{out}");
    assert!(out.contains("hint: did you mean RTT"), "{out}");
    assert_eq!(
        check("x.progmp", "SCHEDULER x;").unwrap(),
        "x.progmp: ok, scheduler x"
    );
}
