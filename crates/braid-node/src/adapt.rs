//! The Node's adaptation actuators (issue 20 item 2; seed 001 chapter 6,
//! Fossa's "transition description of the available adaptations"): what
//! an adaptation rule, or the application, may change on a running node,
//! per destination, with typed values.
//!
//! - the **transport** messages to a destination travel over, overriding
//!   the one their header asks for (the header is rewritten, so the
//!   receiver sees the transport actually used);
//! - the **congestion controller** of the destination's Braid connections,
//!   switched live (braid-proto's `set_congestion_control`: the new
//!   controller continues from the old one's window and RTT state);
//! - their **priority**: DTL's priority controller's parameter (0 = LEDBAT,
//!   less than best effort; p > 0 = p virtual flows), switching the
//!   connection to that controller first when it runs another;
//! - their ProgMP **scheduler** (a shipped one, by name) and **registers**
//!   R1..R6.
//!
//! Settings are remembered per destination and applied to every Braid
//! connection the node opens to it later, so a setting made before the
//! first message, or surviving an idle close, holds. Bad values are typed
//! errors naming the field and the allowed form; nothing here panics.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use braid_net::{CcAlgorithm, Program, Register};

use crate::Transport;

/// Largest priority (MulTCP's largest number of virtual flows).
pub const MAX_PRIORITY: f64 = 100.0;

/// What was set for the Braid connections to one destination.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BraidSettings {
    /// The congestion controller, if one was chosen.
    pub congestion_control: Option<CcAlgorithm>,
    /// The priority controller's `priority`, if one was chosen.
    pub priority: Option<f64>,
    /// The shipped ProgMP scheduler, by name, if one was chosen.
    pub scheduler: Option<&'static str>,
    /// Registers R1..R6 set so far.
    pub registers: [Option<i64>; 6],
}

/// An actuator value that cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum ActuatorError {
    /// The value is not one the actuator takes.
    #[error("`{field}` must be {expected}, got {got}")]
    Invalid {
        /// The actuator.
        field: &'static str,
        /// The allowed form.
        expected: String,
        /// What was given.
        got: String,
    },
    /// The transport is not one this node runs.
    #[error("`transport` must be one this node runs ({runs}), got {got}")]
    NotRun {
        /// The transport asked for.
        got: Transport,
        /// The transports the node runs.
        runs: String,
    },
    /// A live Braid connection refused the change.
    #[error("`{field}` could not be applied to the Braid connection to {dst}: {source}")]
    Connection {
        /// The actuator.
        field: &'static str,
        /// The destination.
        dst: SocketAddr,
        /// Why.
        source: braid_net::ConnectionError,
    },
}

/// The actuators' state: settings per destination (its base address) and
/// the node's live Braid connections per destination.
#[derive(Default)]
pub(crate) struct Actuators {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    transport: HashMap<SocketAddr, Transport>,
    braid: HashMap<SocketAddr, BraidSettings>,
    conns: HashMap<SocketAddr, Vec<braid_net::Connection>>,
    programs: HashMap<&'static str, Arc<Program>>,
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The scheduler names [`Actuators::set_scheduler`] takes.
pub fn scheduler_names() -> Vec<&'static str> {
    braid_proto::progmp::BUILTINS.iter().map(|b| b.name).collect()
}

impl Actuators {
    pub(crate) fn transport_for(&self, dst: SocketAddr) -> Option<Transport> {
        lock(&self.state).transport.get(&dst).copied()
    }

    pub(crate) fn any_transport_override(&self) -> bool {
        !lock(&self.state).transport.is_empty()
    }

    pub(crate) fn set_transport(&self, dst: SocketAddr, t: Option<Transport>, runs: &[Transport]) -> Result<(), ActuatorError> {
        if let Some(t) = t {
            if t == Transport::Data {
                return Err(ActuatorError::Invalid {
                    field: "transport",
                    expected: "udp, tcp, braid or exon (`data` is resolved by a DataInterceptor, per message)".into(),
                    got: t.to_string(),
                });
            }
            if !runs.contains(&t) {
                let runs = runs.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ");
                return Err(ActuatorError::NotRun { got: t, runs });
            }
        }
        let mut s = lock(&self.state);
        match t {
            Some(t) => s.transport.insert(dst, t),
            None => s.transport.remove(&dst),
        };
        Ok(())
    }

    pub(crate) fn braid_settings(&self, dst: SocketAddr) -> BraidSettings {
        lock(&self.state).braid.get(&dst).cloned().unwrap_or_default()
    }

    /// The live Braid connections to `dst` (their clones).
    pub(crate) fn connections(&self, dst: SocketAddr) -> Vec<braid_net::Connection> {
        lock(&self.state).conns.get(&dst).cloned().unwrap_or_default()
    }

    /// A connection the node opened to `dst`: remembered, and given the
    /// destination's settings.
    pub(crate) fn opened(&self, dst: SocketAddr, conn: &braid_net::Connection) {
        let settings = {
            let mut s = lock(&self.state);
            s.conns.entry(dst).or_default().push(conn.clone());
            s.braid.get(&dst).cloned()
        };
        if let Some(settings) = settings {
            if let Err(e) = self.apply(dst, conn, &settings) {
                tracing::debug!(%dst, error = %e, "settings not applied to a new braid connection");
            }
        }
    }

    /// A connection ended: forget it.
    pub(crate) fn closed(&self, dst: SocketAddr, conn: &braid_net::Connection) {
        let mut s = lock(&self.state);
        if let Some(v) = s.conns.get_mut(&dst) {
            v.retain(|c| c.handle() != conn.handle());
            if v.is_empty() {
                s.conns.remove(&dst);
            }
        }
    }

    fn program(&self, name: &str) -> Result<(&'static str, Arc<Program>), ActuatorError> {
        let invalid = || ActuatorError::Invalid {
            field: "scheduler",
            expected: format!("one of {}", scheduler_names().join(", ")),
            got: name.to_string(),
        };
        let b = braid_proto::progmp::builtin(name).ok_or_else(invalid)?;
        let mut s = lock(&self.state);
        if let Some(p) = s.programs.get(b.name) {
            return Ok((b.name, p.clone()));
        }
        // Shipped programs compile; should one not, it is reported, not
        // a panic.
        let p = Arc::new(Program::compile(b.source).map_err(|e| ActuatorError::Invalid {
            field: "scheduler",
            expected: "a scheduler that compiles".into(),
            got: format!("{name}: {e}"),
        })?);
        s.programs.insert(b.name, p.clone());
        Ok((b.name, p))
    }

    /// Updates the settings of `dst` with `change` and applies the result
    /// to its live connections; a connection that has ended is forgotten.
    fn update(&self, dst: SocketAddr, change: impl FnOnce(&mut BraidSettings)) -> Result<usize, ActuatorError> {
        let (settings, conns) = {
            let mut s = lock(&self.state);
            let entry = s.braid.entry(dst).or_default();
            change(entry);
            let settings = entry.clone();
            (settings, s.conns.get(&dst).cloned().unwrap_or_default())
        };
        let mut applied = 0;
        let mut first_err = None;
        for c in &conns {
            match self.apply(dst, c, &settings) {
                Ok(()) => applied += 1,
                Err(ActuatorError::Connection { source: braid_net::ConnectionError::Closed(_) | braid_net::ConnectionError::EndpointClosed, .. }) => {
                    self.closed(dst, c)
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(applied),
        }
    }

    /// Brings one connection to `settings`: controller first (a priority
    /// needs the priority controller), then its parameter, scheduler and
    /// registers. Changing only what differs keeps a switch from resetting
    /// a controller already in place.
    fn apply(&self, dst: SocketAddr, c: &braid_net::Connection, settings: &BraidSettings) -> Result<(), ActuatorError> {
        let conn_err = |field| move |source| ActuatorError::Connection { field, dst, source };
        let running = c.congestion_parameters().map_err(conn_err("cc"))?.algorithm;
        let want = match (settings.congestion_control, settings.priority) {
            (_, Some(_)) => Some(CcAlgorithm::Priority),
            (cc, None) => cc,
        };
        if let Some(cc) = want {
            if running != cc.as_str() {
                c.set_congestion_control(cc).map_err(conn_err("cc"))?;
            }
        }
        if let Some(p) = settings.priority {
            c.set_congestion_parameter("priority", p).map_err(conn_err("priority"))?;
        }
        if let Some(name) = settings.scheduler {
            let (_, program) = self.program(name)?;
            let same = c.scheduler().is_some_and(|p| Arc::ptr_eq(&p, &program));
            if !same {
                c.set_scheduler(program).map_err(conn_err("scheduler"))?;
            }
        }
        for (r, v) in Register::ALL.iter().zip(settings.registers) {
            if let Some(v) = v {
                c.set_register(*r, v).map_err(conn_err("register"))?;
            }
        }
        Ok(())
    }

    pub(crate) fn set_congestion_control(&self, dst: SocketAddr, cc: CcAlgorithm) -> Result<usize, ActuatorError> {
        self.update(dst, |s| {
            s.congestion_control = Some(cc);
            // Another controller than the priority one drops the priority.
            if cc != CcAlgorithm::Priority {
                s.priority = None;
            }
        })
    }

    pub(crate) fn set_priority(&self, dst: SocketAddr, p: f64) -> Result<usize, ActuatorError> {
        if !(p.is_finite() && (0.0..=MAX_PRIORITY).contains(&p)) {
            return Err(ActuatorError::Invalid {
                field: "priority",
                expected: format!("a number from 0 (LEDBAT, less than best effort) to {MAX_PRIORITY} (that many TCP flows' share)"),
                got: p.to_string(),
            });
        }
        self.update(dst, |s| {
            s.priority = Some(p);
            s.congestion_control = Some(CcAlgorithm::Priority);
        })
    }

    pub(crate) fn set_scheduler(&self, dst: SocketAddr, name: &str) -> Result<usize, ActuatorError> {
        let (name, _) = self.program(name)?;
        self.update(dst, |s| s.scheduler = Some(name))
    }

    pub(crate) fn set_register(&self, dst: SocketAddr, register: u8, value: i64) -> Result<usize, ActuatorError> {
        let r = Register::new(register).ok_or_else(|| ActuatorError::Invalid {
            field: "register",
            expected: "a register number from 1 to 6 (R1..R6)".into(),
            got: register.to_string(),
        })?;
        self.update(dst, |s| s.registers[r.index()] = Some(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dst() -> SocketAddr {
        "127.0.0.1:4000".parse().unwrap()
    }

    #[test]
    fn bad_values_are_typed_errors_naming_the_field() {
        let a = Actuators::default();
        let runs = [Transport::Tcp, Transport::Braid];
        let e = a.set_transport(dst(), Some(Transport::Exon), &runs).unwrap_err();
        assert!(e.to_string().contains("`transport`") && e.to_string().contains("tcp, braid"), "{e}");
        let e = a.set_transport(dst(), Some(Transport::Data), &runs).unwrap_err();
        assert!(e.to_string().contains("DataInterceptor"), "{e}");
        for p in [-1.0, 100.5, f64::NAN, f64::INFINITY] {
            let e = a.set_priority(dst(), p).unwrap_err();
            assert!(e.to_string().contains("`priority`"), "{e}");
        }
        let e = a.set_scheduler(dst(), "fastest").unwrap_err();
        assert!(e.to_string().contains("min_rtt"), "{e}");
        for r in [0, 7, 255] {
            let e = a.set_register(dst(), r, 1).unwrap_err();
            assert!(e.to_string().contains("1 to 6"), "{e}");
        }
        assert_eq!(a.braid_settings(dst()), BraidSettings::default(), "a refused value changes nothing");
    }

    #[test]
    fn settings_are_remembered_per_destination() {
        let a = Actuators::default();
        let runs = [Transport::Tcp, Transport::Braid];
        a.set_transport(dst(), Some(Transport::Tcp), &runs).unwrap();
        assert_eq!(a.transport_for(dst()), Some(Transport::Tcp));
        assert_eq!(a.set_priority(dst(), 0.0).unwrap(), 0, "no connection yet");
        a.set_scheduler(dst(), "redundant").unwrap();
        a.set_register(dst(), 2, 500).unwrap();
        let s = a.braid_settings(dst());
        assert_eq!(s.priority, Some(0.0));
        assert_eq!(s.congestion_control, Some(CcAlgorithm::Priority));
        assert_eq!(s.scheduler, Some("redundant"));
        assert_eq!(s.registers[1], Some(500));
        a.set_congestion_control(dst(), CcAlgorithm::Bbr).unwrap();
        assert_eq!(a.braid_settings(dst()).priority, None, "BBR has no priority");
        a.set_transport(dst(), None, &runs).unwrap();
        assert_eq!(a.transport_for(dst()), None);
        let other: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert_eq!(a.braid_settings(other), BraidSettings::default());
    }
}
