//! Each shipped scheduler of thesis chapter 5 in a scenario on the
//! in-memory environment that shows its intent.

use std::sync::Arc;
use std::time::Duration;

use braid_core::Instant;
use braid_progmp::*;

fn scheduler(name: &str) -> Scheduler {
    let b = builtin(name).unwrap();
    let p = Program::compile(b.source).unwrap_or_else(|e| panic!("{}", e.render(b.name, b.source)));
    Scheduler::new(Arc::new(p), 1)
}

fn sbf(id: u32, rtt_ms: u64, cwnd: u32) -> SubflowInfo {
    SubflowInfo {
        id,
        rtt_us: rtt_ms * 1000,
        cwnd,
        ssthresh: cwnd,
        ..Default::default()
    }
}

fn backup(id: u32, rtt_ms: u64, cwnd: u32) -> SubflowInfo {
    SubflowInfo {
        is_backup: true,
        ..sbf(id, rtt_ms, cwnd)
    }
}

fn env_of(subflows: &[SubflowInfo]) -> MemoryEnv {
    let mut env = MemoryEnv::new();
    for s in subflows {
        env.add_subflow(*s);
    }
    env
}

fn write(env: &mut MemoryEnv, n: usize) -> Vec<PacketId> {
    (0..n).map(|i| env.write(1400, 0, i + 1 == n)).collect()
}

/// Which subflow carried each transmission since the last call.
fn carriers(env: &mut MemoryEnv) -> Vec<u32> {
    env.take_transmissions()
        .iter()
        .map(|t| t.subflow_id)
        .collect()
}

fn sent(env: &mut MemoryEnv) -> Vec<(u32, PacketId)> {
    env.take_transmissions()
        .iter()
        .map(|t| (t.subflow_id, t.packet))
        .collect()
}

fn ack_all(env: &mut MemoryEnv) {
    let ids: Vec<PacketId> = env
        .queue(Queue::Unacked)
        .iter()
        .map(|p| p.info.id)
        .collect();
    for id in ids {
        env.ack(id);
    }
}

const T0: Instant = Instant::ZERO;

#[test]
fn min_rtt_fills_the_fastest_window_first_and_reinjects_elsewhere() {
    let mut s = scheduler("min_rtt");
    let mut env = env_of(&[sbf(1, 40, 2), sbf(2, 20, 2)]);
    let ids = write(&mut env, 5);
    let r = s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [2, 2, 1, 1]);
    assert_eq!(
        (r.pushes, r.runs),
        (4, 5),
        "one packet per run, then an idle run"
    );
    assert_eq!(
        env.queue(Queue::Send).len(),
        1,
        "no window left for the fifth"
    );

    ack_all(&mut env);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [2]);

    // A suspected loss is reinjected first, on a subflow that has not
    // carried it, even if that subflow is slower.
    env.lose(ids[4]);
    env.write(1400, 0, true);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(sent(&mut env)[0], (1, ids[4]));
    assert!(env.queue(Queue::Reinject).is_empty());

    // The receive window is respected.
    let mut env = env_of(&[sbf(1, 10, 10)]);
    env.receive_window_end = Some(2800);
    write(&mut env, 3);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 1]);
}

#[test]
fn min_rtt_backup_leaves_backups_idle_while_a_regular_subflow_exists() {
    let mut s = scheduler("min_rtt_backup");
    let mut env = env_of(&[sbf(1, 50, 2), backup(2, 10, 100)]);
    write(&mut env, 10);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(
        carriers(&mut env),
        [1, 1],
        "the faster backup carries nothing, even with subflow 1 full"
    );
    ack_all(&mut env);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 1]);
    env.remove_subflow(1);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(
        carriers(&mut env),
        [2; 6],
        "without a regular subflow, the backup is used"
    );
}

#[test]
fn round_robin_alternates_and_skips_full_subflows() {
    let mut s = scheduler("round_robin");
    let mut env = env_of(&[sbf(1, 10, 100), sbf(2, 50, 100)]);
    write(&mut env, 6);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 2, 1, 2, 1, 2]);

    let mut s = scheduler("round_robin");
    let mut env = env_of(&[sbf(1, 10, 100), sbf(2, 50, 100), sbf(3, 30, 100)]);
    write(&mut env, 7);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 2, 3, 1, 2, 3, 1]);

    env.subflow_mut(2).unwrap().cwnd = 0;
    write(&mut env, 4);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(
        carriers(&mut env),
        [3, 1, 3, 1],
        "subflow 2 has no window and loses its turns"
    );
}

#[test]
fn round_robin_cyclic_alternates() {
    let mut s = scheduler("round_robin_cyclic");
    let mut env = env_of(&[sbf(1, 10, 100), sbf(2, 50, 100), sbf(3, 30, 100)]);
    write(&mut env, 6);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 2, 3, 1, 2, 3]);
}

#[test]
fn redundant_sends_each_packet_on_every_available_subflow() {
    let mut s = scheduler("redundant");
    let mut env = env_of(&[
        sbf(1, 10, 100),
        sbf(2, 50, 100),
        sbf(3, 30, 100),
        sbf(4, 5, 0),
    ]);
    let ids = write(&mut env, 4);
    s.run_until_idle(&mut env, T0, 100);
    let log = sent(&mut env);
    for id in &ids {
        let mut on: Vec<u32> = log
            .iter()
            .filter(|(_, p)| p == id)
            .map(|(s, _)| *s)
            .collect();
        on.sort();
        assert_eq!(on, [1, 2, 3], "packet {id:?}; subflow 4 has no window");
    }
    assert_eq!(log.len(), 12);
    assert!(env.queue(Queue::Send).is_empty());
    // A subflow that gets room later catches up on what is still in flight.
    env.subflow_mut(4).unwrap().cwnd = 100;
    ack_all(&mut env);
    let late = env.write(1400, 0, true);
    s.run_until_idle(&mut env, T0, 100);
    let mut on: Vec<u32> = sent(&mut env)
        .iter()
        .filter(|(_, p)| *p == late)
        .map(|(s, _)| *s)
        .collect();
    on.sort();
    assert_eq!(on, [1, 2, 3, 4]);
}

#[test]
fn opportunistic_redundant_decides_redundancy_once() {
    let mut s = scheduler("opportunistic_redundant");
    let mut env = env_of(&[sbf(1, 10, 100), sbf(2, 30, 1)]);
    let ids = write(&mut env, 3);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(
        sent(&mut env),
        [(1, ids[0]), (2, ids[0]), (1, ids[1]), (1, ids[2])]
    );
    // Room on subflow 2 later does not resend old packets.
    ack_all(&mut env);
    s.run_until_idle(&mut env, T0, 100);
    assert!(sent(&mut env).is_empty());
    assert!(env.queue(Queue::Send).is_empty());
}

#[test]
fn redundant_if_q_empty_resends_only_when_q_is_drained() {
    let mut s = scheduler("redundant_if_q_empty");
    let mut env = env_of(&[sbf(1, 10, 100), sbf(2, 30, 100)]);
    let ids = write(&mut env, 3);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(
        sent(&mut env),
        [
            (1, ids[0]),
            (1, ids[1]),
            (1, ids[2]),
            (2, ids[0]),
            (2, ids[1]),
            (2, ids[2])
        ],
        "minimum RTT first, then the oldest in-flight packets on the other subflow"
    );
    s.run_until_idle(&mut env, T0, 100);
    assert!(
        sent(&mut env).is_empty(),
        "every packet is on every subflow"
    );
}

#[test]
fn active_probing_probes_stale_subflows_at_the_end_of_a_burst() {
    let mut s = scheduler("active_probing");
    let mut env = env_of(&[sbf(1, 10, 100), sbf(2, 50, 100)]);
    let t = |ms| Instant::ZERO + Duration::from_millis(ms);
    let burst = write(&mut env, 3);
    s.run_until_idle(&mut env, t(1000), 100);
    assert_eq!(
        sent(&mut env),
        [(1, burst[0]), (1, burst[1]), (1, burst[2]), (2, burst[2])],
        "the burst's last packet (PSH) probes the unused subflow"
    );
    assert_eq!(
        env.subflows()[1].user,
        1000 + 50 * 5,
        "next probe after 5 RTTs"
    );

    let p = env.write(1400, 0, true);
    s.run_until_idle(&mut env, t(1100), 100);
    assert_eq!(sent(&mut env), [(1, p)], "subflow 2 is still fresh");

    let p = env.write(1400, 0, false);
    s.run_until_idle(&mut env, t(1300), 100);
    assert_eq!(sent(&mut env), [(1, p)], "not the end of a burst");

    let p = env.write(1400, 0, true);
    s.run_until_idle(&mut env, t(1300), 100);
    assert_eq!(sent(&mut env), [(1, p), (2, p)], "stale again: probe");
}

#[test]
fn selective_compensation_resends_what_only_slow_subflows_carry() {
    let mut s = scheduler("selective_compensation");
    let mut env = env_of(&[sbf(1, 10, 2), sbf(2, 50, 100)]);
    let ids = write(&mut env, 4);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 1, 2, 2]);
    env.ack(ids[0]);
    env.ack(ids[1]);
    s.run_until_idle(&mut env, T0, 100);
    assert!(sent(&mut env).is_empty(), "no end-of-flow signal yet");

    env.registers[0] = 1; // the application signals the end of the flow
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(sent(&mut env), [(1, ids[2]), (1, ids[3])]);
    s.run_until_idle(&mut env, T0, 100);
    assert!(sent(&mut env).is_empty());

    // Subflows within the RTT ratio are not compensated.
    let mut s = scheduler("selective_compensation");
    let mut env = env_of(&[sbf(1, 10, 1), sbf(2, 15, 100)]);
    let ids = write(&mut env, 2);
    s.run_until_idle(&mut env, T0, 100);
    env.ack(ids[0]);
    env.registers[0] = 1;
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 2]);
}

#[test]
fn rtt_preference_aware_uses_backups_only_above_the_acceptable_rtt() {
    let mut env = env_of(&[sbf(1, 50, 100), backup(2, 20, 100)]);
    let mut s = scheduler("rtt_preference_aware");
    write(&mut env, 2);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 1], "R1 unset: preferences only");
    env.registers[0] = 100;
    write(&mut env, 2);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 1], "50 ms is acceptable");
    env.registers[0] = 40;
    write(&mut env, 2);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(
        carriers(&mut env),
        [2, 2],
        "50 ms is not: the faster backup is used"
    );
}

#[test]
fn rtt_preference_aware_advanced_needs_a_significant_difference() {
    let mut env = env_of(&[sbf(1, 80, 100), backup(2, 30, 100)]);
    env.registers[0] = 50; // a backup is acceptable under 50 ms
    env.registers[1] = 100; // a regular subflow is unacceptable over 100 ms
    let mut s = scheduler("rtt_preference_aware_advanced");
    write(&mut env, 1);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1]);
    env.subflow_mut(1).unwrap().rtt_us = 150_000;
    write(&mut env, 1);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [2]);
    env.remove_subflow(1);
    env.registers = [0; 6];
    write(&mut env, 1);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(
        carriers(&mut env),
        [2],
        "no regular subflow: the backup serves"
    );
}

#[test]
fn tap_tops_up_the_preferred_capacity_with_backups_to_the_target() {
    // Preferred: 10 packets of 1400 bytes per 10 ms = 1400 KB/s.
    let subflows = [sbf(1, 10, 10), backup(2, 5, 100)];
    let mut env = env_of(&subflows);
    let mut s = scheduler("tap");
    write(&mut env, 30);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(
        carriers(&mut env),
        [1; 10],
        "no target: the backup stays idle"
    );

    // Target 2800 KB/s: the backup may carry as much as the preferred one.
    let mut env = env_of(&subflows);
    env.registers[0] = 2800;
    let mut s = scheduler("tap");
    write(&mut env, 30);
    s.run_until_idle(&mut env, T0, 100);
    let c = carriers(&mut env);
    let (pref, back) = (
        c.iter().filter(|&&x| x == 1).count(),
        c.iter().filter(|&&x| x == 2).count(),
    );
    assert_eq!((pref, back), (10, 9), "{c:?}");
    assert_eq!(env.registers[3], 100, "credit left in R4");

    // Target below the preferred capacity: no backup.
    let mut env = env_of(&subflows);
    env.registers[0] = 1000;
    let mut s = scheduler("tap");
    write(&mut env, 30);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1; 10]);
}

#[test]
fn one_way_delay_prefers_the_lowest_outgoing_delay_over_rtt() {
    let mut env = env_of(&[
        SubflowInfo {
            delay_out_us: 8_000,
            ..sbf(1, 10, 100)
        },
        SubflowInfo {
            delay_out_us: 2_000,
            ..sbf(2, 12, 100)
        },
    ]);
    let mut s = scheduler("one_way_delay");
    write(&mut env, 3);
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [2, 2, 2]);
}

#[test]
fn http2_aware_picks_the_strategy_from_the_packet_tag() {
    let mut env = env_of(&[sbf(1, 20, 1), backup(2, 25, 100), sbf(3, 100, 100)]);
    for user in [0, 0, 1, 2, 7] {
        env.write(1400, user, false);
    }
    let mut s = scheduler("http2_aware");
    s.run_until_idle(&mut env, T0, 100);
    assert_eq!(
        carriers(&mut env),
        [1, 2, 2, 3, 2],
        "tag 0 avoids the 100 ms subflow, 1 takes the lowest RTT, 2 only regular subflows, others lowest RTT"
    );
}

#[test]
fn ecf_holds_the_tail_for_the_fastest_subflow_and_spreads_a_backlog() {
    let fast = || sbf(1, 20, 2);
    let slow = || sbf(2, 200, 10);

    // Five packets, the fast window holds two: min RTT sends the other
    // three on the slow subflow, where they arrive 200 ms later; the fast
    // one would carry them in about two more round trips (60 ms).
    let mut min_rtt = scheduler("min_rtt");
    let mut env = env_of(&[fast(), slow()]);
    write(&mut env, 5);
    min_rtt.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 1, 2, 2, 2]);

    let mut ecf = scheduler("ecf");
    let mut env = env_of(&[fast(), slow()]);
    write(&mut env, 5);
    ecf.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 1], "the tail waits for the fast subflow");
    assert_eq!(env.queue(Queue::Send).len(), 3);
    assert_eq!(env.registers[5], 1, "R6 records that it is waiting");
    ack_all(&mut env);
    ecf.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 1]);
    ack_all(&mut env);
    ecf.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1]);
    assert!(env.queue(Queue::Send).is_empty());

    // A backlog the fast subflow needs many round trips for: both carry it,
    // and the flag is cleared.
    let mut env = env_of(&[fast(), slow()]);
    env.registers[5] = 1;
    write(&mut env, 200);
    ecf.run_until_idle(&mut env, T0, 100);
    let c = carriers(&mut env);
    assert_eq!((c.iter().filter(|&&s| s == 1).count(), c.iter().filter(|&&s| s == 2).count()), (2, 10));
    assert_eq!(env.registers[5], 0);
}

#[test]
fn ecf_uses_a_second_subflow_that_is_nearly_as_fast() {
    // Its share of the tail (3 packets over a 10-packet window at 25 ms)
    // arrives before the fast subflow's next two round trips, so there is
    // nothing to gain by waiting.
    let mut ecf = scheduler("ecf");
    let mut env = env_of(&[sbf(1, 20, 2), sbf(2, 25, 10)]);
    write(&mut env, 5);
    ecf.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 1, 2, 2, 2]);
}

#[test]
fn ecf_waits_longer_once_waiting_hysteresis() {
    // n * RTT_f sits between RTT_s and 1.25 * RTT_s: a fresh decision uses
    // the slow subflow, one already waiting keeps waiting (beta = 1/4).
    // Fast: 20 ms, window 2; slow: 100 ms, window 2; k = 9 after the fast
    // window is filled: n = 1 + 9/2 = 5.5, 5.5 * 20 = 110 ms.
    let fast_and_slow = || env_of(&[sbf(1, 20, 2), sbf(2, 100, 2)]);
    let mut ecf = scheduler("ecf");
    let mut env = fast_and_slow();
    write(&mut env, 11);
    ecf.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 1, 2, 2]);

    let mut env = fast_and_slow();
    env.registers[5] = 1;
    write(&mut env, 11);
    ecf.run_until_idle(&mut env, T0, 100);
    assert_eq!(carriers(&mut env), [1, 1]);
}

#[test]
fn ecf_tail_resends_on_the_fastest_what_only_a_slow_subflow_carries_once_q_is_empty() {
    let run = |name: &str| {
        let mut s = scheduler(name);
        let mut env = env_of(&[sbf(1, 20, 2), sbf(2, 200, 10)]);
        write(&mut env, 30);
        let mut on_slow = Vec::new();
        let mut resent = Vec::new();
        // Only the fast subflow's packets are acknowledged (the slow one is in an outage).
        for _ in 0..40 {
            s.run_until_idle(&mut env, T0, 100);
            for (sbf, id) in sent(&mut env) {
                match sbf {
                    2 => on_slow.push(id),
                    _ if on_slow.contains(&id) => resent.push(id),
                    _ => {}
                }
                if sbf == 1 {
                    env.ack(id);
                }
            }
        }
        (on_slow, resent)
    };
    let (on_slow, resent) = run("ecf_tail");
    assert_eq!(on_slow.len(), 10, "the backlog used the slow subflow's window");
    assert_eq!(resent, on_slow, "each resent on the fast one, oldest first, once Q was empty");
    let (on_slow, resent) = run("ecf");
    assert_eq!((on_slow.len(), resent.len()), (10, 0), "plain ECF leaves them to the slow subflow");
}

#[test]
fn every_builtin_survives_odd_environments() {
    for b in BUILTINS {
        let mut s = scheduler(b.name);
        let mut envs = vec![
            MemoryEnv::new(),
            env_of(&[sbf(1, 0, 0)]),
            env_of(&[backup(1, 0, 5), sbf(2, 0, 5)]),
        ];
        for env in &mut envs {
            env.registers = [1, -5, i64::MAX, i64::MIN, 0, 3];
            write(env, 4);
            s.run_until_idle(env, T0, 50);
            let ids: Vec<PacketId> = env
                .queue(Queue::Unacked)
                .iter()
                .map(|p| p.info.id)
                .collect();
            for id in ids {
                env.lose(id);
            }
            s.run_until_idle(env, T0 + Duration::from_secs(1), 50);
            let total = env.queue(Queue::Send).len() + env.queue(Queue::Unacked).len();
            assert_eq!(total, 4, "{}: no packet lost", b.name);
        }
    }
}
