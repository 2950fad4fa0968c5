use std::time::Duration;

use super::*;
use mcpvisor_session::queue::{self, LineReceiver};

/// Bound on every wait: paused time, so it costs nothing unless broken.
const WAIT: Duration = Duration::from_secs(60);

fn driver() -> (Driver, LineReceiver) {
    let (out, out_rx) = queue::channel(8);
    let (notes, _) = mpsc::channel(8);
    let (auth, _) = watch::channel(None);
    let (observer, _) = mpsc::channel(8);
    let outputs = Outputs {
        notes,
        auth,
        observer,
    };
    (Driver::new(out, outputs, None), out_rx)
}

fn request(id: u64) -> (Command, oneshot::Receiver<Result<Value, CallError>>) {
    let (reply, rx) = oneshot::channel();
    let msg = Bytes::from(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string());
    (Command::Request { id, msg, reply }, rx)
}

async fn answer(rx: oneshot::Receiver<Result<Value, CallError>>) -> Result<Value, CallError> {
    tokio::time::timeout(WAIT, rx)
        .await
        .expect("answered in time")
        .expect("answered, not dropped")
}

async fn next_line(out: &mut LineReceiver) -> Value {
    let (line, _) = tokio::time::timeout(WAIT, out.recv())
        .await
        .expect("a line in time")
        .expect("a line");
    serde_json::from_slice(&line).expect("json")
}

/// A driver task over channels: the session's output, the commands, and
/// what it queues for the session's input.
struct Running {
    session_out: mpsc::Sender<Bytes>,
    commands: mpsc::Sender<Command>,
    written: LineReceiver,
    task: tokio::task::JoinHandle<()>,
}

fn running() -> Running {
    let (d, written) = driver();
    let (session_out, ours) = mpsc::channel(8);
    let (commands, commands_rx) = mpsc::channel(8);
    let (_events, events_rx) = mpsc::channel(8);
    let task = tokio::spawn(d.run(ours, commands_rx, events_rx));
    Running {
        session_out,
        commands,
        written,
        task,
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_send_leaves_nothing_behind() {
    let (mut d, written) = driver();
    // The session's stdin is gone.
    drop(written);
    let (command, rx) = request(1);
    d.on_command(command);
    assert_eq!(d.in_flight(), 1);
    let permit = reserve(d.out.clone()).await;
    assert!(permit.is_none());
    d.write(permit);
    assert_eq!(d.in_flight(), 0, "the failed request was forgotten");
    assert!(matches!(answer(rx).await, Err(CallError::Closed)));
    // Later requests are refused at once and leave nothing either.
    let (command, rx) = request(2);
    d.on_command(command);
    assert_eq!(d.in_flight(), 0);
    assert!(matches!(answer(rx).await, Err(CallError::Closed)));
}

#[tokio::test(start_paused = true)]
async fn a_closed_connection_answers_every_waiter_with_closed() {
    let mut r = running();
    let (first, first_rx) = request(1);
    let (second, second_rx) = request(2);
    r.commands.send(first).await.expect("task alive");
    r.commands.send(second).await.expect("task alive");
    // Both were written to the session, which then ends without answering.
    next_line(&mut r.written).await;
    next_line(&mut r.written).await;
    drop(r.session_out);
    assert!(matches!(answer(first_rx).await, Err(CallError::Closed)));
    assert!(matches!(answer(second_rx).await, Err(CallError::Closed)));
    tokio::time::timeout(WAIT, r.task)
        .await
        .expect("the task ends")
        .expect("no panic");
    // Nobody is left to take a new request.
    let (late, _) = request(3);
    assert!(r.commands.send(late).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn answers_reach_their_waiters_and_the_server_is_answered() {
    let mut r = running();
    let (command, rx) = request(7);
    r.commands.send(command).await.expect("task alive");
    assert_eq!(next_line(&mut r.written).await["id"], 7);
    for line in [
        r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#,
    ] {
        r.session_out
            .send(Bytes::from_static(line.as_bytes()))
            .await
            .expect("the task reads");
    }
    let answer = answer(rx).await.expect("an answer");
    assert_eq!(answer["result"]["ok"], true);
    let pong = next_line(&mut r.written).await;
    assert_eq!(
        (pong["id"].clone(), pong["result"].clone()),
        (json!(0), json!({}))
    );
}

#[tokio::test(start_paused = true)]
async fn a_line_that_is_not_json_is_skipped_and_the_next_answer_still_arrives() {
    let mut r = running();
    let (command, rx) = request(3);
    r.commands.send(command).await.expect("task alive");
    assert_eq!(next_line(&mut r.written).await["id"], 3);
    for line in [
        &b"\xff\xfe not json"[..],
        br#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
    ] {
        r.session_out
            .send(Bytes::copy_from_slice(line))
            .await
            .expect("the task reads");
    }
    assert_eq!(answer(rx).await.expect("an answer")["id"], 3);
    assert!(!r.task.is_finished(), "the task goes on");
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_request_is_forgotten_and_the_server_told() {
    let (mut d, mut written) = driver();
    let (command, rx) = request(1);
    d.on_command(command);
    let permit = reserve(d.out.clone()).await;
    d.write(permit);
    assert_eq!(next_line(&mut written).await["id"], 1);
    d.on_command(Command::Cancel { id: 1 });
    assert_eq!(d.in_flight(), 0);
    let permit = reserve(d.out.clone()).await;
    d.write(permit);
    let note = next_line(&mut written).await;
    assert_eq!(note["method"], "notifications/cancelled");
    assert_eq!(note["params"]["requestId"], 1);
    // Its late answer is dropped; the waiter was released.
    d.on_line(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
    assert!(rx.await.is_err());
    // A request cancelled before it was written is never sent at all.
    let (command, _rx) = request(2);
    d.on_command(command);
    d.on_command(Command::Cancel { id: 2 });
    assert_eq!((d.in_flight(), d.outbox.len()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn an_auth_prompt_is_current_until_its_generation_is_authorized_or_gone() {
    let (out, _written) = queue::channel(8);
    let (notes, _) = mpsc::channel(8);
    let (auth, mut current) = watch::channel(None);
    let (observer, mut observed) = mpsc::channel(8);
    let outputs = Outputs {
        notes,
        auth,
        observer,
    };
    let mut d = Driver::new(out, outputs, None);
    let url = "https://auth.example.com/authorize".to_owned();
    d.on_event(SessionEvent::AuthPending {
        generation: 1,
        url: url.clone(),
        reason: None,
    });
    assert!(current.has_changed().expect("open"));
    assert_eq!(current.borrow_and_update().as_deref(), Some(url.as_str()));
    // Another generation's end does not clear it; its own authorization does.
    d.on_event(SessionEvent::Exited {
        generation: 2,
        data: mcpvisor_session::ErrorData::reason("gone"),
    });
    assert_eq!(current.borrow().as_deref(), Some(url.as_str()));
    d.on_event(SessionEvent::Authorized { generation: 1 });
    assert_eq!(*current.borrow_and_update(), None);
    // Every event is passed on, in order.
    let mut names = Vec::new();
    while let Ok(event) = observed.try_recv() {
        names.push(event.name());
    }
    assert_eq!(names, ["auth-pending", "exited", "authorized"]);
}
