//! A plain HTTP/1.1 client on one keep-alive connection, for driving
//! `mcpvisor run --http` (or `serve --http`) one request at a time.
//!
//! It is a client of one protocol revision ([`Revision`]): of 2025-11-25,
//! it opens a session with `initialize` and names the session and the
//! revision on each request after; of 2026-07-28, it has no handshake and
//! no session, and each request carries its envelope in `params._meta`
//! (see [`Payloads::stateless`]) and the `MCP-Protocol-Version`,
//! `Mcp-Method` and `Mcp-Name` headers.
//!
//! It speaks just enough HTTP for the Streamable HTTP front's JSON answers:
//! a POST with a `Content-Length` body, and an answer framed by its
//! `Content-Length` (the front sets it on every JSON answer; a chunked or
//! event-stream answer is an error here, since the load asks for JSON
//! only). The headers are parsed with `httparse`. Every read is bounded by
//! [`ANSWER_TIMEOUT`].

use std::net::SocketAddr;

use anyhow::{Context as _, anyhow, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::payload::{Answer, Payloads, STATELESS_META, STATELESS_REVISION, Scratch};
use crate::peer::ANSWER_TIMEOUT;

/// The most headers an answer may carry.
const MAX_HEADERS: usize = 32;

/// The revision a handshake-era client negotiates.
const HANDSHAKE_REVISION: &str = "2025-11-25";

/// The protocol revision a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revision {
    /// 2025-11-25: a session opened by `initialize`.
    Handshake,
    /// 2026-07-28: no handshake, no session; the envelope on each request.
    Stateless,
}

/// One connection to an MCP endpoint, and its session once initialized.
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    host: String,
    path: String,
    revision: Revision,
    session: Option<String>,
    next_id: u64,
    /// What was read past the last answer, and room for the next.
    buf: Vec<u8>,
    /// The request being written.
    out: Vec<u8>,
}

/// One answer: its status and body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Client {
    /// Connects to `addr`, whose endpoint is `path`, as a client of
    /// `revision`.
    pub async fn connect(addr: SocketAddr, path: &str, revision: Revision) -> anyhow::Result<Self> {
        let stream = tokio::time::timeout(ANSWER_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| anyhow!("connecting to {addr}: no answer within {ANSWER_TIMEOUT:?}"))?
            .with_context(|| format!("cannot connect to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            host: addr.to_string(),
            path: path.to_owned(),
            revision,
            session: None,
            next_id: 1,
            buf: Vec::with_capacity(64 * 1024),
            out: Vec::with_capacity(64 * 1024),
        })
    }

    /// The MCP handshake: `initialize` (which opens the session), then
    /// `notifications/initialized` in it. A 2026-07-28 client has none; it
    /// asks `server/discover` instead, which is answered once the server is
    /// ready, as `initialize` is.
    pub async fn initialize(&mut self) -> anyhow::Result<()> {
        if self.revision == Revision::Stateless {
            return self.discover().await;
        }
        let id = self.take_id();
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"{HANDSHAKE_REVISION}","capabilities":{{}},"clientInfo":{{"name":"mcpvisor-bench","version":"0"}}}}}}"#
        );
        let (reply, session) = self.post(&[line.as_bytes()], None).await?;
        if reply.status != 200 {
            bail!(
                "initialize was answered with HTTP {}: {}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
            );
        }
        self.session = Some(session.context("initialize was answered without Mcp-Session-Id")?);
        let (reply, _) = self
            .post(
                &[br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#],
                None,
            )
            .await?;
        if reply.status != 202 {
            bail!(
                "notifications/initialized was answered with HTTP {}",
                reply.status
            );
        }
        Ok(())
    }

    /// A 2026-07-28 client's `server/discover`, which must be answered with
    /// a result.
    async fn discover(&mut self) -> anyhow::Result<()> {
        let id = self.take_id();
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"server/discover","params":{{"_meta":{STATELESS_META}}}}}"#
        );
        let (reply, _) = self
            .post(&[line.as_bytes()], Some(("server/discover", None)))
            .await?;
        let answered = serde_json::from_slice::<serde_json::Value>(&reply.body)
            .is_ok_and(|v| v.get("result").is_some());
        if reply.status != 200 || !answered {
            bail!(
                "server/discover was answered with HTTP {}: {}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
            );
        }
        Ok(())
    }

    /// Sends `requests` echo requests one at a time and checks each answer
    /// byte for byte. A 2026-07-28 client's `payloads` are
    /// [`Payloads::stateless`].
    pub async fn echo(&mut self, payloads: &Payloads, requests: u64) -> anyhow::Result<()> {
        let mut scratch = Scratch::default();
        for _ in 0..requests {
            let id = self.take_id();
            let mut parts = payloads.request(id, &mut scratch);
            // The request line ends with a newline, which the body does not
            // need.
            let last = parts.len() - 1;
            parts[last] = parts[last].strip_suffix(b"\n").unwrap_or(parts[last]);
            let tool = match self.revision {
                Revision::Handshake => None,
                Revision::Stateless => Some(payloads.tool(id).context(
                    "a 2026-07-28 client's load is tool calls (the front routes MCP's own methods)",
                )?),
            };
            let named = tool.map(|tool| ("tools/call", Some(tool)));
            let (reply, _) = self.post(&parts, named).await?;
            if reply.status != 200 {
                bail!(
                    "request {id} was answered with HTTP {}: {}",
                    reply.status,
                    String::from_utf8_lossy(&reply.body)
                );
            }
            match payloads.check(&reply.body)? {
                Answer::Echo(got) if got == id => {}
                Answer::Echo(got) => bail!("request {id} was answered as {got}"),
                Answer::Notification => bail!("request {id} was answered with a notification"),
            }
        }
        Ok(())
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// POSTs a body given in parts and reads the answer; returns it and its
    /// `Mcp-Session-Id`, if any. A 2026-07-28 client's request names its
    /// method and, for a named operation, the name in its headers
    /// (`stateless`).
    async fn post(
        &mut self,
        body: &[&[u8]],
        stateless: Option<(&str, Option<&str>)>,
    ) -> anyhow::Result<(Reply, Option<String>)> {
        use std::io::Write as _;
        let len: usize = body.iter().map(|p| p.len()).sum();
        self.out.clear();
        write!(
            self.out,
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json\r\nContent-Length: {len}\r\n",
            self.path, self.host
        )?;
        if let Some(session) = &self.session {
            write!(
                self.out,
                "Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {HANDSHAKE_REVISION}\r\n"
            )?;
        }
        if let Some((method, name)) = stateless {
            write!(
                self.out,
                "MCP-Protocol-Version: {STATELESS_REVISION}\r\nMcp-Method: {method}\r\n"
            )?;
            if let Some(name) = name {
                write!(self.out, "Mcp-Name: {name}\r\n")?;
            }
        }
        self.out.extend_from_slice(b"\r\n");
        for part in body {
            self.out.extend_from_slice(part);
        }
        self.stream
            .write_all(&self.out)
            .await
            .context("writing a request")?;
        tokio::time::timeout(ANSWER_TIMEOUT, self.read_reply())
            .await
            .map_err(|_| anyhow!("no answer within {ANSWER_TIMEOUT:?}"))?
    }

    async fn read_reply(&mut self) -> anyhow::Result<(Reply, Option<String>)> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut head = httparse::Response::new(&mut headers);
            let parsed = head
                .parse(&self.buf)
                .context("an answer that is not HTTP")?;
            if let httparse::Status::Complete(head_len) = parsed {
                let status = head.code.unwrap_or(0);
                let mut length = None;
                let mut session = None;
                for h in head.headers.iter() {
                    if h.name.eq_ignore_ascii_case("content-length") {
                        let text = std::str::from_utf8(h.value).unwrap_or("");
                        length = Some(text.trim().parse::<usize>().with_context(|| {
                            format!("a Content-Length that is not a number: {text:?}")
                        })?);
                    } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                        bail!("an answer without Content-Length (Transfer-Encoding)");
                    } else if h.name.eq_ignore_ascii_case("mcp-session-id") {
                        session = Some(String::from_utf8_lossy(h.value).into_owned());
                    }
                }
                let length = length.context("an answer without Content-Length")?;
                while self.buf.len() < head_len + length {
                    self.fill().await?;
                }
                let body = self.buf[head_len..head_len + length].to_vec();
                self.buf.drain(..head_len + length);
                return Ok((Reply { status, body }, session));
            }
            self.fill().await?;
        }
    }

    /// Reads more of the answer into `buf`.
    async fn fill(&mut self) -> anyhow::Result<()> {
        let start = self.buf.len();
        self.buf.resize(start + 64 * 1024, 0);
        let n = self
            .stream
            .read(&mut self.buf[start..])
            .await
            .context("reading an answer")?;
        self.buf.truncate(start + n);
        if n == 0 {
            bail!("the server closed the connection");
        }
        Ok(())
    }
}
