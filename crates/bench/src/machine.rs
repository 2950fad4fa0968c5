//! Facts about the machine and the processes under test.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;

/// Cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The first "model name" of /proc/cpuinfo, or "unknown".
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A process's peak resident set size (VmHWM) in KiB.
pub fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    status_kib(pid, "VmHWM:")
}

/// A process's resident set size now (VmRSS) in KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    status_kib(pid, "VmRSS:")
}

/// What a process has resident now, split by where it comes from.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Resident {
    /// `RssAnon`: its own memory (heap, stacks), private to it.
    pub anon_kib: u64,
    /// `RssFile`: pages of files it maps (its code and read-only data, the
    /// libraries'), which the page cache holds once for every process that
    /// maps the same files.
    pub file_kib: u64,
}

/// A process's resident memory now, private and file-backed apart.
pub fn resident(pid: u32) -> anyhow::Result<Resident> {
    Ok(Resident {
        anon_kib: status_kib(pid, "RssAnon:")?,
        file_kib: status_kib(pid, "RssFile:")?,
    })
}

fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no {field} in {path}"))
}

/// The processes whose parent is `pid`, from `/proc/*/stat`. A process
/// that ends while the table is read is simply not counted.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| parent_of(&stat))
                == Some(pid)
        })
        .collect()
}

/// The value of `name` in a process's environment (`/proc/PID/environ`,
/// as it was when the process started); `None` when it has no such
/// variable, or is gone or not ours to read.
pub fn env_var(pid: u32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|&b| b == 0).find_map(|entry| {
        let value = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        Some(String::from_utf8_lossy(value).into_owned())
    })
}

/// Every process whose environment has `name` set, with its value. A
/// process that ends while the table is read is simply not counted.
pub fn processes_with_env(name: &str) -> Vec<(u32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, env_var(pid, name)?)))
        .collect()
}

/// The parent pid in a `/proc/PID/stat` line: the second field after the
/// command name, which is in parentheses and may hold anything, even `)`.
fn parent_of(stat: &str) -> Option<u32> {
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// Today's date (UTC) as `YYYY-MM-DD`.
pub fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_000), (2024, 10, 4));
    }

    #[test]
    fn parents_are_read_past_odd_command_names() {
        assert_eq!(parent_of("42 (a) b) S 17 42 42 0 -1"), Some(17));
        assert_eq!(parent_of("42 (sh) R 1 42"), Some(1));
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn a_spawned_child_is_found() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let found = children(std::process::id()).contains(&child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(found);
    }

    #[test]
    fn a_childs_environment_is_read() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .env("MCPVISOR_BENCH_TEST_MARK", "a=b")
            .spawn()
            .expect("sleep");
        // The environment is the child's once it has exec'd.
        let mut value = None;
        for _ in 0..100 {
            value = env_var(child.id(), "MCPVISOR_BENCH_TEST_MARK");
            if value.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let found = processes_with_env("MCPVISOR_BENCH_TEST_MARK")
            .contains(&(child.id(), "a=b".to_owned()));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(value.as_deref(), Some("a=b"));
        assert!(found);
        assert_eq!(
            env_var(std::process::id(), "MCPVISOR_BENCH_NO_SUCH_VAR"),
            None
        );
    }

    #[test]
    fn our_own_peak_memory_is_readable() {
        assert!(peak_rss_kib(std::process::id()).expect("VmHWM") > 0);
        let now = resident(std::process::id()).expect("RssAnon and RssFile");
        assert!(now.anon_kib > 0 && now.file_kib > 0, "{now:?}");
    }
}
