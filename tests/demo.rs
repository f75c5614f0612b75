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
