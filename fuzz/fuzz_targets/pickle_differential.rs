//! Arbitrary bytes through our decoder and serde-pickle's, a decoder
//! written apart from ours: wherever both read plain data (no global but
//! the forms of sets and bytes, no cycle), they must read the same value.
//! Where only one reads the input, the difference is a leniency of one of
//! them (listed in `compat/tests/differential.rs`), not checked here; nor
//! is an input with a carriage return before a newline, which serde-pickle
//! drops from a text argument where CPython, and ours, keep it (that test
//! checks it still does). serde-pickle also reads a memo slot written
//! twice otherwise than CPython (checked there too): a finding here is
//! judged against CPython's `pickle.loads` by hand, which is why
//! `scripts/fuzz` runs this target only in a campaign or when named.
#![no_main]

#[path = "../../compat/tests/differential/plain.rs"]
mod plain;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // serde-pickle is asked only about what ours read as plain data no
    // deeper than its limit: its values recurse as deep as the input nests.
    if data.windows(2).any(|pair| pair == b"\r\n") {
        return;
    }
    let Ok(Some(ours)) = plain::ours(data) else {
        return;
    };
    let Ok(theirs) = plain::theirs(data) else {
        return;
    };
    assert!(
        plain::same(&ours, &theirs),
        "ours read {ours:?}, serde-pickle {theirs:?}"
    );
});
