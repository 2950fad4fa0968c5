//! Micro-benchmarks of the data path: framing a buffer of realistic MCP
//! traffic, peeking at each kind of envelope, and splicing an id.
//!
//! `cargo bench -p mcpvisor-jsonrpc` (about half a minute). Each figure is
//! per call on this machine; compare runs on the same machine only.

use std::hint::black_box;
use std::time::Duration;

use bytes::BytesMut;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use mcpvisor_jsonrpc::rewrite::splice;
use mcpvisor_jsonrpc::{Envelope, Frame, LineCodec};
use tokio_util::codec::Decoder as _;

/// The client's `initialize`, as Claude Code sends it.
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{"listChanged":true},"sampling":{},"elicitation":{}},"clientInfo":{"name":"claude-code","version":"1.0.93"}}}"#;

/// A server's `initialize` answer.
const INITIALIZE_RESULT: &str = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true},"resources":{"subscribe":false,"listChanged":true},"prompts":{"listChanged":true},"logging":{}},"serverInfo":{"name":"notes","version":"0.4.2"},"instructions":"Search and edit the notes in NOTES_DIR."}}"#;

/// A tool call with arguments and a progress token.
const TOOLS_CALL: &str = r#"{"jsonrpc":"2.0","id":"call-7f3a","method":"tools/call","params":{"name":"search_notes","arguments":{"query":"quarterly planning \"Q3\"","limit":20,"tags":["work","planning"],"includeArchived":false},"_meta":{"progressToken":"7f3a-progress"}}}"#;

/// A progress notification for that call.
const PROGRESS: &str = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"7f3a-progress","progress":40,"total":100,"message":"scanned 400 of 1000 notes"}}"#;

/// A cancellation from the client.
const CANCELLED: &str = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"call-7f3a","reason":"User pressed escape"}}"#;

/// A small tool result.
const SMALL_RESULT: &str = r#"{"jsonrpc":"2.0","id":"call-7f3a","result":{"content":[{"type":"text","text":"3 notes match: planning.md, q3.md, goals.md"}],"isError":false}}"#;

/// A tool result of about 64 KiB: text with newlines, quotes and a little
/// non-ASCII, escaped as a server would send it, the id last.
fn big_result() -> String {
    let mut text = String::new();
    let mut n = 0;
    while text.len() < 64 * 1024 {
        text.push_str(&format!(
            "{n:05}: \\\"quarterly planning\\\" — see notes/q3.md, line {n}\\n"
        ));
        n += 1;
    }
    format!(
        r#"{{"jsonrpc":"2.0","result":{{"content":[{{"type":"text","text":"{text}"}}],"structuredContent":{{"matches":{n}}},"isError":false}},"id":"call-7f3a"}}"#
    )
}

/// A session's worth of traffic on one pipe: the handshake, 50 calls each
/// with two progress notifications and a small result, and one 64 KiB
/// result. About 100 KiB in 202 lines.
fn session_buffer() -> BytesMut {
    let mut buf = BytesMut::new();
    let mut line = |s: &str| {
        buf.extend_from_slice(s.as_bytes());
        buf.extend_from_slice(b"\n");
    };
    line(INITIALIZE);
    line(INITIALIZE_RESULT);
    for _ in 0..50 {
        line(TOOLS_CALL);
        line(PROGRESS);
        line(PROGRESS);
        line(SMALL_RESULT);
    }
    line(&big_result());
    buf
}

fn decode(c: &mut Criterion) {
    let buf = session_buffer();
    let lines = buf.iter().filter(|&&b| b == b'\n').count();
    let mut group = c.benchmark_group("LineCodec::decode");
    group.throughput(Throughput::Bytes(buf.len() as u64));
    group.bench_function("session buffer, at once", |b| {
        b.iter_batched_ref(
            || buf.clone(),
            |buf| {
                let mut codec = LineCodec::new(64 << 20);
                let mut n = 0;
                while let Some(frame) = codec.decode(buf).expect("decode") {
                    n += usize::from(matches!(frame, Frame::Line(_)));
                }
                assert_eq!(n, lines);
            },
            BatchSize::SmallInput,
        );
    });
    // As the bytes come off a pipe: 8 KiB reads, so the 64 KiB line is
    // scanned across several calls.
    group.bench_function("session buffer, 8 KiB reads", |b| {
        b.iter(|| {
            let mut codec = LineCodec::new(64 << 20);
            let mut pending = BytesMut::with_capacity(128 * 1024);
            let mut n = 0;
            for chunk in buf.chunks(8 * 1024) {
                pending.extend_from_slice(chunk);
                while let Some(frame) = codec.decode(&mut pending).expect("decode") {
                    n += usize::from(matches!(frame, Frame::Line(_)));
                }
            }
            assert_eq!(n, lines);
        });
    });
    group.finish();
}

fn peek(c: &mut Criterion) {
    let big = big_result();
    let kinds: [(&str, &str); 7] = [
        ("initialize request", INITIALIZE),
        ("initialize result", INITIALIZE_RESULT),
        ("tools/call request", TOOLS_CALL),
        ("progress notification", PROGRESS),
        ("cancelled notification", CANCELLED),
        ("small tool result", SMALL_RESULT),
        ("64 KiB tool result", &big),
    ];
    let mut group = c.benchmark_group("Envelope::peek");
    for (name, line) in kinds {
        group.throughput(Throughput::Bytes(line.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                let env = Envelope::peek(black_box(line.as_bytes())).expect("envelope");
                black_box(env.id);
            });
        });
    }
    group.finish();
}

fn rewrite(c: &mut Criterion) {
    let big = big_result();
    let mut group = c.benchmark_group("rewrite::splice");
    for (name, line, with) in [
        (
            "client id → worker id, tools/call",
            TOOLS_CALL,
            &b"1048576"[..],
        ),
        (
            "worker id → client id, 64 KiB result",
            big.as_str(),
            &b"\"call-7f3a\""[..],
        ),
    ] {
        let line = line.as_bytes();
        let env = Envelope::peek(line).expect("envelope");
        let id = env.id.expect("id");
        group.throughput(Throughput::Bytes(line.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| splice(black_box(line), id, black_box(with)));
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
}

criterion_group! {
    name = benches;
    config = config();
    targets = decode, peek, rewrite
}
criterion_main!(benches);
