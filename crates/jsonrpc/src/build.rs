//! The messages mcpvisor writes itself. Each is compact JSON on one line.

use bytes::Bytes;
use serde_json::value::RawValue;

/// A JSON-RPC error response. `id` is raw JSON (use `"null"` when unknown).
pub fn error(id: &str, code: i64, message: &str, data: Option<&serde_json::Value>) -> Bytes {
    let message = serde_json::to_string(message).unwrap_or_else(|_| "\"error\"".into());
    let data = data
        .and_then(|d| serde_json::to_string(d).ok())
        .map(|d| format!(",\"data\":{d}"))
        .unwrap_or_default();
    Bytes::from(format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":{code},\"message\":{message}{data}}}}}"
    ))
}

/// A success response. `id` and `result` are raw JSON.
pub fn result(id: &str, result: &str) -> Bytes {
    Bytes::from(format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}"
    ))
}

/// A request with raw `params` (or none).
pub fn request(id: &str, method: &str, params: Option<&RawValue>) -> Bytes {
    let method = serde_json::to_string(method).unwrap_or_default();
    match params {
        Some(p) => Bytes::from(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":{method},\"params\":{}}}",
            p.get()
        )),
        None => Bytes::from(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":{method}}}"
        )),
    }
}

/// A notification with raw `params` (or none).
pub fn notification(method: &str, params: Option<&str>) -> Bytes {
    let method = serde_json::to_string(method).unwrap_or_default();
    match params {
        Some(p) => Bytes::from(format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":{method},\"params\":{p}}}"
        )),
        None => Bytes::from(format!("{{\"jsonrpc\":\"2.0\",\"method\":{method}}}")),
    }
}

/// `notifications/cancelled` for the request with raw id `request_id`.
pub fn cancelled(request_id: &str, reason: &str) -> Bytes {
    let reason = serde_json::to_string(reason).unwrap_or_default();
    notification(
        "notifications/cancelled",
        Some(&format!(
            "{{\"requestId\":{request_id},\"reason\":{reason}}}"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Envelope, Kind};

    #[test]
    fn built_messages_are_valid_envelopes() {
        let data = serde_json::json!({"generation": 2});
        let e = error("\"x\"", -32010, "worker \"lost\"\n", Some(&data));
        let env = Envelope::peek(&e).expect("valid");
        assert_eq!(env.kind, Kind::Response);
        let v: serde_json::Value = serde_json::from_slice(&e).expect("json");
        assert_eq!(v["error"]["message"], "worker \"lost\"\n");
        assert_eq!(v["error"]["data"]["generation"], 2);
        assert!(!e.contains(&b'\n'));
        let c = cancelled("5", "timeout");
        assert_eq!(
            Envelope::peek(&c)
                .expect("valid")
                .request_id
                .map(crate::Raw::get),
            Some("5")
        );
        let p = RawValue::from_string("{\"a\":1}".into()).expect("raw");
        let r = request("\"mcpvisor:1\"", "initialize", Some(&p));
        assert_eq!(Envelope::peek(&r).expect("valid").kind, Kind::Request);
        let ok = result("\"a\"", "{\"x\":1}");
        let env = Envelope::peek(&ok).expect("valid");
        assert_eq!(
            (env.kind, env.id.map(crate::Raw::get)),
            (Kind::Response, Some("\"a\""))
        );
    }
}
