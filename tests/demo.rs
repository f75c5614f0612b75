//! `tensorshare demo` runs end to end with no Python over all four strategies
//! and reports every leg as verified, and zero-copy where memory is shared.

mod support;

use std::process::Command;

#[test]
fn demo_streams_both_ways_and_verifies() {
    let output = Command::new(env!("CARGO_BIN_EXE_tensorshare"))
        .args(["demo", "--tensors", "16"])
        .env_remove("TENSORSHARE_TEST_PYTHON")
        .env("PATH", "/nonexistent")
        .output()
        .expect("run tensorshare demo");
    let stdout = support::expect_success(&output, "tensorshare demo");
    // Every strategy but bytes maps the memory the sender wrote.
    for (strategy, zero_copy) in [
        ("file_descriptor", "yes"),
        ("file_system", "yes"),
        ("bytes", "no"),
        ("memmap", "yes"),
    ] {
        let rows: Vec<&str> = stdout
            .lines()
            .filter(|line| line.starts_with(strategy))
            .collect();
        assert_eq!(rows.len(), 2, "one {strategy} row per direction:\n{stdout}");
        check_rows(&rows, zero_copy);
    }
    assert!(
        stdout.contains("every byte of every tensor verified"),
        "{stdout}"
    );
}

fn check_rows(rows: &[&str], zero_copy: &str) {
    for row in rows {
        let columns: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(columns[4], "16", "{row}");
        assert_eq!(columns.last(), Some(&zero_copy), "zero-copy column: {row}");
    }
}

/// A usage error from clap (status 2, `error: ...` naming the flag), and
/// nothing run: no table, no "verified".
fn assert_refused(args: &[&str], flag: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_tensorshare"))
        .args(args)
        .output()
        .expect("run tensorshare");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains(flag),
        "{args:?}: {stderr}"
    );
    assert!(
        output.stdout.is_empty(),
        "{args:?}: printed {:?}",
        output.stdout
    );
}

#[test]
fn empty_or_nonsensical_counts_are_usage_errors() {
    for tensors in ["0", "-1", "", "many", "100000000000"] {
        assert_refused(&["demo", "--tensors", tensors], "--tensors");
    }
}
