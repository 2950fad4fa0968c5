//! `mcpvisor-bench relay -- CMD...`: the least a relay on tokio does, for
//! the instruction count's floor.
//!
//! It starts CMD on pipes and copies bytes both ways on a current-thread
//! runtime, with its own stdin and stdout registered with the reactor as
//! mcpvisor registers the client's: per request, a wake-up for each
//! direction, a read and a write. It frames nothing, parses nothing, keeps
//! no state and sets no timer, so the instructions it spends per request
//! are what the runtime and the two hops cost before any of mcpvisor's own
//! work (see BENCHMARKS.md, "Instructions per request").

use std::fs::File;
use std::os::fd::AsFd;
use std::process::Stdio;

use anyhow::Context;
use tokio::net::unix::pipe;
use tokio::process::Command;

/// The options of `mcpvisor-bench relay`.
#[derive(Debug, clap::Args)]
pub struct RelayArgs {
    /// The command to relay to, and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Relays until both sides are done (the client closed our stdin, and CMD
/// its stdout), then waits for CMD to exit.
pub async fn run(args: &RelayArgs) -> anyhow::Result<()> {
    let (program, rest) = args.command.split_first().context("no command")?;
    let mut child = Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    let mut to_child = child.stdin.take().context("no stdin pipe")?;
    let mut from_child = child.stdout.take().context("no stdout pipe")?;
    let mut stdin =
        pipe::Receiver::from_file(own(std::io::stdin().as_fd())?).context("stdin is not a pipe")?;
    let mut stdout =
        pipe::Sender::from_file(own(std::io::stdout().as_fd())?).context("stdout is not a pipe")?;
    let requests = async move {
        let copied = tokio::io::copy(&mut stdin, &mut to_child).await;
        // The client is done: so is the child's stdin.
        drop(to_child);
        copied
    };
    let answers = tokio::io::copy(&mut from_child, &mut stdout);
    let (requests, answers) = tokio::join!(requests, answers);
    requests.context("relaying requests")?;
    answers.context("relaying answers")?;
    let status = child.wait().await.context("waiting for the command")?;
    anyhow::ensure!(status.success(), "{program}: {status}");
    Ok(())
}

fn own(fd: std::os::fd::BorrowedFd<'_>) -> anyhow::Result<File> {
    Ok(File::from(fd.try_clone_to_owned()?))
}
