//! The browser's side of the flow: the loopback listener the
//! authorization server redirects to, and opening the link.
//!
//! The listener is on 127.0.0.1, on a port derived from the server's URL
//! (so a redirect URI registered once keeps working), or on another when
//! that one is busy. It answers each redirect only once the flow has
//! judged it (state, `iss`, the token exchange), so the page never says
//! "authorized" for an answer that was refused.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Url;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::AuthError;

/// The path of the redirect URI.
pub const CALLBACK_PATH: &str = "/callback";
/// Bound on reading a request's head.
const HEAD_WAIT: Duration = Duration::from_secs(10);
/// Most bytes of a request's head.
const HEAD_BYTES: usize = 16 * 1024;
/// Bound on the flow's verdict on a redirect.
const VERDICT_WAIT: Duration = Duration::from_secs(60);
/// The first port of the range stable ports are taken from.
const PORT_BASE: u16 = 20_000;
/// How many ports the range has.
const PORT_SPAN: u16 = 10_000;

/// The query of a redirect (from the listener, or a pasted URL) and where
/// to say how it was judged.
#[derive(Debug)]
pub struct Arrival {
    /// The query's parameters.
    pub params: BTreeMap<String, String>,
    /// The flow's verdict, shown on the page.
    pub verdict: Option<oneshot::Sender<Result<(), String>>>,
}

/// The port a server's redirects come to when it is free: the same one
/// every time for the same URL.
pub fn stable_port(server: &str) -> u16 {
    let digest = Sha256::digest(server.as_bytes());
    PORT_BASE + u16::from_be_bytes([digest[0], digest[1]]) % PORT_SPAN
}

/// The query parameters of a URL the browser landed on.
pub fn params_of(url: &str) -> Option<BTreeMap<String, String>> {
    let url = Url::parse(url.trim()).ok()?;
    let params: BTreeMap<String, String> = url.query_pairs().into_owned().collect();
    (!params.is_empty()).then_some(params)
}

/// A listening loopback redirect endpoint.
#[derive(Debug)]
pub struct Listener {
    /// `http://127.0.0.1:PORT/callback`.
    pub redirect_uri: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// Listens on `port`, or on another when it is busy (unless `fixed`),
    /// and hands each redirect to `arrivals`.
    pub async fn open(
        port: u16,
        fixed: bool,
        arrivals: mpsc::Sender<Arrival>,
    ) -> Result<Self, AuthError> {
        let listener = match TcpListener::bind(("127.0.0.1", port)).await {
            Ok(listener) => listener,
            Err(e) if fixed => {
                return Err(AuthError::Listener(format!("port {port}: {e}")));
            }
            Err(e) => {
                tracing::info!(port, error = %e, "the server's redirect port is busy; using another");
                TcpListener::bind(("127.0.0.1", 0))
                    .await
                    .map_err(|e| AuthError::Listener(e.to_string()))?
            }
        };
        let port = listener
            .local_addr()
            .map_err(|e| AuthError::Listener(e.to_string()))?
            .port();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(answer(stream, arrivals.clone()));
            }
        });
        Ok(Self {
            redirect_uri: format!("http://127.0.0.1:{port}{CALLBACK_PATH}"),
            task,
        })
    }
}

/// Reads one request, hands a redirect to the flow and shows its verdict.
async fn answer(mut stream: TcpStream, arrivals: mpsc::Sender<Arrival>) {
    let Ok(Some(target)) = tokio::time::timeout(HEAD_WAIT, read_target(&mut stream))
        .await
        .map(Result::ok)
        .map(Option::flatten)
    else {
        return;
    };
    let (status, body) = match target.split_once('?') {
        Some((CALLBACK_PATH, _)) | None if target == CALLBACK_PATH => (
            "400 Bad Request",
            page("This is not an authorization answer.", false),
        ),
        Some((CALLBACK_PATH, _)) => {
            let params = params_of(&format!("http://127.0.0.1{target}")).unwrap_or_default();
            let (tx, rx) = oneshot::channel();
            let arrival = Arrival {
                params,
                verdict: Some(tx),
            };
            if arrivals.send(arrival).await.is_err() {
                (
                    "410 Gone",
                    page("This authorization is over; start it again.", false),
                )
            } else {
                match tokio::time::timeout(VERDICT_WAIT, rx).await {
                    Ok(Ok(Ok(()))) => (
                        "200 OK",
                        page("mcpvisor is authorized. You may close this tab.", true),
                    ),
                    Ok(Ok(Err(why))) => (
                        "400 Bad Request",
                        page(&format!("Authorization failed: {why}"), false),
                    ),
                    _ => (
                        "504 Gateway Timeout",
                        page("mcpvisor did not finish the authorization.", false),
                    ),
                }
            }
        }
        _ => ("404 Not Found", page("Not found.", false)),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The request target of a GET, once its head is read.
async fn read_target(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() + n > HEAD_BYTES {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some("GET"), Some(target)) => Ok(Some(target.to_owned())),
        _ => Ok(None),
    }
}

fn page(message: &str, ok: bool) -> String {
    let escaped = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let title = if ok { "Authorized" } else { "Not authorized" };
    format!(
        "<!doctype html><meta charset=utf-8><title>mcpvisor: {title}</title><body style=\"font-family:sans-serif;margin:3em\"><h1>{title}</h1><p>{escaped}</p></body>\n"
    )
}

/// Opens `url` in a browser: each command of `$BROWSER` (`:`-separated,
/// `%s` replaced by the URL or the URL appended) until one starts, else
/// the desktop's opener. Whether one started. The command runs in its own
/// process group, detached, and is reaped when it ends.
pub fn open_browser(url: &str) -> bool {
    let mut commands: Vec<Vec<String>> = Vec::new();
    if let Ok(browser) = std::env::var("BROWSER") {
        for entry in browser.split(':').filter(|e| !e.trim().is_empty()) {
            let Ok(mut words) = shell_words::split(entry) else {
                continue;
            };
            if words.iter().any(|w| w.contains("%s")) {
                for word in &mut words {
                    *word = word.replace("%s", url);
                }
            } else {
                words.push(url.to_owned());
            }
            commands.push(words);
        }
    }
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    commands.push(vec![opener.to_owned(), url.to_owned()]);
    for words in commands {
        let Some((program, args)) = words.split_first() else {
            continue;
        };
        let spawned = tokio::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn();
        if let Ok(mut child) = spawned {
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_is_stable_and_in_range() {
        let a = stable_port("https://a.example/mcp");
        assert_eq!(a, stable_port("https://a.example/mcp"));
        assert!((PORT_BASE..PORT_BASE + PORT_SPAN).contains(&a));
        assert_ne!(a, stable_port("https://b.example/mcp"));
    }

    #[test]
    fn params_of_a_pasted_url() {
        let p = params_of(" http://127.0.0.1:1/callback?code=c&state=s%20t\n").expect("params");
        assert_eq!(p.get("code").map(String::as_str), Some("c"));
        assert_eq!(p.get("state").map(String::as_str), Some("s t"));
        assert!(params_of("not a url").is_none());
        assert!(params_of("http://127.0.0.1/callback").is_none());
    }

    #[tokio::test]
    async fn the_page_waits_for_the_verdict() {
        let (tx, mut rx) = mpsc::channel(4);
        let listener = Listener::open(0, false, tx).await.expect("listen");
        let url = format!("{}?code=c&state=s", listener.redirect_uri);
        let judge = tokio::spawn(async move {
            let arrival = rx.recv().await.expect("arrival");
            assert_eq!(arrival.params.get("state").map(String::as_str), Some("s"));
            let _ = arrival
                .verdict
                .expect("verdict")
                .send(Err("state does not match".into()));
        });
        let response = reqwest::get(&url).await.expect("get");
        assert_eq!(response.status(), 400);
        let body = response.text().await.expect("body");
        assert!(body.contains("state does not match"), "{body}");
        judge.await.expect("judge");
        let other = reqwest::get(listener.redirect_uri.replace("/callback", "/x"))
            .await
            .expect("get");
        assert_eq!(other.status(), 404);
    }

    #[tokio::test]
    async fn a_busy_port_moves_unless_fixed() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = taken.local_addr().expect("addr").port();
        let (tx, _rx) = mpsc::channel(1);
        let moved = Listener::open(port, false, tx.clone())
            .await
            .expect("listen");
        assert!(!moved.redirect_uri.contains(&format!(":{port}/")));
        assert!(Listener::open(port, true, tx).await.is_err());
    }
}
