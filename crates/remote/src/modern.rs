//! A remote server of the 2026-07-28 era, found by discovery.
//!
//! Before the session's `initialize` goes out, the generation asks the
//! server `server/discover` in that era's shape (the client's capabilities
//! and info in `_meta`, the `MCP-Protocol-Version` and `Mcp-Method`
//! headers). A server that answers with a result naming 2026-07-28 among its
//! versions is spoken to in that era: the session's `initialize` is answered
//! here from what discovery said (protocol version 2026-07-28, the server's
//! capabilities, info and instructions), every later request carries the
//! `_meta` and the headers (`Mcp-Name` too for a named operation), `ping` is
//! asked as `server/discover` (that era has no `ping`), and the session's
//! notifications stay here: the era defines none over HTTP, and closing a
//! request's stream is its cancellation. A server that refuses the version
//! asked with `-32022` and lists the versions it supports in `error.data`
//! is asked once more, in a version of that era both sides speak. Any other
//! answer, an HTTP error or no answer within [`PROBE_BOUND`] leaves the
//! server to the handshake era, as before. So does a client that declares sampling or elicitation: the
//! requests it takes exist only in the handshake era, and nothing turns the
//! 2026-07-28 input requests back into them yet.

use std::time::Duration;

use bytes::Bytes;
use mcpvisor_jsonrpc::build;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::http::Http;

/// The revision spoken to a server that offers it.
pub(crate) const VERSION: &str = mcpvisor_jsonrpc::era::MODERN;
/// The sessionless revisions spoken, newest first: what a server that
/// refused [`VERSION`] is offered instead.
const SPOKEN: [&str; 1] = [VERSION];
/// How long discovery may take, a retry after `-32022` included, before
/// the server is taken to be of the handshake era.
pub(crate) const PROBE_BOUND: Duration = Duration::from_secs(10);
/// The error of a server that does not speak the version a request asked
/// for; its `data.supported` lists the versions it does.
const UNSUPPORTED_VERSION: i64 = -32022;
/// The id of the discovery request (the session's ids are numbers).
const PROBE_ID: &str = "\"mcpvisor-discover\"";
/// The most bytes of a discovery answer read.
const PROBE_MAX: usize = 1 << 20;

const METHOD: HeaderName = HeaderName::from_static("mcp-method");
const NAME: HeaderName = HeaderName::from_static("mcp-name");

/// What a modern server's requests carry: the `_meta` of the session's
/// client, as its `initialize` described it.
#[derive(Debug, Clone)]
pub(crate) struct Era {
    meta: Value,
    version: &'static str,
}

/// The `_meta` of a request in `version` for a client whose `initialize`
/// had these params.
fn meta_of(init_params: Option<&Value>, version: &str) -> Value {
    mcpvisor_jsonrpc::era::client_meta(init_params, version)
}

/// Asks the server `server/discover` for the client whose `initialize` is
/// `init`. `Some` with the era and the session's `initialize` answer when
/// the server speaks 2026-07-28; `None` for anything else.
pub(crate) async fn discover(http: &Http, init: &[u8], init_id: &str) -> Option<(Era, Bytes)> {
    let init: Value = serde_json::from_slice(init).ok()?;
    // A client that takes sampling or elicitation requests gets them only
    // in the handshake era: in 2026-07-28 they come as input requests in
    // results, which nothing between it and the server turns back into
    // requests yet.
    let capabilities = init.get("params").and_then(|p| p.get("capabilities"));
    if ["sampling", "elicitation"]
        .iter()
        .any(|c| capabilities.and_then(|caps| caps.get(c)).is_some())
    {
        return None;
    }
    let params = init.get("params");
    let (version, result) = tokio::time::timeout(PROBE_BOUND, async {
        match probe(http, params, VERSION).await? {
            Probe::Discovered(result) => Some((VERSION, result)),
            // Asked once more, in a version both speak; a second refusal
            // is not argued with.
            Probe::Unsupported(supported) => {
                let version = SPOKEN
                    .into_iter()
                    .find(|v| supported.iter().any(|s| s == v))?;
                tracing::debug!(
                    version,
                    "the remote server refused the version of discovery; asking in one it supports"
                );
                match probe(http, params, version).await? {
                    Probe::Discovered(result) => Some((version, result)),
                    Probe::Unsupported(_) => None,
                }
            }
        }
    })
    .await
    .ok()??;
    let init_result = mcpvisor_jsonrpc::era::discovered(&result, version)?;
    let answer = build::result(init_id, &init_result.to_string());
    let meta = meta_of(params, version);
    Some((Era { meta, version }, answer))
}

/// What one `server/discover` said.
#[derive(Debug)]
enum Probe {
    /// Its result.
    Discovered(Value),
    /// `-32022`: the version asked is not spoken there; these are (the
    /// strings of `error.data.supported`).
    Unsupported(Vec<String>),
}

/// One `server/discover` in `version`. `None` for an answer that is
/// neither a result nor `-32022` (another error, an HTTP error without
/// one, a body that is not JSON-RPC, a broken connection).
async fn probe(http: &Http, init_params: Option<&Value>, version: &str) -> Option<Probe> {
    let meta = meta_of(init_params, version);
    let line = Bytes::from(format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{PROBE_ID},\"method\":\"server/discover\",\"params\":{{\"_meta\":{meta}}}}}"
    ));
    let mut headers = HeaderMap::new();
    headers.insert(
        HeaderName::from_static("mcp-protocol-version"),
        HeaderValue::from_str(version).ok()?,
    );
    headers.insert(METHOD, HeaderValue::from_static("server/discover"));
    let mut response = http.post_with(line, headers).await.ok()?;
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let sse = content_type.starts_with("text/event-stream");
    // A refusal comes with an HTTP error status (400 for -32022), its
    // JSON-RPC error in the body.
    if !response.status().is_success() && !content_type.starts_with("application/json") {
        return None;
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.ok()? {
        body.extend_from_slice(&chunk);
        if body.len() > PROBE_MAX {
            return None;
        }
        // An event stream may stay open after the answer.
        if sse && answer_in_stream(&body).is_some() {
            break;
        }
    }
    let answer = if sse {
        answer_in_stream(&body)
    } else {
        serde_json::from_slice::<Value>(&body).ok()
    }?;
    if let Some(result) = answer.get("result") {
        return Some(Probe::Discovered(result.clone()));
    }
    let error = answer.get("error")?;
    if error.get("code").and_then(Value::as_i64) != Some(UNSUPPORTED_VERSION) {
        return None;
    }
    let supported = error
        .get("data")
        .and_then(|d| d.get("supported"))
        .and_then(Value::as_array)
        .map(|versions| {
            versions
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Some(Probe::Unsupported(supported))
}

/// The JSON-RPC answer to the discovery request among an event stream's
/// `data:` lines.
fn answer_in_stream(body: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(body).ok()?;
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| {
            v.get("id").is_some_and(|id| {
                *id == serde_json::from_str::<Value>(PROBE_ID).unwrap_or_default()
            })
        })
}

impl Era {
    /// The protocol version spoken to the server.
    pub(crate) fn version(&self) -> &'static str {
        self.version
    }

    /// A request of the session as this era has it: `_meta` added to its
    /// params (beside a progress token it may have), `ping` asked as
    /// `server/discover`. `None` for a line that is not a request object.
    pub(crate) fn request(&self, line: &[u8]) -> Option<Bytes> {
        let mut msg: Value = serde_json::from_slice(line).ok()?;
        let obj = msg.as_object_mut()?;
        if obj.get("method").and_then(Value::as_str) == Some("ping") {
            obj.insert("method".into(), json!("server/discover"));
        }
        let params = obj.entry("params").or_insert_with(|| json!({}));
        let params = params.as_object_mut()?;
        let meta = params.entry("_meta").or_insert_with(|| json!({}));
        let meta = meta.as_object_mut()?;
        if let Some(ours) = self.meta.as_object() {
            for (k, v) in ours {
                meta.insert(k.clone(), v.clone());
            }
        }
        serde_json::to_vec(&msg).ok().map(Bytes::from)
    }
}

/// The headers a 2026-07-28 request carries beside its body: `Mcp-Method`,
/// and `Mcp-Name` (from `params.name` or `params.uri`) for a named
/// operation, Base64-encoded where the value is not plain header-safe ASCII.
pub(crate) fn request_headers(body: &[u8]) -> HeaderMap {
    #[derive(serde::Deserialize)]
    struct Msg {
        method: Option<String>,
        params: Option<Named>,
    }
    #[derive(serde::Deserialize)]
    struct Named {
        name: Option<Value>,
        uri: Option<Value>,
    }
    let mut headers = HeaderMap::new();
    let Ok(msg) = serde_json::from_slice::<Msg>(body) else {
        return headers;
    };
    let Some(method) = msg.method else {
        return headers;
    };
    if let Ok(v) = HeaderValue::from_str(&method) {
        headers.insert(METHOD, v);
    }
    let field = match method.as_str() {
        "tools/call" | "prompts/get" => msg.params.and_then(|p| p.name),
        "resources/read" => msg.params.and_then(|p| p.uri),
        _ => None,
    };
    if let Some(Value::String(name)) = field {
        if let Ok(v) = HeaderValue::from_str(&header_value(&name)) {
            headers.insert(NAME, v);
        }
    }
    headers
}

/// A value as a header carries it: as it is when it is visible ASCII (and
/// inner spaces) and not itself of the sentinel form, else
/// `=?base64?...?=`.
fn header_value(value: &str) -> String {
    let safe = value.bytes().all(|b| (0x20..=0x7e).contains(&b));
    let padded = value.starts_with(' ') || value.ends_with(' ');
    let sentinel = value.starts_with("=?base64?") && value.ends_with("?=");
    let plain = safe && !padded && !sentinel;
    if plain {
        value.to_owned()
    } else {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
        format!("=?base64?{encoded}?=")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_get_the_meta_and_ping_is_a_discovery() {
        let era = Era {
            meta: meta_of(
                Some(
                    &json!({"capabilities": {"roots": {}}, "clientInfo": {"name": "c", "version": "1"}}),
                ),
                VERSION,
            ),
            version: VERSION,
        };
        let line = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":3}}}"#;
        let out: Value =
            serde_json::from_slice(&era.request(line).expect("a request")).expect("json");
        let meta = &out["params"]["_meta"];
        assert_eq!(meta["progressToken"], 3);
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], VERSION);
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            json!({"roots": {}})
        );
        assert_eq!(meta["io.modelcontextprotocol/clientInfo"]["name"], "c");

        let ping: Value = serde_json::from_slice(
            &era.request(br#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#)
                .expect("ping"),
        )
        .expect("json");
        assert_eq!(ping["method"], "server/discover");
        assert!(ping["params"]["_meta"].is_object());
    }

    #[test]
    fn headers_name_the_method_and_the_operation() {
        let h = request_headers(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_weather"}}"#,
        );
        assert_eq!(h[METHOD], "tools/call");
        assert_eq!(h[NAME], "get_weather");
        let h = request_headers(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///größe"}}"#
                .as_bytes(),
        );
        assert_eq!(h[NAME], "=?base64?ZmlsZTovLy9ncsO2w59l?=");
        let h = request_headers(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#);
        assert!(h.get(NAME).is_none());
    }
}
