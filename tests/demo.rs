//! `tensorshare demo` runs end to end with no Python over all four strategies
//! and reports every leg as verified, and zero-copy where memory is shared.

mod support;

use std::process::Command;

#[test]
fn demo_streams_both_ways_and_verifies() {
    let output = Command::new(support::tensorshare_exe())
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
        check_rows(&rows, "16", zero_copy);
        // The copy is its own yardstick.
        if strategy == "bytes" {
            for row in &rows {
                let columns: Vec<&str> = row.split_whitespace().collect();
                assert_eq!(columns[columns.len() - 2], "1.00x", "{row}");
            }
        }
    }
    assert!(
        stdout.contains("vs copy: how many times faster than `bytes`"),
        "{stdout}"
    );
    assert!(
        stdout.contains("every byte of every tensor verified"),
        "{stdout}"
    );
}

fn check_rows(rows: &[&str], tensors: &str, zero_copy: &str) {
    for row in rows {
        let columns: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(columns[4], tensors, "{row}");
        assert_eq!(columns.last(), Some(&zero_copy), "zero-copy column: {row}");
        let ratio = columns[columns.len() - 2];
        let parsed = ratio.strip_suffix('x').and_then(|r| r.parse::<f64>().ok());
        assert!(parsed.is_some_and(|r| r > 0.0), "vs copy column: {row}");
    }
}

/// In a container's 64 MB `/dev/shm` (a mount namespace's own tmpfs), the
/// demo still streams its 93 MiB a leg through named segments: each
/// sender sends in rounds that fit beside what the pools keep. Nothing is
/// left there once its processes and their manager are gone.
#[test]
fn demo_runs_in_a_containers_64_mb_dev_shm() {
    if !support::netns::mount_namespaces("demo_runs_in_a_containers_64_mb_dev_shm") {
        return;
    }
    // The manager unlinks what its clients left once they are gone and its
    // grace has passed: the listing waits for that, and no longer.
    let script = "mount -t tmpfs -o size=64m tmpfs /dev/shm || exit 97
        \"$@\"; status=$?
        for _ in $(seq 100); do [ -z \"$(ls -A /dev/shm)\" ] && break; sleep 0.1; done
        echo \"left $(ls -A /dev/shm | tr '\\n' ' ')\"
        exit $status";
    let output = Command::new("unshare")
        .args(["--mount", "sh", "-c", script, "sh"])
        .arg(support::tensorshare_exe())
        .args(["demo", "--tensors", "32"])
        .env_remove("TENSORSHARE_TEST_PYTHON")
        .output()
        .expect("run tensorshare demo in a mount namespace");
    let stdout = support::expect_success(&output, "tensorshare demo in a 64 MB /dev/shm");
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("file_system"))
        .collect();
    assert_eq!(
        rows.len(),
        2,
        "one file_system row per direction:\n{stdout}"
    );
    check_rows(&rows, "32", "yes");
    assert!(
        stdout.contains("every byte of every tensor verified"),
        "{stdout}"
    );
    let left = stdout
        .lines()
        .find_map(|line| line.strip_prefix("left"))
        .unwrap_or_else(|| panic!("no listing of /dev/shm:\n{stdout}"));
    assert_eq!(left.trim(), "", "left in /dev/shm");
}

/// A usage error from clap (status 2, `error: ...` naming the flag), and
/// nothing run: no table, no "verified".
fn assert_refused(args: &[&str], flag: &str) {
    let output = Command::new(support::tensorshare_exe())
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

/// SIGKILLed in the middle of its `file_descriptor` leg, the demo and its
/// peer leave nothing in their `TMPDIR`: the listener and both resource
/// sharers are abstract sockets.
#[test]
fn a_sigkilled_demo_leaves_nothing_in_its_tmpdir() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (child, line) = support::spawn_for_first_line(
        Command::new(support::tensorshare_exe())
            .args(["demo", "--tensors", "100000"])
            .env("TMPDIR", tmp.path())
            .env_remove(tensorshare::resource_sharer::SHARER_DIR_ENV),
        "tensorshare demo",
    );
    let mut demo = support::ChildGuard(child);
    // `tensorshare demo: process A and process B exchange ...`
    let pids: Vec<u32> = line
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .take(2)
        .collect();
    assert_eq!(pids.len(), 2, "{line}");
    assert_eq!(pids[0], demo.pid(), "{line}");
    // Well into the first leg, with both sharers serving.
    std::thread::sleep(std::time::Duration::from_millis(300));
    for &pid in pids.iter().rev() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    demo.0.wait().expect("reap the demo");
    assert!(
        support::wait_until(std::time::Duration::from_secs(15), || support::has_exited(
            pids[1]
        )),
        "the peer survived"
    );
    let left = support::tree(tmp.path());
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}
