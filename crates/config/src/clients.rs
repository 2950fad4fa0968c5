//! Where MCP clients keep their config files.
//!
//! Each client reads its servers from a file in a place of its own: a
//! user-wide file in the home directory (or the platform's application
//! support folder), and for some a project file in the folder a person
//! works in. [`known_files`] lists those places for a given home, project
//! folder and platform; it only builds paths, so the caller decides which
//! exist and what to do with them.

use std::fmt;
use std::path::{Path, PathBuf};

/// An MCP client whose config files mcpvisor knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Client {
    /// Claude Desktop: `claude_desktop_config.json`.
    ClaudeDesktop,
    /// Claude Code: `~/.claude.json` (user servers) and a project's `.mcp.json`.
    ClaudeCode,
    /// Cursor: `~/.cursor/mcp.json` and a project's `.cursor/mcp.json`.
    Cursor,
    /// VS Code: a project's `.vscode/mcp.json`, the user `mcp.json`, and
    /// the user settings' `mcp` section.
    VsCode,
    /// Codex: `~/.codex/config.toml` (or `$CODEX_HOME/config.toml`).
    Codex,
    /// Windsurf: `~/.codeium/windsurf/mcp_config.json`.
    Windsurf,
}

/// The operating system whose folder layout applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    /// Linux and the other Unix-likes that follow the XDG layout.
    Linux,
    /// macOS: `~/Library/Application Support`.
    MacOs,
}

/// What the places depend on: the home folder, the project folder, and the
/// environment variables clients honour.
#[derive(Debug, Clone)]
pub struct Places {
    /// The user's home folder.
    pub home: PathBuf,
    /// The project folder (usually the current directory).
    pub project: PathBuf,
    /// The platform.
    pub os: Os,
    /// `$XDG_CONFIG_HOME` when set (Linux).
    pub xdg_config_home: Option<PathBuf>,
    /// `$CODEX_HOME` when set.
    pub codex_home: Option<PathBuf>,
}

/// One place a client keeps its servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownFile {
    /// The client that reads it.
    pub client: Client,
    /// The file.
    pub path: PathBuf,
    /// Whether it belongs to the project folder rather than the user.
    pub project: bool,
}

impl Client {
    /// Every client, in the order files are listed.
    pub const ALL: [Client; 6] = [
        Client::ClaudeDesktop,
        Client::ClaudeCode,
        Client::Cursor,
        Client::VsCode,
        Client::Codex,
        Client::Windsurf,
    ];

    /// The name used on the command line: `claude-desktop`, `vscode`, ...
    pub fn name(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "claude-desktop",
            Client::ClaudeCode => "claude-code",
            Client::Cursor => "cursor",
            Client::VsCode => "vscode",
            Client::Codex => "codex",
            Client::Windsurf => "windsurf",
        }
    }

    /// The client called `name` on the command line.
    pub fn from_name(name: &str) -> Option<Client> {
        Client::ALL.into_iter().find(|client| client.name() == name)
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Places {
    /// The places for this process: `$HOME`, the current directory, the
    /// platform it was built for, and the variables clients read. `None`
    /// without a home folder.
    pub fn from_env() -> Option<Places> {
        let home = std::env::var_os("HOME")
            .filter(|home| !home.is_empty())
            .map(PathBuf::from)?;
        let project = std::env::current_dir().ok()?;
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|value| !value.is_empty())
                .map(PathBuf::from)
                .filter(|path| path.is_absolute())
        };
        Some(Places {
            home,
            project,
            os: if cfg!(target_os = "macos") {
                Os::MacOs
            } else {
                Os::Linux
            },
            xdg_config_home: var("XDG_CONFIG_HOME"),
            codex_home: var("CODEX_HOME"),
        })
    }

    /// The folder where desktop applications keep their settings.
    fn app_config(&self) -> PathBuf {
        match self.os {
            Os::MacOs => self.home.join("Library").join("Application Support"),
            Os::Linux => self
                .xdg_config_home
                .clone()
                .unwrap_or_else(|| self.home.join(".config")),
        }
    }
}

/// Every place the clients in `clients` keep servers, user files first,
/// then project files; whether each exists is not checked.
pub fn known_files(places: &Places, clients: &[Client]) -> Vec<KnownFile> {
    let user = |client, path: PathBuf| KnownFile {
        client,
        path,
        project: false,
    };
    let project = |client, path: &Path| KnownFile {
        client,
        path: places.project.join(path),
        project: true,
    };
    let home = &places.home;
    let app = places.app_config();
    let mut files = Vec::new();
    for &client in clients {
        match client {
            Client::ClaudeDesktop => files.push(user(
                client,
                app.join("Claude").join("claude_desktop_config.json"),
            )),
            Client::ClaudeCode => files.push(user(client, home.join(".claude.json"))),
            Client::Cursor => files.push(user(client, home.join(".cursor").join("mcp.json"))),
            Client::VsCode => {
                let vscode = app.join("Code").join("User");
                files.push(user(client, vscode.join("mcp.json")));
                files.push(user(client, vscode.join("settings.json")));
            }
            Client::Codex => {
                let codex = places
                    .codex_home
                    .clone()
                    .unwrap_or_else(|| home.join(".codex"));
                files.push(user(client, codex.join("config.toml")));
            }
            Client::Windsurf => files.push(user(
                client,
                home.join(".codeium")
                    .join("windsurf")
                    .join("mcp_config.json"),
            )),
        }
    }
    for &client in clients {
        match client {
            Client::ClaudeCode => files.push(project(client, Path::new(".mcp.json"))),
            Client::Cursor => files.push(project(client, &Path::new(".cursor").join("mcp.json"))),
            Client::VsCode => files.push(project(client, &Path::new(".vscode").join("mcp.json"))),
            Client::ClaudeDesktop | Client::Codex | Client::Windsurf => {}
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn places(os: Os) -> Places {
        Places {
            home: PathBuf::from("/home/me"),
            project: PathBuf::from("/src/app"),
            os,
            xdg_config_home: None,
            codex_home: None,
        }
    }

    fn paths(files: &[KnownFile]) -> Vec<String> {
        files
            .iter()
            .map(|file| format!("{} {}", file.client, file.path.display()))
            .collect()
    }

    #[test]
    fn linux_places_user_files_first() {
        let files = known_files(&places(Os::Linux), &Client::ALL);
        assert_eq!(
            paths(&files),
            [
                "claude-desktop /home/me/.config/Claude/claude_desktop_config.json",
                "claude-code /home/me/.claude.json",
                "cursor /home/me/.cursor/mcp.json",
                "vscode /home/me/.config/Code/User/mcp.json",
                "vscode /home/me/.config/Code/User/settings.json",
                "codex /home/me/.codex/config.toml",
                "windsurf /home/me/.codeium/windsurf/mcp_config.json",
                "claude-code /src/app/.mcp.json",
                "cursor /src/app/.cursor/mcp.json",
                "vscode /src/app/.vscode/mcp.json",
            ]
        );
        assert!(files.iter().filter(|f| f.project).count() == 3);
    }

    #[test]
    fn macos_and_overrides() {
        let mut places = places(Os::MacOs);
        places.codex_home = Some(PathBuf::from("/opt/codex"));
        places.xdg_config_home = Some(PathBuf::from("/ignored/on/macos"));
        let files = known_files(
            &places,
            &[Client::ClaudeDesktop, Client::Codex, Client::VsCode],
        );
        assert_eq!(
            paths(&files),
            [
                "claude-desktop /home/me/Library/Application Support/Claude/claude_desktop_config.json",
                "codex /opt/codex/config.toml",
                "vscode /home/me/Library/Application Support/Code/User/mcp.json",
                "vscode /home/me/Library/Application Support/Code/User/settings.json",
                "vscode /src/app/.vscode/mcp.json",
            ]
        );
        let mut linux = self::places(Os::Linux);
        linux.xdg_config_home = Some(PathBuf::from("/xdg"));
        assert_eq!(
            paths(&known_files(&linux, &[Client::ClaudeDesktop])),
            ["claude-desktop /xdg/Claude/claude_desktop_config.json"]
        );
    }

    #[test]
    fn names_round_trip() {
        for client in Client::ALL {
            assert_eq!(Client::from_name(client.name()), Some(client));
        }
        assert_eq!(Client::from_name("emacs"), None);
    }
}
