//! Skipping a program's own options to find its first operand.
//!
//! Each program gets a small [`Grammar`]: which options take a value, and
//! which mean "no script follows" (`python -c`, `node -e`, `sh -c`). Options
//! not listed are taken to be flags without a value, which is right for most
//! and harmless for the rest, since only existing files are ever returned.

use std::ffi::{OsStr, OsString};

/// The option syntax of one program.
#[derive(Debug)]
pub struct Grammar {
    /// Short options that take a value (`-W ignore` or `-Wignore`).
    pub short_value: &'static str,
    /// Short options after which no script follows; their value (`-m pkg`)
    /// is reported with [`Scan::Stop`].
    pub short_stop: &'static str,
    /// Long options that take a value, as `--opt value` or `--opt=value`.
    pub long_value: &'static [&'static str],
    /// Long options after which no script follows.
    pub long_stop: &'static [&'static str],
    /// Whether short options cluster, getopt style (`-uBm pkg`).
    pub clusters: bool,
    /// Whether `+o name` style options exist (shells).
    pub plus: bool,
}

/// Where scanning ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan<'a> {
    /// The first operand is `args[i]`.
    Operand(usize),
    /// An option such as `-c` or `-m` ended the scan, with its value.
    Stop(String, Option<&'a OsStr>),
    /// No operand.
    Nothing,
}

// === impl Grammar ===

impl Grammar {
    /// Scans `args`, reporting every option value to `seen` (with the option
    /// as written, `-r` or `--require`).
    pub fn scan<'a>(&self, args: &'a [OsString], mut seen: impl FnMut(&str, &OsStr)) -> Scan<'a> {
        let mut i = 0;
        while i < args.len() {
            let Some(arg) = args[i].to_str() else {
                return Scan::Operand(i);
            };
            let next = args.get(i + 1).map(OsString::as_os_str);
            if arg == "--" {
                return if i + 1 < args.len() {
                    Scan::Operand(i + 1)
                } else {
                    Scan::Nothing
                };
            }
            if let Some(long) = arg.strip_prefix("--") {
                let (name, inline) = match long.split_once('=') {
                    Some((name, value)) => (format!("--{name}"), Some(OsStr::new(value))),
                    None => (arg.to_string(), None),
                };
                let takes_value = self.long_value.contains(&name.as_str());
                let value = match inline {
                    Some(v) => Some(v),
                    None if takes_value || self.long_stop.contains(&name.as_str()) => {
                        i += 1;
                        next
                    }
                    None => None,
                };
                if self.long_stop.contains(&name.as_str()) {
                    return Scan::Stop(name, value);
                }
                if let (true, Some(v)) = (takes_value, value) {
                    seen(&name, v);
                }
                i += 1;
                continue;
            }
            let plus = self.plus && arg.starts_with('+');
            if arg.len() < 2 || !(arg.starts_with('-') || plus) {
                // A lone `-` is stdin: no file to watch.
                return if arg == "-" {
                    Scan::Nothing
                } else {
                    Scan::Operand(i)
                };
            }
            let sign = &arg[..1];
            let cluster = &arg[1..];
            let mut consumed_next = false;
            for (at, ch) in cluster.char_indices() {
                let rest = &cluster[at + ch.len_utf8()..];
                let stop = self.short_stop.contains(ch);
                if stop || self.short_value.contains(ch) {
                    let value = if rest.is_empty() {
                        consumed_next = true;
                        next
                    } else {
                        Some(OsStr::new(rest))
                    };
                    let name = format!("{sign}{ch}");
                    if stop {
                        return Scan::Stop(name, value);
                    }
                    if let Some(v) = value {
                        seen(&name, v);
                    }
                    break;
                }
                if !self.clusters {
                    break;
                }
            }
            i += if consumed_next { 2 } else { 1 };
        }
        Scan::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Grammar = Grammar {
        short_value: "WX",
        short_stop: "cm",
        long_value: &["--check-hash-based-pycs"],
        long_stop: &["--eval"],
        clusters: true,
        plus: false,
    };

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    fn scan(s: &[&str]) -> (Option<String>, Vec<String>) {
        let a = args(s);
        let mut values = Vec::new();
        let found = match G.scan(&a, |k, v| {
            values.push(format!("{k}={}", v.to_string_lossy()))
        }) {
            Scan::Operand(i) => Some(a[i].to_string_lossy().into_owned()),
            Scan::Stop(flag, v) => Some(format!("stop {flag} {v:?}")),
            Scan::Nothing => None,
        };
        (found, values)
    }

    #[test]
    fn skips_flags_and_values() {
        assert_eq!(scan(&["-u", "s.py"]).0.as_deref(), Some("s.py"));
        assert_eq!(scan(&["-W", "ignore", "s.py"]).0.as_deref(), Some("s.py"));
        assert_eq!(scan(&["-Wignore", "s.py"]).0.as_deref(), Some("s.py"));
        assert_eq!(scan(&["-uBW", "x", "s.py"]).0.as_deref(), Some("s.py"));
        assert_eq!(
            scan(&["--check-hash-based-pycs", "never", "s.py"])
                .0
                .as_deref(),
            Some("s.py")
        );
        assert_eq!(
            scan(&["--check-hash-based-pycs=never", "s.py"])
                .0
                .as_deref(),
            Some("s.py")
        );
        assert_eq!(scan(&["--", "-s.py"]).0.as_deref(), Some("-s.py"));
        assert_eq!(scan(&["-W", "x"]).1, vec!["-W=x".to_string()]);
    }

    #[test]
    fn stops() {
        assert_eq!(
            scan(&["-m", "pkg"]).0.as_deref(),
            Some(r#"stop -m Some("pkg")"#)
        );
        assert_eq!(
            scan(&["-um", "pkg"]).0.as_deref(),
            Some(r#"stop -m Some("pkg")"#)
        );
        assert_eq!(
            scan(&["-mpkg"]).0.as_deref(),
            Some(r#"stop -m Some("pkg")"#)
        );
        assert_eq!(
            scan(&["--eval=1"]).0.as_deref(),
            Some(r#"stop --eval Some("1")"#)
        );
        assert_eq!(scan(&["-"]).0, None);
        assert_eq!(scan(&["-u"]).0, None);
        assert_eq!(scan(&[]).0, None);
    }
}
