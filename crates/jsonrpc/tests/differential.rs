//! The envelope reading against serde_json on generated lines (see the
//! crate's `differential` module for the rules and what is compared):
//! the edge cases, every single-byte change of a few messages, and random
//! lines from a fixed seed. `mcpvisor-bench scan` runs the same check for
//! longer and from other seeds.

use mcpvisor_jsonrpc::differential::{self, Counts};

/// Random lines after the edge cases and the single-byte changes (about
/// 105,000 lines): past 150,000 lines in all.
const RANDOM: u64 = 50_000;

#[test]
fn the_envelope_reading_agrees_with_serde_json() {
    let started = std::time::Instant::now();
    let mut random = 0;
    let counts: Counts = differential::run(0x6D63_7076_6973_6F72, |_| {
        random += 1;
        random <= RANDOM
    })
    .unwrap_or_else(|disagreement| panic!("{disagreement}"));
    eprintln!("{counts:?} in {:?}", started.elapsed());
    assert!(counts.lines >= 150_000, "{counts:?}");
    // The cases reach both readers and the refusals.
    assert!(
        counts.scanned > 10_000 && counts.serde > 1_000,
        "{counts:?}"
    );
    assert!(counts.refused > 10_000, "{counts:?}");
    assert!(counts.streams >= RANDOM / 64, "{counts:?}");
}
