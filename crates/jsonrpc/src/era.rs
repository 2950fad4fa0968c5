//! The 2026-07-28 envelope: what a request of that era carries in
//! `params._meta` in place of a handshake, and what a `server/discover`
//! result says of the server.
//!
//! One copy for every part of mcpvisor that speaks the era to a server: the
//! remote client (`mcpvisor-remote`) and the gateway's backends.

use serde_json::{Value, json};

/// The sessionless revision.
pub const MODERN: &str = "2026-07-28";
/// `_meta` key: the request's protocol version.
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities.
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the client's name and version.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// The prefix of every envelope key of `_meta`.
pub const META_PREFIX: &str = "io.modelcontextprotocol/";

/// The `_meta` envelope of a request in `version` for a client whose
/// `initialize` had these params: its capabilities (`{}` when it declared
/// none) and its `clientInfo` (when it gave one).
pub fn client_meta(init_params: Option<&Value>, version: &str) -> Value {
    let capabilities = init_params
        .and_then(|p| p.get("capabilities"))
        .filter(|c| c.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut meta = json!({
        META_VERSION: version,
        META_CAPABILITIES: capabilities,
    });
    if let Some(info) = init_params
        .and_then(|p| p.get("clientInfo"))
        .filter(|i| !i.is_null())
    {
        meta[META_CLIENT_INFO] = info.clone();
    }
    meta
}

/// What a `server/discover` result says of a server that speaks `version`,
/// in the shape of an `initialize` result (`protocolVersion`,
/// `capabilities`, `serverInfo`, `instructions`), for what reads that:
/// `None` when the result does not list `version` among its
/// `supportedVersions` (a server of another era, or not a discovery
/// result at all).
pub fn discovered(result: &Value, version: &str) -> Option<Value> {
    let modern = result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|v| v == version));
    if !modern {
        return None;
    }
    let server_info = result
        .get("_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/serverInfo"))
        .or_else(|| result.get("serverInfo"))
        .cloned()
        .unwrap_or_else(|| json!({"name": "unknown", "version": "unknown"}));
    let mut init = json!({
        "protocolVersion": version,
        "capabilities": result.get("capabilities").filter(|c| c.is_object()).cloned().unwrap_or_else(|| json!({})),
        "serverInfo": server_info,
    });
    if let Some(instructions) = result.get("instructions") {
        init["instructions"] = instructions.clone();
    }
    Some(init)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_s_envelope_comes_from_its_initialize() {
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": {"roots": {}}, "clientInfo": {"name": "c", "version": "1"}});
        let meta = client_meta(Some(&init), MODERN);
        assert_eq!(meta[META_VERSION], MODERN);
        assert_eq!(meta[META_CAPABILITIES], json!({"roots": {}}));
        assert_eq!(meta[META_CLIENT_INFO]["name"], "c");
        let bare = client_meta(None, MODERN);
        assert_eq!(bare[META_CAPABILITIES], json!({}));
        assert!(bare.get(META_CLIENT_INFO).is_none());
    }

    #[test]
    fn only_a_result_listing_the_version_is_a_discovery_of_it() {
        let result = json!({
            "supportedVersions": ["2025-11-25", MODERN],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "s", "version": "2"},
            "instructions": "use it",
            "resultType": "complete",
        });
        let init = discovered(&result, MODERN).expect("a modern server");
        assert_eq!(init["protocolVersion"], MODERN);
        assert_eq!(init["capabilities"], json!({"tools": {}}));
        assert_eq!(init["serverInfo"]["name"], "s");
        assert_eq!(init["instructions"], "use it");
        assert!(init.get("resultType").is_none());
        assert!(discovered(&json!({"supportedVersions": ["2025-11-25"]}), MODERN).is_none());
        assert!(discovered(&json!({"protocolVersion": MODERN}), MODERN).is_none());
        assert!(discovered(&json!({}), MODERN).is_none());
    }
}
