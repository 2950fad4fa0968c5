//! `mcpvisor-bench bad-clients`: `serve --http` against clients that
//! misbehave, while well-behaved sessions call it throughout.
//!
//! The gateway (`mcpvisor serve --http`, the fake worker behind it) is
//! started with `--max-sessions` and `--http-header-timeout` as given.
//! A few well-behaved sessions open first and call `bench__echo` one call
//! after another for the whole run; every answer must be their own echo.
//! Meanwhile, one after another:
//!
//! - oversized headers: request heads of 100 KiB, answered 431;
//! - trickled headers: connections that send a head a byte at a time,
//!   closed by the gateway at its header timeout (they run in the
//!   background through the rest);
//! - many connections that send nothing, more than `--max-connections`;
//! - `initialize` attempts past `--max-sessions`, answered 503 once the
//!   sessions are full (the ones opened are closed again);
//! - event streams opened and never read, and requests whose (64 KiB)
//!   answers are never read;
//! - bodies that are not UTF-8, and JSON nested 100,000 deep (in the
//!   params, and as the id), each answered;
//! - POSTs cut off mid-body: closed, and stalled (answered 408 at the
//!   header timeout).
//!
//! The gateway's VmRSS is sampled throughout. The run fails if a
//! well-behaved call fails or is answered wrongly, if a bad client is not
//! answered as above, or if the gateway is gone at the end.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use serde::Serialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::gateway::{self, Gateway, Server};
use crate::http::{Client, Front, check_echo};
use crate::payload::{Echo, Payloads, Scratch};
use crate::peer::Binaries;
use crate::scenario::progress;

/// The sizes of one run.
#[derive(Debug, clap::Args)]
pub struct BadClientsArgs {
    /// Well-behaved sessions calling throughout.
    #[arg(long, default_value_t = 4)]
    sessions: usize,
    /// The gateway's --max-sessions.
    #[arg(long, default_value_t = 256)]
    max_sessions: usize,
    /// The gateway's --http-header-timeout, in seconds.
    #[arg(long, default_value_t = 10)]
    header_timeout: u64,
    /// Connections that send nothing, opened at once.
    #[arg(long, default_value_t = 3000)]
    connections: usize,
    /// `initialize` attempts.
    #[arg(long, default_value_t = 2000)]
    initializes: usize,
    /// Connections trickling their headers.
    #[arg(long, default_value_t = 100)]
    tricklers: usize,
    /// Sessions whose event streams and answers are never read.
    #[arg(long, default_value_t = 32)]
    unread: usize,
    /// Fail if the gateway's VmRSS ever exceeds this many MiB.
    #[arg(long, value_name = "MIB")]
    max_rss_mib: Option<u64>,
    /// Write the figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    raw: Option<PathBuf>,
}

/// What a run saw.
#[derive(Debug, Default, Serialize)]
pub struct Figures {
    pub good_calls: u64,
    pub good_errors: u64,
    pub oversized_431: usize,
    pub trickled: usize,
    pub trickle_closed_max_s: f64,
    pub idle_connections: usize,
    pub initialize_ok: usize,
    pub initialize_503: usize,
    pub unread_streams: usize,
    pub unread_answers: usize,
    pub not_utf8_answered: usize,
    pub deep_answered: usize,
    pub cut_off: usize,
    pub stalled_408: usize,
    pub rss_start_kib: u64,
    pub rss_max_kib: u64,
    pub rss_end_kib: u64,
    pub seconds: f64,
}

pub async fn run(bins: &Binaries, args: &BadClientsArgs) -> anyhow::Result<()> {
    raise_fd_limit();
    let config = Gateway::new(bins, "bad-clients", &[Server::eager(gateway::SERVER)])?;
    let max_sessions = args.max_sessions.to_string();
    let timeout = format!("{}s", args.header_timeout);
    let front = Front::serve(
        bins,
        &config,
        &[
            "--max-sessions",
            &max_sessions,
            "--http-header-timeout",
            &timeout,
        ],
    )
    .await?;
    let outcome = attack(&front, args).await;
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(front.pid as i32), None).is_ok();
    front.stop().await;
    let figures = outcome?;
    ensure!(alive, "the gateway is gone");
    println!(
        "bad clients over {:.0} s: well-behaved sessions made {} calls, {} errors; \
         431 to {} oversized heads; {} trickling connections closed within {:.1} s; \
         {} idle connections; initialize: {} sessions, {} refused with 503; \
         {} unread streams and {} unread answers; {} non-UTF-8 and {} 100,000-deep bodies answered; \
         {} bodies cut off, {} stalled ones answered 408; \
         VmRSS {} KiB at the start, {} KiB at most, {} KiB at the end",
        figures.seconds,
        figures.good_calls,
        figures.good_errors,
        figures.oversized_431,
        figures.trickled,
        figures.trickle_closed_max_s,
        figures.idle_connections,
        figures.initialize_ok,
        figures.initialize_503,
        figures.unread_streams,
        figures.unread_answers,
        figures.not_utf8_answered,
        figures.deep_answered,
        figures.cut_off,
        figures.stalled_408,
        figures.rss_start_kib,
        figures.rss_max_kib,
        figures.rss_end_kib,
    );
    if let Some(path) = &args.raw {
        std::fs::write(path, serde_json::to_string_pretty(&figures)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    ensure!(
        figures.good_errors == 0,
        "{} well-behaved calls failed",
        figures.good_errors
    );
    if let Some(max) = args.max_rss_mib {
        ensure!(
            figures.rss_max_kib <= max * 1024,
            "the gateway's VmRSS reached {} KiB, over the bound of {max} MiB",
            figures.rss_max_kib
        );
    }
    Ok(())
}

/// As many descriptors as allowed: the run holds thousands of sockets.
fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

async fn attack(front: &Front, args: &BadClientsArgs) -> anyhow::Result<Figures> {
    let started = Instant::now();
    let addr = authority(&front.url)?;
    let mut figures = Figures {
        rss_start_kib: crate::machine::rss_kib(front.pid)?,
        ..Figures::default()
    };
    // The well-behaved sessions and the memory sampler run until `done`.
    let done = Arc::new(AtomicBool::new(false));
    let rss_max = Arc::new(AtomicU64::new(figures.rss_start_kib));
    let sampler = tokio::spawn({
        let (done, rss_max, pid) = (done.clone(), rss_max.clone(), front.pid);
        async move {
            while !done.load(Ordering::Relaxed) {
                if let Ok(kib) = crate::machine::rss_kib(pid) {
                    rss_max.fetch_max(kib, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let client = Client::new(args.sessions)?;
    let mut good = Vec::new();
    for n in 0..args.sessions {
        let session = client.open(&front.url).await?;
        let done = done.clone();
        good.push(tokio::spawn(async move {
            let payloads = Payloads::with(64, Echo::Tool(vec![gateway::TOOL.to_owned()]));
            let (mut calls, mut errors) = (0u64, 0u64);
            let mut id = (n as u64) << 32;
            while !done.load(Ordering::Relaxed) {
                id += 1;
                let body = payloads.request(id, &mut Scratch::default()).concat();
                match session
                    .request(body)
                    .await
                    .and_then(|a| check_echo(&payloads, &a))
                {
                    Ok(()) => calls += 1,
                    Err(e) => {
                        if errors == 0 {
                            progress(format_args!("a well-behaved call failed: {e:#}"));
                        }
                        errors += 1;
                    }
                }
            }
            session.close().await;
            (calls, errors)
        }));
    }
    let timeout = Duration::from_secs(args.header_timeout);
    let outcome = async {
        progress(format_args!("oversized headers"));
        figures.oversized_431 = oversized(&addr, 20).await?;
        ensure!(figures.oversized_431 == 20, "{} of 20 oversized heads got 431", figures.oversized_431);

        progress(format_args!("{} connections trickling their headers", args.tricklers));
        let tricklers: Vec<_> = (0..args.tricklers)
            .map(|_| tokio::spawn(trickle(addr.clone(), timeout)))
            .collect();

        progress(format_args!("{} connections that send nothing", args.connections));
        figures.idle_connections = idle_connections(&addr, args.connections, timeout / 2).await;

        progress(format_args!("{} initialize attempts", args.initializes));
        let (ok, refused) = initializes(&front.url, args.initializes).await?;
        figures.initialize_ok = ok;
        figures.initialize_503 = refused;
        ensure!(
            ok + args.sessions <= args.max_sessions && ok + refused == args.initializes,
            "initialize: {ok} sessions and {refused} refusals of {} attempts, with {} sessions allowed",
            args.initializes,
            args.max_sessions
        );

        progress(format_args!("{} sessions whose streams and answers are never read", args.unread));
        let unread = unread(&front.url, &addr, args.unread).await?;
        figures.unread_streams = unread.streams.len();
        figures.unread_answers = unread.answers.len();

        progress(format_args!("bodies that are not UTF-8, and JSON 100,000 deep"));
        let session = client.open(&front.url).await?;
        figures.not_utf8_answered = not_utf8(&addr, &session).await?;
        figures.deep_answered = deep(&addr, &session).await?;
        session.close().await;

        progress(format_args!("POSTs cut off mid-body"));
        let (cut, stalled) = cut_off(&addr, &session_of(&client, &front.url).await?, timeout).await?;
        figures.cut_off = cut;
        figures.stalled_408 = stalled;

        let mut closed_max = Duration::ZERO;
        for t in tricklers {
            closed_max = closed_max.max(t.await.context("a trickler")??);
        }
        figures.trickled = args.tricklers;
        figures.trickle_closed_max_s = closed_max.as_secs_f64();
        drop(unread);
        anyhow::Ok(())
    }
    .await;
    // The well-behaved sessions go on a moment past the last bad client.
    tokio::time::sleep(Duration::from_secs(1)).await;
    done.store(true, Ordering::Relaxed);
    for g in good {
        let (calls, errors) = g.await.context("a well-behaved session")?;
        figures.good_calls += calls;
        figures.good_errors += errors;
    }
    let _ = sampler.await;
    outcome?;
    figures.rss_max_kib = rss_max.load(Ordering::Relaxed);
    figures.rss_end_kib = crate::machine::rss_kib(front.pid)?;
    figures.seconds = started.elapsed().as_secs_f64();
    ensure!(figures.good_calls > 0, "no well-behaved call was answered");
    Ok(figures)
}

/// `host:port` of an `http://host:port/path` URL.
fn authority(url: &str) -> anyhow::Result<String> {
    let rest = url.strip_prefix("http://").context("not an http:// URL")?;
    Ok(rest.split('/').next().unwrap_or(rest).to_owned())
}

/// The first line of what the gateway answers on `stream`, within 20 s.
async fn status_line(stream: &mut TcpStream) -> anyhow::Result<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if got.contains(&b'\n') {
                break;
            }
        }
        std::io::Result::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .context("no answer within 20 s")??;
    let line = got.split(|&b| b == b'\n').next().unwrap_or_default();
    Ok(String::from_utf8_lossy(line).trim().to_owned())
}

/// Heads with a 100 KiB header: how many were answered 431.
async fn oversized(addr: &str, n: usize) -> anyhow::Result<usize> {
    let mut answered = 0;
    for _ in 0..n {
        let mut stream = TcpStream::connect(addr).await?;
        let head = format!(
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\nx-filler: {}\r\ncontent-length: 0\r\n\r\n",
            "a".repeat(100 * 1024)
        );
        // The gateway may answer and close before it has read it all.
        let _ = stream.write_all(head.as_bytes()).await;
        if status_line(&mut stream).await?.starts_with("HTTP/1.1 431") {
            answered += 1;
        }
    }
    Ok(answered)
}

/// Sends a head a byte every 200 ms until the gateway closes the
/// connection; how long that took. Fails past the timeout and 5 s.
async fn trickle(addr: String, timeout: Duration) -> anyhow::Result<Duration> {
    let mut stream = TcpStream::connect(&addr).await?;
    let started = Instant::now();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\n{}",
        "x-a: b\r\n".repeat(1000)
    );
    let mut buf = [0u8; 1024];
    for &b in head.as_bytes() {
        ensure!(
            started.elapsed() < timeout + Duration::from_secs(5),
            "a connection trickling its head was still open after {:?}",
            started.elapsed()
        );
        if stream.write_all(&[b]).await.is_err() {
            return Ok(started.elapsed());
        }
        // Closed (or answered and closed) while we wait?
        match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return Ok(started.elapsed()),
            Ok(Ok(_)) => {
                // An answer (408, or hyper's own close): read to the end.
                let _ = tokio::time::timeout(timeout, stream.read_to_end(&mut Vec::new())).await;
                return Ok(started.elapsed());
            }
            Err(_) => {}
        }
    }
    bail!("a connection sent its whole trickled head without being closed")
}

/// Opens `n` connections that send nothing and holds them for `hold`;
/// how many the kernel took (past the gateway's bound they wait in its
/// backlog, or time out connecting).
async fn idle_connections(addr: &str, n: usize, hold: Duration) -> usize {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        if let Ok(Ok(stream)) =
            tokio::time::timeout(Duration::from_millis(500), TcpStream::connect(addr)).await
        {
            held.push(stream);
        }
    }
    tokio::time::sleep(hold).await;
    held.len()
}

/// `n` initialize attempts, 16 at a time: how many opened a session and
/// how many got 503. The sessions opened are closed again.
async fn initializes(url: &str, n: usize) -> anyhow::Result<(usize, usize)> {
    let http = reqwest::Client::new();
    let body = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bad","version":"0"}}}"#;
    let mut opened = Vec::new();
    let mut refused = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(16) {
        let sends = chunk.iter().map(|_| {
            http.post(url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(body)
                .send()
        });
        for resp in crate::http::join_all(sends.collect()).await {
            let resp = resp.context("an initialize attempt")?;
            match resp.status().as_u16() {
                200 => {
                    let id = resp
                        .headers()
                        .get("mcp-session-id")
                        .and_then(|v| v.to_str().ok())
                        .context("a session without an id")?
                        .to_owned();
                    opened.push(id);
                }
                503 => refused += 1,
                other => bail!("initialize got {other}"),
            }
            // Bodies are not read: the connection is dropped with them.
        }
    }
    let ok = opened.len();
    for id in opened {
        let _ = http
            .delete(url)
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", "2025-06-18")
            .send()
            .await;
    }
    Ok((ok, refused))
}

/// Connections left open and unread.
struct Unread {
    streams: Vec<TcpStream>,
    answers: Vec<TcpStream>,
}

/// A session's id, opened with its own client.
async fn session_of(client: &Client, url: &str) -> anyhow::Result<crate::http::Session> {
    client.open(url).await
}

/// `n` sessions, each with a standalone event stream and four calls with
/// 64 KiB answers, none of them read.
async fn unread(url: &str, addr: &str, n: usize) -> anyhow::Result<Unread> {
    let client = Client::new(1)?;
    let mut out = Unread {
        streams: Vec::new(),
        answers: Vec::new(),
    };
    let payloads = Payloads::with(64 * 1024, Echo::Tool(vec![gateway::TOOL.to_owned()]));
    for _ in 0..n {
        let session = client.open(url).await?;
        let id = session.id().context("a session without an id")?.to_owned();
        let mut stream = TcpStream::connect(addr).await?;
        let head = format!(
            "GET /mcp HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\nmcp-session-id: {id}\r\nmcp-protocol-version: 2025-06-18\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await?;
        out.streams.push(stream);
        for call in 0..4 {
            let body = payloads.request(call, &mut Scratch::default()).concat();
            let mut stream = TcpStream::connect(addr).await?;
            stream
                .write_all(post_head(addr, Some(&id), body.len()).as_bytes())
                .await?;
            stream.write_all(&body).await?;
            out.answers.push(stream);
        }
    }
    // Let the answers pile up where they will.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(out)
}

fn post_head(addr: &str, session: Option<&str>, len: usize) -> String {
    let session = session
        .map(|id| format!("mcp-session-id: {id}\r\nmcp-protocol-version: 2025-06-18\r\n"))
        .unwrap_or_default();
    format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\n{session}content-length: {len}\r\n\r\n"
    )
}

/// POSTs `body` on the session and returns the status line.
async fn post_raw(
    addr: &str,
    session: &crate::http::Session,
    body: &[u8],
) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(post_head(addr, session.id(), body.len()).as_bytes())
        .await?;
    let _ = stream.write_all(body).await;
    status_line(&mut stream).await
}

/// Bodies that are not UTF-8: each must be answered 400 (a parse error).
async fn not_utf8(addr: &str, session: &crate::http::Session) -> anyhow::Result<usize> {
    let bodies: [&[u8]; 4] = [
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
        b"{\"jsonrpc\":\"2.0\",\"id\":\"\xc3\",\"method\":\"tools/list\"}",
        b"\xfe\xff\x00{\x00}",
        b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"bench__echo\",\"arguments\":{\"s\":\"\xed\xa0\x80\"}}}",
    ];
    let mut answered = 0;
    for body in bodies {
        let status = post_raw(addr, session, body).await?;
        ensure!(
            status.starts_with("HTTP/1.1 400"),
            "a body that is not UTF-8 got {status}"
        );
        answered += 1;
    }
    Ok(answered)
}

/// JSON nested 100,000 deep in a call's arguments and as an id: each is
/// answered (an error or not), and the gateway lives on.
async fn deep(addr: &str, session: &crate::http::Session) -> anyhow::Result<usize> {
    let depth = 100_000;
    let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let bodies = [
        format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"{}","arguments":{{"a":{nested}}}}}}}"#,
            gateway::TOOL
        ),
        format!(r#"{{"jsonrpc":"2.0","id":{nested},"method":"tools/list"}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{nested}}}"#),
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\",\"params\":{}",
            "{\"a\":".repeat(depth)
        ),
    ];
    let mut answered = 0;
    for body in bodies {
        let status = post_raw(addr, session, body.as_bytes()).await?;
        ensure!(
            status.starts_with("HTTP/1.1 "),
            "a deep body got {status:?}"
        );
        answered += 1;
    }
    Ok(answered)
}

/// POSTs whose bodies stop halfway: 20 whose connection then closes, and
/// 5 that stall, which must be answered 408 near the header timeout.
async fn cut_off(
    addr: &str,
    session: &crate::http::Session,
    timeout: Duration,
) -> anyhow::Result<(usize, usize)> {
    let body = br#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#;
    for _ in 0..20 {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(post_head(addr, session.id(), body.len() * 2).as_bytes())
            .await?;
        stream.write_all(body).await?;
        drop(stream);
    }
    let mut stalled = Vec::new();
    for _ in 0..5 {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(post_head(addr, session.id(), body.len() * 2).as_bytes())
            .await?;
        stream.write_all(body).await?;
        stalled.push(stream);
    }
    let started = Instant::now();
    let mut answered = 0;
    for mut stream in stalled {
        let status = status_line(&mut stream).await?;
        ensure!(
            status.starts_with("HTTP/1.1 408"),
            "a stalled body got {status:?}"
        );
        answered += 1;
    }
    ensure!(
        started.elapsed() < timeout + Duration::from_secs(5),
        "the stalled bodies were answered after {:?}",
        started.elapsed()
    );
    Ok((20, answered))
}
