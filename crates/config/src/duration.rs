//! Durations as people write them in config files (`30`, `2.5`, `"30s"`,
//! `"5m"`, `"1500ms"`, `"1m30s"`) and in command-line flags (`--timeout 1.5h`):
//! one grammar, so a value that works in one place works in the other.

use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing but whitespace.
    #[error("empty duration")]
    Empty,
    /// A number without a unit, an unknown unit, or stray characters.
    #[error("expected a duration like \"30s\", \"5m\" or \"1500ms\"")]
    Malformed,
    /// The unit is not one we know.
    #[error("unknown unit {0:?} (use ms, s, m or h)")]
    UnknownUnit(String),
    /// Larger than any timeout could sensibly be.
    #[error("duration is too large")]
    TooLarge,
}

/// Parses a duration written as one or more `<number><unit>` parts, such as
/// `"30s"`, `"5m"`, `"1500ms"`, `"1.5h"` or `"1m 30s"`.
///
/// Units: `ms`, `s`/`sec`/`secs`, `m`/`min`/`mins`, `h`/`hr`/`hours`. A bare
/// number is rejected here on purpose: in a string, `"30"` is ambiguous. A
/// config file that means seconds writes the number itself (`30`).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let number: f64 = number.parse().map_err(|_| DurationError::Malformed)?;
        let after = after.trim_start();
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale = match unit.to_ascii_lowercase().as_str() {
            "" => return Err(DurationError::Malformed),
            "ms" | "msec" | "msecs" => 0.001,
            "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
            _ => return Err(DurationError::UnknownUnit(unit.to_owned())),
        };
        total = total
            .checked_add(seconds(number * scale).ok_or(DurationError::TooLarge)?)
            .ok_or(DurationError::TooLarge)?;
        rest = after.trim_start();
    }
    Ok(total)
}

/// Converts a number of seconds into a [`Duration`]; `None` if it is
/// negative, not finite, or too large.
pub fn seconds(value: f64) -> Option<Duration> {
    // A year is far beyond any timeout; bounding it keeps the float
    // conversion exact enough and rules out overflow.
    const MAX_SECONDS: f64 = 366.0 * 24.0 * 3600.0;
    if value.is_finite() && (0.0..=MAX_SECONDS).contains(&value) {
        Some(Duration::from_secs_f64(value))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Duration {
        parse_duration(text).expect("valid duration")
    }

    #[test]
    fn single_units() {
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert_eq!(ok("5m"), Duration::from_secs(300));
        assert_eq!(ok("1500ms"), Duration::from_millis(1500));
        assert_eq!(ok("2h"), Duration::from_secs(7200));
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok(" 10 sec "), Duration::from_secs(10));
        assert_eq!(ok("3 Minutes"), Duration::from_secs(180));
    }

    #[test]
    fn compound() {
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1h 2m 3s 4ms"), Duration::from_millis(3_723_004));
    }

    #[test]
    fn rejects() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(parse_duration("30"), Err(DurationError::Malformed));
        assert_eq!(parse_duration("s"), Err(DurationError::Malformed));
        assert_eq!(parse_duration("-5s"), Err(DurationError::Malformed));
        assert_eq!(parse_duration("1..2s"), Err(DurationError::Malformed));
        assert_eq!(
            parse_duration("3d"),
            Err(DurationError::UnknownUnit("d".into()))
        );
        assert_eq!(parse_duration("99999999h"), Err(DurationError::TooLarge));
        assert_eq!(
            DurationError::UnknownUnit("d".into()).to_string(),
            "unknown unit \"d\" (use ms, s, m or h)"
        );
    }

    #[test]
    fn plain_seconds() {
        assert_eq!(seconds(2.5), Some(Duration::from_millis(2500)));
        assert_eq!(seconds(-1.0), None);
        assert_eq!(seconds(f64::NAN), None);
        assert_eq!(seconds(1e30), None);
    }
}
