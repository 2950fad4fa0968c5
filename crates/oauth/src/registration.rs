//! Which client mcpvisor is at an authorization server, in the order the
//! specification gives: the credentials the entry configures, a client ID
//! metadata document URL (where the server supports them), a client
//! registered earlier with this issuer, or dynamic client registration
//! (RFC 7591) as a native application.

use reqwest::Client;
use serde::Deserialize;

use crate::discovery::{Discovered, ServerMetadata, describe, read_bounded};
use crate::store::StoredClient;
use crate::{AuthError, Secret, Settings};

/// Most bytes of a registration answer.
const ANSWER_BYTES: usize = 64 * 1024;

/// Where the client came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The entry's `client_id`.
    Configured,
    /// The entry's client ID metadata document URL.
    MetadataDocument,
    /// Registered earlier, kept in the store.
    Kept,
    /// Registered now.
    Registered,
}

/// The client to use with `found`'s issuer for `redirect_uri`.
pub(crate) async fn client(
    http: &Client,
    settings: &Settings,
    found: &Discovered,
    kept: Option<&StoredClient>,
    redirect_uri: &str,
) -> Result<(StoredClient, Origin), AuthError> {
    let metadata = &found.metadata;
    if let Some(id) = &settings.client_id {
        let method = auth_method(settings.client_secret.is_some(), metadata);
        return Ok((
            StoredClient {
                client_id: id.clone(),
                client_secret: settings.client_secret.clone(),
                auth_method: method,
                redirect_uri: None,
            },
            Origin::Configured,
        ));
    }
    if let Some(url) = &settings.client_metadata_url {
        if metadata.client_id_metadata_document_supported {
            return Ok((
                StoredClient {
                    client_id: url.clone(),
                    client_secret: None,
                    auth_method: "none".into(),
                    redirect_uri: None,
                },
                Origin::MetadataDocument,
            ));
        }
    }
    if let Some(kept) = kept {
        // A client registered for another redirect URI (the port was busy
        // then or now) is registered again when the server allows it.
        let same_redirect = kept
            .redirect_uri
            .as_deref()
            .is_none_or(|r| r == redirect_uri);
        if same_redirect || metadata.registration_endpoint.is_none() {
            return Ok((kept.clone(), Origin::Kept));
        }
    }
    let Some(endpoint) = &metadata.registration_endpoint else {
        return Err(AuthError::NoClient(found.issuer.clone()));
    };
    register(http, endpoint, metadata, &found.issuer, redirect_uri)
        .await
        .map(|client| (client, Origin::Registered))
}

/// How a client with (or without) a secret authenticates at the token
/// endpoint, among the methods the server lists (`client_secret_basic`
/// when it lists none, as RFC 8414 says).
pub(crate) fn auth_method(has_secret: bool, metadata: &ServerMetadata) -> String {
    if !has_secret {
        return "none".into();
    }
    let Some(methods) = &metadata.token_endpoint_auth_methods_supported else {
        return "client_secret_basic".into();
    };
    ["client_secret_basic", "client_secret_post", "none"]
        .into_iter()
        .find(|m| methods.iter().any(|s| s == m))
        .unwrap_or("client_secret_basic")
        .into()
}

/// The method to ask for at registration: a public client (`none`) when
/// the server allows one, else the first secret-based method it lists.
fn wanted_method(metadata: &ServerMetadata) -> &'static str {
    match &metadata.token_endpoint_auth_methods_supported {
        None => "none",
        Some(methods) => ["none", "client_secret_basic", "client_secret_post"]
            .into_iter()
            .find(|m| methods.iter().any(|s| s == m))
            .unwrap_or("none"),
    }
}

#[derive(Deserialize)]
struct Registered {
    client_id: String,
    client_secret: Option<String>,
    token_endpoint_auth_method: Option<String>,
}

/// `native` for a loopback redirect URI; `web` for any other (a gateway's
/// web UI at its public address), which OpenID registration refuses for a
/// native client.
fn application_type(redirect_uri: &str) -> &'static str {
    let loopback = reqwest::Url::parse(redirect_uri).ok().is_some_and(|u| {
        u.scheme() == "http"
            && u.host_str().is_some_and(|h| {
                h == "localhost"
                    || h.trim_matches(['[', ']'])
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            })
    });
    if loopback { "native" } else { "web" }
}

async fn register(
    http: &Client,
    endpoint: &str,
    metadata: &ServerMetadata,
    issuer: &str,
    redirect_uri: &str,
) -> Result<StoredClient, AuthError> {
    let failed = |detail: String| AuthError::Registration {
        issuer: issuer.to_owned(),
        detail,
    };
    let body = serde_json::json!({
        "client_name": "mcpvisor",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": wanted_method(metadata),
        "application_type": application_type(redirect_uri),
    });
    let response = http
        .post(endpoint)
        .json(&body)
        .send()
        .await
        .map_err(|e| failed(describe(&e)))?;
    let status = response.status();
    let answer = read_bounded(response, ANSWER_BYTES).await.map_err(failed)?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&answer);
        let text: String = text.chars().take(300).collect();
        return Err(failed(format!("HTTP {}: {}", status.as_u16(), text.trim())));
    }
    let registered: Registered = serde_json::from_slice(&answer)
        .map_err(|e| failed(format!("the answer is not a registration: {e}")))?;
    let secret = registered
        .client_secret
        .filter(|s| !s.is_empty())
        .map(Secret::new);
    let method = registered
        .token_endpoint_auth_method
        .unwrap_or_else(|| auth_method(secret.is_some(), metadata));
    tracing::info!(issuer, "registered mcpvisor as an OAuth client");
    Ok(StoredClient {
        client_id: registered.client_id,
        client_secret: secret,
        auth_method: method,
        redirect_uri: Some(redirect_uri.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(methods: Option<&[&str]>) -> ServerMetadata {
        ServerMetadata {
            token_endpoint_auth_methods_supported: methods
                .map(|m| m.iter().map(|s| (*s).to_owned()).collect()),
            ..ServerMetadata::default()
        }
    }

    #[test]
    fn a_redirect_off_loopback_is_a_web_client() {
        assert_eq!(application_type("http://127.0.0.1:1/callback"), "native");
        assert_eq!(
            application_type("http://localhost:8809/oauth/callback"),
            "native"
        );
        assert_eq!(
            application_type("http://[::1]:8809/oauth/callback"),
            "native"
        );
        assert_eq!(application_type("https://gw.example/oauth/callback"), "web");
        assert_eq!(
            application_type("http://10.0.0.5:8809/oauth/callback"),
            "web"
        );
    }

    #[test]
    fn the_token_endpoint_method_follows_the_server() {
        assert_eq!(
            auth_method(false, &meta(Some(&["client_secret_basic"]))),
            "none"
        );
        assert_eq!(auth_method(true, &meta(None)), "client_secret_basic");
        assert_eq!(
            auth_method(true, &meta(Some(&["client_secret_post"]))),
            "client_secret_post"
        );
        assert_eq!(
            auth_method(
                true,
                &meta(Some(&["client_secret_post", "client_secret_basic"]))
            ),
            "client_secret_basic"
        );
        assert_eq!(
            wanted_method(&meta(Some(&["client_secret_post"]))),
            "client_secret_post"
        );
        assert_eq!(
            wanted_method(&meta(Some(&["none", "client_secret_basic"]))),
            "none"
        );
    }
}
