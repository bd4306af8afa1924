//! Where the two ends of a transfer run: on the template's own runtime,
//! both on 127.0.0.1 (loopback: the receiver a task on its workers, the
//! sender on the thread that awaits it, as an application's main task
//! would), or each on a thread inside a host of an emulator testbed with a
//! runtime of its own, so that the sockets it opens belong to that host
//! (the receiver in `b`, the sender in `a`).
//!
//! Either way an end is a future the caller awaits from the template's
//! runtime ([`Pending`]); dropping it stops the end, so a transfer that
//! runs past the deadline leaves nothing behind.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;

use braid_emu::Testbed;
use tokio::sync::oneshot;

use crate::template::{ResultExt, TemplateError};

/// One end: where its future runs and the address its sockets bind.
#[derive(Clone, Copy)]
pub struct Side<'a> {
    place: Place<'a>,
    /// The address this end's sockets bind to.
    pub ip: IpAddr,
}

#[derive(Clone, Copy)]
enum Place<'a> {
    /// A task on the runtime's workers.
    Task,
    /// Polled by whoever awaits it.
    Inline,
    /// A thread in a testbed host.
    Host(&'a Testbed, &'static str),
}

/// Both ends of a transfer.
#[derive(Clone, Copy)]
pub struct Ends<'a> {
    /// The receiving end (it listens).
    pub server: Side<'a>,
    /// The sending end (it connects).
    pub client: Side<'a>,
}

impl<'a> Ends<'a> {
    /// Both ends on this runtime, on 127.0.0.1.
    pub fn loopback() -> Ends<'static> {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        Ends { server: Side { place: Place::Task, ip }, client: Side { place: Place::Inline, ip } }
    }

    /// The receiver in host `b`, the sender in host `a`, over path 0.
    pub fn testbed(tb: &'a Testbed) -> Result<Ends<'a>, TemplateError> {
        let p = tb.layout().paths.first().context("the testbed has no path")?;
        Ok(Ends {
            server: Side { place: Place::Host(tb, "b"), ip: IpAddr::V4(p.b_addr) },
            client: Side { place: Place::Host(tb, "a"), ip: IpAddr::V4(p.a_addr) },
        })
    }
}

impl Side<'_> {
    /// Start the future `f` builds at this end. Call from inside the
    /// template's runtime.
    pub fn spawn<T, F, Fut>(&self, f: F) -> Result<Pending<T>, TemplateError>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, TemplateError>> + Send + 'static,
    {
        let (tb, host) = match self.place {
            Place::Task => return Ok(Pending(Inner::Task(tokio::spawn(async move { f().await })))),
            Place::Inline => return Ok(Pending(Inner::Inline(Box::pin(async move { f().await })))),
            Place::Host(tb, host) => (tb, host),
        };
        let (done_tx, done_rx) = oneshot::channel();
        let (cancel_tx, cancel_rx) = oneshot::channel::<()>();
        // The thread is not joined: it ends when its future does, or as
        // soon as the `Pending` is dropped (`cancel_rx` then resolves).
        let _thread = tb
            .in_host(host, move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = done_tx.send(Err(TemplateError::io(format!("starting a runtime in host {host}"), e)));
                        return;
                    }
                };
                let result = rt.block_on(async move {
                    tokio::select! {
                        r = f() => r,
                        _ = cancel_rx => Err(TemplateError::Failed(format!("the end in host {host} was stopped"))),
                    }
                });
                let _ = done_tx.send(result);
            })
            .with_context(|| format!("starting a thread in host {host}"))?;
        Ok(Pending(Inner::Thread { done: done_rx, _cancel: cancel_tx, host }))
    }
}

/// A running end: await [`wait`](Self::wait) for its result; drop it to
/// stop the end.
pub struct Pending<T>(Inner<T>);

type BoxedEnd<T> = Pin<Box<dyn Future<Output = Result<T, TemplateError>> + Send>>;

enum Inner<T> {
    Task(tokio::task::JoinHandle<Result<T, TemplateError>>),
    Inline(BoxedEnd<T>),
    Thread {
        done: oneshot::Receiver<Result<T, TemplateError>>,
        /// Dropped with the `Pending`: that stops the thread's future.
        _cancel: oneshot::Sender<()>,
        host: &'static str,
    },
}

impl<T> Pending<T> {
    /// The end's result (an error if it failed, panicked or was stopped).
    pub async fn wait(mut self) -> Result<T, TemplateError> {
        match &mut self.0 {
            Inner::Task(handle) => match handle.await {
                Ok(r) => r,
                Err(e) => Err(TemplateError::Failed(format!("a transfer task failed: {e}"))),
            },
            Inner::Inline(end) => end.await,
            Inner::Thread { done, host, .. } => match done.await {
                Ok(r) => r,
                Err(_) => Err(TemplateError::Failed(format!("the thread in host {host} panicked"))),
            },
        }
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if let Inner::Task(handle) = &self.0 {
            handle.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ends_run_and_dropping_stops_them() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let ends = Ends::loopback();
            assert_eq!(ends.server.ip, IpAddr::V4(Ipv4Addr::LOCALHOST));
            let ok = ends.server.spawn(|| async { Ok(7) }).unwrap();
            assert_eq!(ok.wait().await.unwrap(), 7);
            let failing = ends.client.spawn(|| async { Err::<(), _>(TemplateError::Failed("no".into())) }).unwrap();
            assert_eq!(failing.wait().await.unwrap_err().to_string(), "no");
            // A stopped end does not run on: its future, and the sender
            // it holds, are dropped.
            let (tx, rx) = oneshot::channel::<()>();
            let forever = ends.server.spawn(move || async move {
                std::future::pending::<()>().await;
                let _ = tx.send(());
                Ok(())
            });
            drop(forever);
            let waited = tokio::time::timeout(std::time::Duration::from_secs(5), rx).await;
            assert!(matches!(waited, Ok(Err(_))), "the end still runs: {waited:?}");
        });
    }
}
