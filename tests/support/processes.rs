//! Child processes and what `/proc` says of processes, needing nothing of
//! tensorshare: child roles and their output, waiting for a condition, the
//! fds and sockets a process holds, bytes in hex for a child's settings.
//! The integration tests reach them through `support`, the library's unit
//! tests by `#[path]`.
#![allow(dead_code)] // each test binary uses its own part of this

use std::process::Command;
use std::time::{Duration, Instant};

/// This test binary, to run its child role `role` alone in a process of
/// its own. A role is an ignored `#[test]`, never run by the suite itself:
/// its parent test starts it with the settings it reads
/// ([`role_setting`]), and run by hand without them it fails.
pub fn child_role(role: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command.args(child_role_args(role));
    command
}

/// The arguments that make this test binary run its child role `role`
/// alone ([`child_role`]), for a command that runs it through another
/// (`setpriv`).
pub fn child_role_args(role: &str) -> [&str; 5] {
    [
        "--ignored",
        "--exact",
        role,
        "--nocapture",
        "--test-threads=1",
    ]
}

/// The setting `name` a child role's parent test gives it.
pub fn role_setting(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this is a child role, which the test that spawns it runs with \
             its settings; it checks nothing on its own"
        )
    })
}

/// Waits up to 15 seconds for `condition`.
pub fn eventually(what: &str, condition: impl FnMut() -> bool) {
    // Generous, for a loaded machine: a condition that holds returns at once.
    assert!(
        wait_until(Duration::from_secs(15), condition),
        "timed out waiting: {what}"
    );
}

/// Polls `condition` every 10 ms until it holds or `limit` has passed;
/// whether it held.
pub fn wait_until(limit: Duration, condition: impl FnMut() -> bool) -> bool {
    poll_until(limit, Duration::from_millis(10), condition)
}

/// Polls `condition` every `period` until it holds or `limit` has passed;
/// whether it held. For a condition that costs more to look at than the
/// moment it could be seen earlier saves.
pub fn poll_until(limit: Duration, period: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(period);
    }
}

/// How many fds `pid` has open.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc/PID/fd")
        .count()
}

/// The stdout of a child that must have succeeded; the assertion shows both
/// of its streams, under `what`.
pub fn expect_success(output: &std::process::Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The abstract socket names bound in this network namespace, without
/// their leading NUL, as `/proc/net/unix` lists them (`@name`).
pub fn bound_abstract_names() -> Vec<String> {
    std::fs::read_to_string("/proc/net/unix")
        .expect("read /proc/net/unix")
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(7))
        .filter_map(|path| path.strip_prefix('@'))
        .map(str::to_owned)
        .collect()
}

/// `bytes` in lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut text, b| {
        let _ = write!(text, "{b:02x}");
        text
    })
}

/// The bytes `text` spells in hex.
pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}
