//! The session's status events, on paused time with in-process workers.

mod support;

use std::time::Duration;

use mcpvisor_session::{Config, Control, ErrorData, RestartMode, SessionEvent};
use serde_json::json;
use support::{Behaviour, Client, TestSpawner, config};
use tokio::sync::mpsc;

/// The next event, within paused time.
async fn next(events: &mut mpsc::Receiver<SessionEvent>) -> SessionEvent {
    tokio::time::timeout(Duration::from_secs(600), events.recv())
        .await
        .expect("an event in time")
        .expect("the session is running")
}

/// Every event until (and with) the first that `last` accepts, among the
/// next few.
async fn until(
    events: &mut mpsc::Receiver<SessionEvent>,
    last: impl Fn(&SessionEvent) -> bool,
) -> Vec<SessionEvent> {
    let mut seen = Vec::new();
    while seen.len() < 20 {
        let event = next(events).await;
        let done = last(&event);
        seen.push(event);
        if done {
            return seen;
        }
    }
    panic!("not among the next {} events: {seen:?}", seen.len());
}

fn exited_data(event: &SessionEvent) -> &ErrorData {
    match event {
        SessionEvent::Exited { data, .. } => data,
        other => panic!("not an exit: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_generation_is_reported_starting_ready_after_its_handshake_and_exited() {
    let spawner = TestSpawner::new(Behaviour::default());
    let (mut c, mut events) = Client::start_observed(config(), spawner, 64);
    c.initialize().await;
    assert_eq!(
        until(&mut events, |e| matches!(e, SessionEvent::Ready { .. })).await,
        [
            SessionEvent::Starting {
                generation: 1,
                pid: None
            },
            SessionEvent::Ready {
                generation: 1,
                pid: None
            },
        ]
    );
    let lost = c.call(json!(1), "crash", json!({})).await;
    let seen = until(&mut events, |e| matches!(e, SessionEvent::Ready { .. })).await;
    assert_eq!(seen.len(), 5, "{seen:?}");
    // An unrequested exit first hands over its stderr tail, for a person
    // who asks; it is not in the error data unless --stderr-in-errors.
    assert!(
        matches!(&seen[0], SessionEvent::StderrTail { generation: 1, .. }),
        "{seen:?}"
    );
    // The exit carries what the request in flight was failed with.
    let data = exited_data(&seen[1]);
    assert_eq!(
        serde_json::to_value(data).expect("json"),
        lost["error"]["data"]
    );
    assert_eq!(data.stderr, None);
    assert_eq!(
        seen[2..],
        [
            // The first restart after a crash is at once.
            SessionEvent::Restarting {
                generation: 1,
                delay: Duration::ZERO,
            },
            SessionEvent::Starting {
                generation: 2,
                pid: None
            },
            SessionEvent::Ready {
                generation: 2,
                pid: None
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_that_never_initializes_sees_ready_at_spawn() {
    let spawner = TestSpawner::new(Behaviour::default());
    let (mut c, mut events) = Client::start_observed(config(), spawner, 64);
    c.call(json!(1), "echo", json!({})).await;
    assert_eq!(
        until(&mut events, |e| matches!(e, SessionEvent::Ready { .. })).await,
        [
            SessionEvent::Starting {
                generation: 1,
                pid: None
            },
            SessionEvent::Ready {
                generation: 1,
                pid: None
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_auth_prompt_is_an_event_until_initialize_completes() {
    let url = "https://auth.example.com/authorize?state=xyz".to_owned();
    // Longer than init_timeout (5 s): only the prompt lets a replay wait.
    let spawner = TestSpawner::new(Behaviour {
        auth_prompt: Some(url.clone()),
        initialize_delay: Some(Duration::from_secs(8)),
        ..Behaviour::default()
    });
    let (mut c, mut events) = Client::start_observed(config(), spawner, 64);
    let init = c.initialize().await;
    assert!(init.get("result").is_some(), "{init}");
    let prompted = |generation| {
        [
            SessionEvent::Starting {
                generation,
                pid: None,
            },
            SessionEvent::AuthPending {
                generation,
                url: url.clone(),
                reason: None,
            },
            SessionEvent::Authorized { generation },
            SessionEvent::Ready {
                generation,
                pid: None,
            },
        ]
    };
    assert_eq!(
        until(&mut events, |e| matches!(e, SessionEvent::Ready { .. })).await,
        prompted(1)
    );
    // The replayed handshake of the next generation waits on its prompt too.
    c.call(json!(1), "crash", json!({})).await;
    let seen = until(&mut events, |e| matches!(e, SessionEvent::Ready { .. })).await;
    assert!(matches!(
        seen[1],
        SessionEvent::Exited { generation: 1, .. }
    ));
    assert!(matches!(
        seen[2],
        SessionEvent::Restarting { generation: 1, .. }
    ));
    assert_eq!(seen[3..], prompted(2));
    let ok = c.call(json!(2), "echo", json!({})).await;
    assert_eq!(ok["result"]["generation"], 2, "{ok}");
}

#[tokio::test(start_paused = true)]
async fn a_crash_loop_is_reported_failed_then_recovered() {
    let cfg = Config {
        crash_loop_exits: 2,
        restart: RestartMode::OnDemand,
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour::default());
    let (mut c, mut events) = Client::start_observed(cfg, spawner, 64);
    c.call(json!(1), "crash", json!({})).await;
    c.call(json!(2), "crash", json!({})).await;
    let refused = c.call(json!(3), "echo", json!({})).await;
    assert_eq!(refused["error"]["code"], -32011, "{refused}");
    let seen = until(&mut events, |e| matches!(e, SessionEvent::Failed { .. })).await;
    let Some(SessionEvent::Failed { data }) = seen.last() else {
        unreachable!("until ends with the match")
    };
    assert_eq!(
        serde_json::to_value(data).expect("json"),
        refused["error"]["data"]
    );
    c.control
        .send(Control::Reload("test"))
        .await
        .expect("session alive");
    assert_eq!(next(&mut events).await, SessionEvent::Recovered);
    let ok = c.call(json!(4), "echo", json!({})).await;
    assert_eq!(ok["result"]["generation"], 3, "{ok}");
}

#[tokio::test(start_paused = true)]
async fn a_spawn_failure_is_reported_as_an_exit_in_the_spawn_phase() {
    let spawner = TestSpawner::new(Behaviour {
        spawn_error: Some("no such file".into()),
        ..Behaviour::default()
    });
    let (mut c, mut events) = Client::start_observed(config(), spawner, 64);
    let refused = c.call(json!(1), "echo", json!({})).await;
    assert_eq!(refused["error"]["code"], -32011, "{refused}");
    let event = next(&mut events).await;
    let data = exited_data(&event);
    assert_eq!(
        serde_json::to_value(data).expect("json"),
        json!({"generation": 1, "reason": "no such file", "phase": "spawn"})
    );
}

#[tokio::test(start_paused = true)]
async fn an_observer_that_never_reads_never_blocks_the_session() {
    let spawner = TestSpawner::new(Behaviour::default());
    let (mut c, mut events) = Client::start_observed(config(), spawner, 1);
    c.initialize().await;
    // Fewer than --crash-loop-exits, so every crash is restarted.
    for i in 0..3 {
        let lost = c.call(json!(i), "crash", json!({})).await;
        assert_eq!(lost["error"]["code"], -32010, "{lost}");
    }
    let ok = c.call(json!("last"), "echo", json!({})).await;
    assert_eq!(ok["result"]["generation"], 4, "{ok}");
    // The one event that fit is the first; the rest were dropped.
    assert_eq!(
        events.try_recv().expect("one event"),
        SessionEvent::Starting {
            generation: 1,
            pid: None
        }
    );
    assert!(events.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn a_restart_is_reported_with_its_backoff_delay() {
    let cfg = Config {
        crash_loop_exits: 10,
        restart: RestartMode::Always,
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour::default());
    let (mut c, mut events) = Client::start_observed(cfg, spawner, 64);
    c.initialize().await;
    let mut delays = Vec::new();
    for i in 0..3 {
        let lost = c.call(json!(i), "crash", json!({})).await;
        assert_eq!(lost["error"]["code"], -32010, "{lost}");
        let seen = until(&mut events, |e| {
            matches!(e, SessionEvent::Restarting { .. })
        })
        .await;
        let Some(SessionEvent::Restarting { generation, delay }) = seen.last() else {
            unreachable!("until ends with the match")
        };
        assert_eq!(*generation, i + 1);
        delays.push(*delay);
    }
    // At once the first time, then doubling from 250 ms.
    assert_eq!(
        delays,
        [
            Duration::ZERO,
            Duration::from_millis(250),
            Duration::from_millis(500)
        ]
    );
}
