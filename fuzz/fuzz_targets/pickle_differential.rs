//! Arbitrary bytes through our decoder and serde-pickle's, a decoder
//! written apart from ours: wherever both read plain data (no global but
//! the forms of sets and bytes, no cycle), they must read the same value.
//! Where only one reads the input, the difference is a leniency of one of
//! them (listed in `compat/tests/differential.rs`), not checked here.
#![no_main]

#[path = "../../compat/tests/differential/plain.rs"]
mod plain;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (Ok(Some(ours)), Ok(theirs)) = (plain::ours(data), plain::theirs(data)) else {
        return;
    };
    assert!(
        plain::same(&ours, &theirs),
        "ours read {ours:?}, serde-pickle {theirs:?}"
    );
});
