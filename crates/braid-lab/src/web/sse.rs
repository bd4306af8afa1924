//! `/events`: the studies' progress as server-sent events, so the studies
//! page updates live while a study runs. One `progress` event (JSON: a
//! list of [`StudyProgress`]) right away,
//! then one whenever it changed, checked every [`TICK`]; a comment every
//! 15 s keeps proxies from closing an idle stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};

use super::progress::{progress, StudyProgress};
use super::{with_store, App};

/// How often the stream looks at the store.
pub const TICK: Duration = Duration::from_millis(500);

/// The event stream.
pub(crate) async fn events(State(app): State<Arc<App>>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let state: (Arc<App>, Option<Vec<StudyProgress>>, bool) = (app, None, true);
    let stream = stream::unfold(state, |(app, last, first)| async move {
        let mut last = last;
        let mut first = first;
        loop {
            if !first {
                tokio::time::sleep(TICK).await;
            }
            first = false;
            let now = match with_store(&app, progress).await {
                Ok(p) => p,
                Err(e) => {
                    let ev = Event::default().event("error").data(e.to_string());
                    return Some((Ok(ev), (app, last, false)));
                }
            };
            if last.as_ref() != Some(&now) {
                let data = serde_json::to_string(&now).unwrap_or_else(|_| "[]".into());
                let ev = Event::default().event("progress").data(data);
                last = Some(now);
                return Some((Ok(ev), (app, last, false)));
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
