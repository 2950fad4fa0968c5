//! The `mcpvisor` command.
//!
//! A thin binary over the library crates: it parses and validates arguments
//! (two stages: clap's raw [`cli::Cli`], then [`cli::RunArgs::resolve`]), sets
//! up logging on stderr or a file (never stdout, which belongs to the
//! protocol), turns signals into session controls, and runs the session.

mod auth;
mod call;
mod cli;
mod connect;
mod demo;
mod docs;
mod doctor;
mod gateway;
mod http;
mod inspect;
mod output;
mod probe;
mod reload;
mod run;
mod sandbox;
mod serve;
mod server;
mod signals;
mod stdio;
mod tools;
mod ui;
mod watchers;
mod wrap;

use std::process::ExitCode;

use clap::Parser as _;

/// A start that cannot go on (bad arguments, a config that does not
/// load): the reason on stderr, one line, and exit code 2.
fn refuse(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("mcpvisor: {e}");
    ExitCode::from(2)
}

/// The single-threaded runtime every subcommand runs on: one thread makes
/// each hop between tasks a cheap wake-up (see BENCHMARKS.md).
/// `MCPVISOR_RUNTIME=multi-thread` picks tokio's multi-threaded runtime
/// instead, for measuring the difference.
fn runtime() -> Option<tokio::runtime::Runtime> {
    let mut builder = match std::env::var("MCPVISOR_RUNTIME").as_deref() {
        Ok("multi-thread") => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    match builder.enable_all().build() {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("mcpvisor: cannot start the runtime: {e}");
            None
        }
    }
}

/// The end of a subcommand that served clients, once its runtime has
/// returned: `served` is whether the client had stopped reading (then
/// nobody is told), or why it could not start. The runtime is let go at
/// once: a blocking read of stdin cannot be cancelled, so it is not waited
/// for.
fn finish(runtime: tokio::runtime::Runtime, served: Result<bool, String>) -> ExitCode {
    runtime.shutdown_background();
    match served {
        Ok(client_gone) => {
            if !client_gone {
                tracing::info!("mcpvisor stopped");
            }
            ExitCode::SUCCESS
        }
        Err(e) => refuse(e),
    }
}

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return output::clap_exit(&err),
    };
    if !matches!(cli.command, cli::Command::SandboxExec(_)) {
        // A server with a sandbox is started through this binary's
        // `sandbox-exec`.
        if let Ok(me) = std::env::current_exe() {
            mcpvisor_runner::set_sandbox_launcher(me);
        }
    }
    match cli.command {
        cli::Command::SandboxExec(args) => sandbox::main(args),
        cli::Command::Wrap(args) => wrap::wrap_main(args),
        cli::Command::Unwrap(args) => wrap::unwrap_main(args),
        cli::Command::InstallGateway(args) => gateway::install(args),
        cli::Command::UninstallGateway(args) => gateway::uninstall(args),
        cli::Command::Doctor(args) => doctor::main(args),
        cli::Command::Run(args) => run::main(*args),
        cli::Command::Serve(args) => serve::main(*args),
        cli::Command::Inspect(args) => inspect::main(args),
        cli::Command::Call(args) => call::main(args),
        cli::Command::Connect(args) => connect::main(*args),
        cli::Command::Status(args) => ui::status(args),
        cli::Command::Completions(args) => docs::completions(args),
        cli::Command::Man(args) => docs::man(args),
        cli::Command::Auth(args) => auth::main(args),
        cli::Command::Tools(args) => tools::main(args),
        cli::Command::Demo => demo::main(),
        cli::Command::ExampleServer => match mcpvisor_fixtures::example_server::run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("example-server: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
