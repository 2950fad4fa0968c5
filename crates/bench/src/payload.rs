//! The echo requests of a load and the byte-exact check of their answers.
//!
//! Request `N` carries `{"s":"<N as 16 hex digits><filler>"}` with a string
//! of exactly the payload size, so every answer can be checked against the
//! request it claims to answer without keeping the request around: the
//! expected bytes are rebuilt from the id.
//!
//! Two shapes of request ([`Echo`]): the fake worker's `bench/echo` method,
//! whose result is the params as sent, and a `tools/call` of its `echo`
//! tool, whose result is the arguments as compact JSON text in one text
//! content item. The gateway routes only MCP's own methods, so a load
//! through `mcpvisor serve` is the second shape, and so is the direct load
//! it is compared with.
//!
//! A `tools/call` may be written as a 2026-07-28 client writes it
//! ([`Payloads::stateless`]): the request's envelope in `params._meta`, and
//! its answer checked with the `resultType` that era's results carry.

use anyhow::{Context as _, bail};
use serde_json::Value;

/// The head of every answer the fake worker writes.
const RESULT_HEAD: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
/// Between the id and the result.
const RESULT_MID: &[u8] = br#","result":"#;
/// The bytes before the payload string in the request's echoed object.
const PARAMS_HEAD: &[u8] = br#"{"s":""#;
/// The bytes after the payload string in `bench/echo`'s params.
const PARAMS_TAIL: &[u8] = br#""}"#;
/// What ends a `bench/echo` request after its payload string.
const BENCH_END: &[u8] = b"\"}}\n";
/// What ends a `tools/call` request after its payload string.
const TOOL_END: &[u8] = b"\"}}}\n";
/// The `echo` tool's result before the payload string: the arguments
/// `{"s":"` as escaped text (the fake worker's JSON has sorted keys).
const TOOL_RESULT_HEAD: &[u8] = br#"{"content":[{"text":"{\"s\":\""#;
/// The `echo` tool's result after the payload string.
const TOOL_RESULT_TAIL: &[u8] = br#"\"}","type":"text"}],"isError":false}"#;
/// The same for a 2026-07-28 client, whose results say what they are.
const STATELESS_RESULT_TAIL: &[u8] =
    br#"\"}","type":"text"}],"isError":false,"resultType":"complete"}"#;
/// The revision a 2026-07-28 request names, in its `_meta` and its
/// `MCP-Protocol-Version` header.
pub const STATELESS_REVISION: &str = "2026-07-28";
/// The `_meta` of a 2026-07-28 request: the envelope, for a client that
/// takes no requests of its own.
pub const STATELESS_META: &str = concat!(
    r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","#,
    r#""io.modelcontextprotocol/clientCapabilities":{},"#,
    r#""io.modelcontextprotocol/clientInfo":{"name":"mcpvisor-bench","version":"0"}}"#
);
/// Hex digits of the id at the start of each payload string.
const TAG: usize = 16;

/// Which request echoes the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Echo {
    /// The fake worker's `bench/echo` method: the result is the params.
    Method,
    /// `tools/call` of the fake worker's `echo` tool, under these names
    /// (request `N` calls `names[N % len]`, so a load can spread over the
    /// servers behind a gateway).
    Tool(Vec<String>),
}

/// Builds and checks the payloads of one size.
#[derive(Debug)]
pub struct Payloads {
    /// The string after the tag; `size - TAG` bytes (empty for tiny sizes).
    filler: Vec<u8>,
    size: usize,
    echo: Echo,
    /// Whether requests are a 2026-07-28 client's (see [`Self::stateless`]).
    stateless: bool,
}

/// What one line from the peer turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// A successful answer to request `id` with exactly its own payload.
    Echo(u64),
    /// A notification (no id): not an answer, skipped.
    Notification,
}

impl Payloads {
    /// `bench/echo` payload strings of `size` bytes (at least the 16-byte
    /// id tag).
    pub fn new(size: usize) -> Self {
        Self::with(size, Echo::Method)
    }

    /// Payload strings of `size` bytes (at least the 16-byte id tag), sent
    /// as `echo` asks.
    pub fn with(size: usize, echo: Echo) -> Self {
        let size = size.max(TAG);
        // Printable, no JSON escapes, and not one repeated byte, so a
        // shifted or truncated copy does not compare equal by accident.
        let filler = (0..size - TAG)
            .map(|i| b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[i % 62])
            .collect();
        let echo = match echo {
            Echo::Tool(names) if names.is_empty() => Echo::Tool(vec!["echo".to_owned()]),
            other => other,
        };
        Self {
            filler,
            size,
            echo,
            stateless: false,
        }
    }

    /// These payloads as a 2026-07-28 client sends them: each `tools/call`
    /// carries its envelope in `params._meta` (protocol version, client
    /// capabilities and info), and its answer is checked with the
    /// `resultType` of that era. `bench/echo` requests are not changed.
    pub fn stateless(mut self) -> Self {
        self.stateless = true;
        self
    }

    /// The tool request `id` calls, if these are tool calls.
    pub fn tool(&self, id: u64) -> Option<&str> {
        match &self.echo {
            Echo::Method => None,
            Echo::Tool(names) => Some(&names[(id % names.len() as u64) as usize]),
        }
    }

    /// The payload string's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The bytes of a whole request line for `id`, terminator included, as
    /// slices to write one after another (no copy of the payload).
    pub fn request<'a>(&'a self, id: u64, scratch: &'a mut Scratch) -> [&'a [u8]; 5] {
        let end = match &self.echo {
            Echo::Method => {
                scratch.set_method(id);
                BENCH_END
            }
            Echo::Tool(names) => {
                let name = &names[(id % names.len() as u64) as usize];
                let meta = self.stateless.then_some(STATELESS_META);
                scratch.set_tool(id, name, meta);
                TOOL_END
            }
        };
        [
            scratch.head.as_bytes(),
            PARAMS_HEAD,
            scratch.tag.as_bytes(),
            &self.filler,
            end,
        ]
    }

    /// Classifies `line` (without its terminator): an exact echo of one of
    /// our requests, a notification, or an error with a clear message.
    pub fn check(&self, line: &[u8]) -> anyhow::Result<Answer> {
        let Some((id, result)) = split_echo(line) else {
            return classify_other(line);
        };
        let tag = format!("{id:016x}");
        let (head, tail) = match self.echo {
            Echo::Method => (PARAMS_HEAD, PARAMS_TAIL),
            Echo::Tool(_) if self.stateless => (TOOL_RESULT_HEAD, STATELESS_RESULT_TAIL),
            Echo::Tool(_) => (TOOL_RESULT_HEAD, TOOL_RESULT_TAIL),
        };
        let expected = [head, tag.as_bytes(), &self.filler, tail];
        let expected_len: usize = expected.iter().map(|p| p.len()).sum();
        let mut rest = result;
        let exact = result.len() == expected_len
            && expected.iter().all(|part| {
                let (head, tail) = rest.split_at(part.len());
                rest = tail;
                head == *part
            });
        if !exact {
            bail!(
                "request {id} was answered with a payload that is not its own \
                 ({} bytes, expected {expected_len}; starts {})",
                result.len(),
                snippet(result)
            );
        }
        Ok(Answer::Echo(id))
    }
}

/// Reused buffers for the per-request parts of a request line.
#[derive(Debug, Default)]
pub struct Scratch {
    head: String,
    tag: String,
}

impl Scratch {
    /// The line up to the echoed object for request `id` of `bench/echo`.
    fn set_method(&mut self, id: u64) {
        use std::fmt::Write as _;
        self.head.clear();
        self.tag.clear();
        let _ = write!(
            self.head,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"bench/echo","params":"#
        );
        let _ = write!(self.tag, "{id:016x}");
    }

    /// The line up to the echoed object for request `id`, a `tools/call` of
    /// `tool`, with `meta` as its `params._meta` if given.
    fn set_tool(&mut self, id: u64, tool: &str, meta: Option<&str>) {
        use std::fmt::Write as _;
        self.head.clear();
        self.tag.clear();
        let _ = write!(
            self.head,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"#
        );
        if let Some(meta) = meta {
            let _ = write!(self.head, r#""_meta":{meta},"#);
        }
        let _ = write!(self.head, r#""name":"{tool}","arguments":"#);
        let _ = write!(self.tag, "{id:016x}");
    }
}

/// `{"jsonrpc":"2.0","id":<digits>,"result":<result>}` → (id, result).
fn split_echo(line: &[u8]) -> Option<(u64, &[u8])> {
    let rest = line.strip_prefix(RESULT_HEAD)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let id = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let result = rest[digits..]
        .strip_prefix(RESULT_MID)?
        .strip_suffix(b"}")?;
    Some((id, result))
}

/// The slow path: anything that is not a plain echo answer.
fn classify_other(line: &[u8]) -> anyhow::Result<Answer> {
    let value: Value = serde_json::from_slice(line)
        .with_context(|| format!("the peer wrote a line that is not JSON: {}", snippet(line)))?;
    if value.get("method").is_some() && value.get("id").is_none() {
        return Ok(Answer::Notification);
    }
    if let Some(error) = value.get("error") {
        bail!(
            "request {} was answered with an error: {error}",
            value.get("id").unwrap_or(&Value::Null)
        );
    }
    bail!("the peer wrote an unexpected line: {}", snippet(line))
}

/// The first bytes of `bytes`, for error messages.
pub fn snippet(bytes: &[u8]) -> String {
    const MAX: usize = 120;
    let cut = &bytes[..bytes.len().min(MAX)];
    let more = if bytes.len() > MAX { "..." } else { "" };
    format!("{}{more}", String::from_utf8_lossy(cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_line(p: &Payloads, id: u64) -> Vec<u8> {
        let mut scratch = Scratch::default();
        p.request(id, &mut scratch).concat()
    }

    /// What the fake worker answers: the params, as sent, under `result`.
    fn echo(request: &[u8]) -> Vec<u8> {
        let v: Value = serde_json::from_slice(request).expect("request is JSON");
        let params = &request[request
            .windows(9)
            .position(|w| w == b"\"params\":")
            .expect("params")
            + 9..request.len() - 2];
        let mut line = format!(r#"{{"jsonrpc":"2.0","id":{},"result":"#, v["id"]).into_bytes();
        line.extend_from_slice(params);
        line.push(b'}');
        line
    }

    #[test]
    fn requests_are_json_with_a_string_of_the_payload_size() {
        for size in [64, 65_536] {
            let p = Payloads::new(size);
            let line = request_line(&p, 42);
            assert_eq!(line.last(), Some(&b'\n'));
            let v: Value = serde_json::from_slice(&line).expect("JSON");
            assert_eq!(v["id"], 42);
            assert_eq!(v["method"], "bench/echo");
            assert_eq!(v["params"]["s"].as_str().map(str::len), Some(size));
        }
    }

    #[test]
    fn an_exact_echo_passes_and_anything_else_fails() {
        let p = Payloads::new(64);
        let answer = echo(&request_line(&p, 7));
        assert_eq!(p.check(&answer).expect("exact echo"), Answer::Echo(7));
        // Another request's payload under this id.
        let mut swapped = echo(&request_line(&p, 8));
        let at = swapped.iter().position(|&b| b == b'8').expect("id");
        swapped[at] = b'7';
        assert!(p.check(&swapped).is_err());
        // A truncated payload.
        let mut short = answer.clone();
        short.remove(answer.len() - 5);
        assert!(p.check(&short).is_err());
        let error = br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32010,"message":"x"}}"#;
        assert!(p.check(error).is_err());
        let note = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;
        assert_eq!(p.check(note).expect("notification"), Answer::Notification);
        assert!(p.check(b"garbage").is_err());
    }

    /// What the fake worker's `echo` tool answers: the arguments as compact
    /// JSON text, in a result whose keys serde_json writes sorted.
    fn tool_echo(request: &[u8]) -> Vec<u8> {
        let v: Value = serde_json::from_slice(request).expect("request is JSON");
        let text = v["params"]["arguments"].to_string();
        let result = serde_json::json!({
            "content": [{ "type": "text", "text": text }],
            "isError": false,
        });
        format!(r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#, v["id"]).into_bytes()
    }

    #[test]
    fn tool_calls_go_to_each_name_in_turn_and_their_answers_are_checked() {
        let names = vec!["a__echo".to_owned(), "b__echo".to_owned()];
        let p = Payloads::with(64, Echo::Tool(names));
        for (id, name) in [(10, "a__echo"), (11, "b__echo")] {
            let line = request_line(&p, id);
            assert_eq!(line.last(), Some(&b'\n'));
            let v: Value = serde_json::from_slice(&line).expect("JSON");
            assert_eq!(v["method"], "tools/call");
            assert_eq!(v["params"]["name"], name);
            assert_eq!(
                v["params"]["arguments"]["s"].as_str().map(str::len),
                Some(64)
            );
            let answer = tool_echo(&line);
            assert_eq!(p.check(&answer).expect("exact echo"), Answer::Echo(id));
        }
        let literal = format!(
            r#"{{"jsonrpc":"2.0","id":3,"result":{{"content":[{{"text":"{{\"s\":\"{:016x}{}\"}}","type":"text"}}],"isError":false}}}}"#,
            3,
            String::from_utf8_lossy(&p.filler)
        );
        assert_eq!(
            p.check(literal.as_bytes()).expect("exact echo"),
            Answer::Echo(3)
        );
        let other = tool_echo(&request_line(&p, 4));
        let mut swapped = other.clone();
        let at = swapped.iter().position(|&b| b == b'4').expect("id");
        swapped[at] = b'3';
        assert!(p.check(&swapped).is_err());
        // A bench/echo answer is not a tool's.
        assert!(
            p.check(&echo(&request_line(&Payloads::new(64), 5)))
                .is_err()
        );
    }

    #[test]
    fn a_stateless_call_carries_the_envelope_and_its_answer_the_result_type() {
        let p = Payloads::with(64, Echo::Tool(vec!["echo".to_owned()])).stateless();
        assert_eq!(p.tool(9), Some("echo"));
        let line = request_line(&p, 9);
        let v: Value = serde_json::from_slice(&line).expect("JSON");
        let meta = &v["params"]["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"],
            STATELESS_REVISION
        );
        assert!(meta["io.modelcontextprotocol/clientCapabilities"].is_object());
        assert_eq!(v["params"]["name"], "echo");
        assert_eq!(
            v["params"]["arguments"]["s"].as_str().map(str::len),
            Some(64)
        );
        // What the gateway answers a 2026-07-28 client: the worker's
        // result with resultType appended.
        let handshake = tool_echo(&line);
        let mut answer = handshake[..handshake.len() - 2].to_vec();
        answer.extend_from_slice(br#","resultType":"complete"}}"#);
        assert_eq!(p.check(&answer).expect("exact echo"), Answer::Echo(9));
        // Without it, the answer is not of that era.
        assert!(p.check(&handshake).is_err());
        assert_eq!(Payloads::new(64).tool(1), None);
    }
}
