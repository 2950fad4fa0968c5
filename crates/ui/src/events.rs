//! `/api/events`: the page's live view, as server-sent events.
//!
//! A stream subscribes to the hub's events first and then asks for a
//! snapshot, so nothing that happens in between is lost (it may be seen
//! twice, which a reader of whole rows does not mind). A reader that falls
//! so far behind that the broadcast channel overwrote what it had not read
//! is sent a fresh snapshot instead. Inspections of the add-server wizard
//! report their progress on the same stream, and so do the audit trail's
//! records: the last ones (`activity`) after each snapshot, then each new
//! one (`call`), numbered so that a record seen in both is told apart.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use mcpvisor_gateway::audit::Entry;
use mcpvisor_gateway::monitor::{Monitor, MonitorEvent};
use serde_json::{Value, json};
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::broadcast::{self, error::RecvError};

use crate::api::{ApiError, Shared};

pub(crate) async fn stream(State(shared): State<Arc<Shared>>) -> Response {
    let Ok(permit) = shared.streams.clone().try_acquire_owned() else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many event streams are open; close another page",
        )
        .into_response();
    };
    let state = Reader {
        monitor: shared.cfg.monitor.clone(),
        hub: shared.cfg.monitor.subscribe(),
        jobs: shared.jobs.subscribe(),
        calls: shared.cfg.monitor.activity().subscribe(),
        snapshot_due: true,
        activity_due: true,
        _permit: permit,
    };
    Sse::new(events(state))
        .keep_alive(
            KeepAlive::new()
                .interval(shared.cfg.limits.keep_alive)
                .text("keep-alive"),
        )
        .into_response()
}

/// One stream's state; its place among the streams is freed when the
/// reader goes.
struct Reader {
    monitor: Monitor,
    hub: broadcast::Receiver<MonitorEvent>,
    jobs: broadcast::Receiver<Value>,
    calls: broadcast::Receiver<Entry>,
    snapshot_due: bool,
    activity_due: bool,
    _permit: OwnedSemaphorePermit,
}

fn events(state: Reader) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold(state, |mut r| async move {
        loop {
            if r.snapshot_due {
                r.snapshot_due = false;
                // A gateway that does not answer ends the stream; the
                // page's EventSource reconnects.
                let snapshot = r.monitor.snapshot().await.ok()?;
                return Some((Ok(event("snapshot", &snapshot)), r));
            }
            if r.activity_due {
                r.activity_due = false;
                let recent = r.monitor.activity().recent();
                return Some((Ok(event("activity", &recent)), r));
            }
            tokio::select! {
                got = r.hub.recv() => match got {
                    Ok(ev) => return Some((Ok(of_monitor(&ev)), r)),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "an event stream fell behind: sending a snapshot");
                        r.snapshot_due = true;
                    }
                    Err(RecvError::Closed) => return None,
                },
                got = r.calls.recv() => match got {
                    Ok(entry) => return Some((Ok(event("call", &entry)), r)),
                    Err(RecvError::Lagged(_)) => r.activity_due = true,
                    Err(RecvError::Closed) => return None,
                },
                got = r.jobs.recv() => match got {
                    Ok(job) => return Some((Ok(event("inspect", &job)), r)),
                    // A job's later progress carries its whole state.
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    })
}

fn of_monitor(ev: &MonitorEvent) -> Event {
    match ev {
        MonitorEvent::Server { status } => event("server", status),
        MonitorEvent::Event { server, event: e } => {
            event("event", &json!({"server": server, "event": e}))
        }
        MonitorEvent::Removed { server } => event("removed", &json!({ "server": server })),
        MonitorEvent::Fronts { sessions } => event("sessions", &json!({ "sessions": sessions })),
    }
}

/// One event, its data with every known secret replaced, as the API's
/// answers are (`api::json_response`).
fn event(name: &str, data: &impl serde::Serialize) -> Event {
    let data = serde_json::to_string(data).unwrap_or_else(|_| "null".to_owned());
    let data = mcpvisor_config::redact::global().redact(&data);
    Event::default().event(name).data(data)
}
