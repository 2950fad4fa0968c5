//! An rmcp 3.x stdio MCP server for mcpvisor's interop tests.
//!
//! Tools: `echo {text}` returns the text, `crash {code?}` exits the process at
//! once without answering, `pid` returns this process's pid, and
//! `sleep {millis}` answers after that long (so a test can kill it mid-call;
//! it says `rmcp-test-server: sleeping N ms` on stderr when it starts).
//! rmcp enforces the legacy lifecycle strictly: any request or notification
//! before `initialize` / `notifications/initialized` ends the connection.

use rmcp::{
    ServerHandler, ServiceExt,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{Implementation, ServerCapabilities, ServerConfig},
    schemars, tool, tool_handler, tool_router,
    transport::stdio_pipes,
};
use serde::Deserialize;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    text: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct CrashArgs {
    /// The exit status (default 3).
    code: Option<i32>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct SleepArgs {
    /// How long to sleep before answering, in milliseconds.
    millis: u64,
}

#[derive(Debug, Clone)]
struct TestServer {
    #[allow(dead_code, reason = "read by the code #[tool_handler] generates")]
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl TestServer {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Echo the text back")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }

    #[tool(description = "Exit the server process at once, without answering")]
    fn crash(&self, Parameters(CrashArgs { code }): Parameters<CrashArgs>) -> String {
        std::process::exit(code.unwrap_or(3))
    }

    #[tool(description = "This server process's pid")]
    fn pid(&self) -> String {
        std::process::id().to_string()
    }

    #[tool(description = "Sleep, then answer")]
    async fn sleep(&self, Parameters(SleepArgs { millis }): Parameters<SleepArgs>) -> String {
        eprintln!("rmcp-test-server: sleeping {millis} ms");
        tokio::time::sleep(std::time::Duration::from_millis(millis)).await;
        format!("slept {millis}")
    }
}

#[tool_handler]
impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("interop-rmcp-server", "1.0.0"))
            .with_instructions("mcpvisor interop test server (rmcp)")
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let outcome = async {
        let service = TestServer::new().serve(stdio_pipes()).await?;
        service.waiting().await?;
        anyhow::Ok(())
    };
    match outcome.await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("rmcp-test-server: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
