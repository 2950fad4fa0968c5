//! mcpvisor's Streamable HTTP front.

mod config;

pub use config::{BearerToken, ConfigError, HttpConfig};
