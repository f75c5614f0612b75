//! Finding the test Python: the one finder every crate's tests use
//! (`tensorshare`'s through `support`, `tensorshare-strategies`' and
//! `tensorshare-compat`'s by `#[path]`), so that a missing interpreter is
//! a notice or a failure alike everywhere.
#![allow(dead_code)] // a test binary may use one of the two

use std::io::Write;

/// The test Python (`TENSORSHARE_TEST_PYTHON`: any CPython for the
/// `multiprocessing` and `pickle` tests, the venv with the pinned torch
/// under `scripts/test`), or `None` after a loud notice when the tests run
/// without one. Under `TENSORSHARE_REQUIRE_INTEROP=1`, as `scripts/test`
/// sets, a missing interpreter fails the test `test` instead.
pub fn test_python(test: &str) -> Option<String> {
    match std::env::var("TENSORSHARE_TEST_PYTHON") {
        Ok(python) if !python.is_empty() => Some(python),
        _ => {
            assert!(
                !interop_required(),
                "{test}: TENSORSHARE_REQUIRE_INTEROP=1 but TENSORSHARE_TEST_PYTHON is not set: \
                 point it at a Python (scripts/python-env makes the venv scripts/test uses)"
            );
            // Through the handle, not eprintln!, so that test capture does not hide it.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {test} needs Python: set TENSORSHARE_TEST_PYTHON (scripts/test does)"
            );
            None
        }
    }
}

/// Whether the interop tests must run (`scripts/test`) rather than skip.
pub fn interop_required() -> bool {
    std::env::var("TENSORSHARE_REQUIRE_INTEROP").as_deref() == Ok("1")
}
