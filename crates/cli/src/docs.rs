//! `mcpvisor completions SHELL` and `mcpvisor man`: shell completions and
//! manual pages, generated from the same clap definitions as `--help`, so
//! they cannot drift from the flags.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory as _};

use crate::output;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell, e.g. `source <(mcpvisor completions bash)`.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write mcpvisor.1 and a page per subcommand (mcpvisor-wrap.1, ...) into this folder, instead of mcpvisor.1 on stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub fn completions(args: CompletionsArgs) -> ExitCode {
    let mut cmd = crate::cli::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "mcpvisor", &mut out);
    print(&out)
}

pub fn man(args: ManArgs) -> ExitCode {
    let cmd = crate::cli::Cli::command();
    match args.dir {
        Some(dir) => match clap_mangen::generate_to(cmd, &dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => crate::refuse(format!("{}: cannot write the pages: {e}", dir.display())),
        },
        None => {
            let mut out = Vec::new();
            match clap_mangen::Man::new(cmd).render(&mut out) {
                Ok(()) => print(&out),
                Err(e) => crate::refuse(format!("cannot render the page: {e}")),
            }
        }
    }
}

fn print(bytes: &[u8]) -> ExitCode {
    let text = String::from_utf8_lossy(bytes);
    match output::print(&text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => ExitCode::from(e.report()),
    }
}
