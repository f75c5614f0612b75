//! `tensorshare doctor` against limits each test sets itself: `ulimit -n`
//! in the shell that runs the command, a tmpfs of a chosen size over
//! /dev/shm and over the temporary directory in a mount namespace of the
//! test's own (with a PID namespace, so that /proc shows only its
//! processes), and a logind.conf under a root of its own.
//!
//! Making namespaces needs root: without it these tests say so and pass,
//! unless `TENSORSHARE_REQUIRE_NETNS=1` (which `scripts/test` sets when it
//! runs as root) makes that a failure.

mod support;

use std::process::Command;

use serde_json::Value as Json;

/// What one run of the command gave: its exit status and its findings.
struct Run {
    code: Option<i32>,
    findings: Vec<Json>,
    stderr: String,
}

impl Run {
    fn finding(&self, check: &str) -> &Json {
        self.findings
            .iter()
            .find(|finding| finding["check"] == check)
            .unwrap_or_else(|| panic!("no {check} finding in {:?}", self.findings))
    }

    /// The finding `check` has `status`, and a fix that says `fix_words`.
    /// The detail of the finding of `check`.
    fn detail(&self, check: &str) -> &str {
        self.finding(check)["detail"].as_str().unwrap_or_default()
    }

    fn expect(&self, check: &str, status: &str, fix_words: &[&str]) {
        let finding = self.finding(check);
        assert_eq!(finding["status"], status, "{finding}");
        let fix = finding["fix"].as_str().unwrap_or_default();
        for words in fix_words {
            assert!(
                fix.contains(words),
                "{check}'s fix lacks {words:?}: {finding}"
            );
        }
    }
}

/// A machine as a test sets it up.
struct Setup<'a> {
    shm_size: &'a str,
    open_files: u32,
    open_files_hard: u32,
    logind_conf: Option<&'a str>,
    lingering: Option<&'a str>,
    uid: Option<u32>,
    before: &'a str,
    args: &'a [&'a str],
}

impl Default for Setup<'_> {
    /// Healthy: a roomy /dev/shm and temporary directory, plenty of open
    /// files, logind told to keep segments.
    fn default() -> Self {
        Setup {
            shm_size: "8g",
            open_files: roomy_open_files(),
            open_files_hard: roomy_open_files(),
            logind_conf: Some("[Login]\nRemoveIPC=no\n"),
            lingering: None,
            uid: None,
            before: "",
            args: &[],
        }
    }
}

/// Open files a healthy setup allows: 65536, or this process's hard limit
/// when lower (raising it needs a capability a container may lack).
fn roomy_open_files() -> u32 {
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .expect("the open-file limit");
    u32::try_from(hard.min(65536)).expect("at most 65536")
}

/// Runs `tensorshare doctor --json` as `setup` says; `None` when no
/// namespace can be made here and none is required.
fn doctor(test: &str, setup: &Setup) -> Option<Run> {
    let exe = support::tensorshare_exe();
    if !support::netns::mount_namespaces(test) {
        return None;
    }
    let root = tempfile::tempdir().expect("a temporary root");
    let systemd = root.path().join("etc/systemd");
    std::fs::create_dir_all(&systemd).expect("etc/systemd in the root");
    if let Some(conf) = setup.logind_conf {
        std::fs::write(systemd.join("logind.conf"), conf).expect("logind.conf");
    }
    if let Some(user) = setup.lingering {
        let linger = root.path().join("var/lib/systemd/linger");
        std::fs::create_dir_all(&linger).expect("the linger directory");
        std::fs::write(linger.join(user), "").expect("a linger file");
    }
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let as_user = match setup.uid {
        Some(uid) => format!("setpriv --reuid={uid} --regid={uid} --clear-groups "),
        None => String::new(),
    };
    // The root is copied onto a tmpfs of the namespace's own at /mnt,
    // readable by every user: the test's temporary directory may be
    // private to root (scripts/test's is), and a doctor run as another user
    // must read the root as it reads `/`.
    let script = format!(
        "set -e; mount -t tmpfs -o size={shm} tmpfs /dev/shm; \
         mount -t tmpfs -o size=4g,mode=1777 tmpfs \"$TMPDIR\"; \
         mount -t tmpfs -o size=16m,mode=0755 tmpfs /mnt; \
         cp -a \"$TENSORSHARE_DOCTOR_ROOT/.\" /mnt; chmod -R a+rX /mnt; \
         export TENSORSHARE_DOCTOR_ROOT=/mnt; \
         ulimit -n {hard}; ulimit -S -n {files}; {before}\n exec {as_user}\"$0\" doctor --json \"$@\"",
        shm = setup.shm_size,
        files = setup.open_files,
        hard = setup.open_files_hard,
        before = setup.before,
    );
    let output = Command::new("unshare")
        .args([
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
            &script,
        ])
        .arg(exe)
        .args(setup.args)
        .env("TMPDIR", tmp.path())
        .env("TENSORSHARE_DOCTOR_ROOT", root.path())
        .output()
        .expect("unshare runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let findings: Vec<Json> = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{test}: not a JSON array ({err}); stderr: {stderr}"));
    Some(Run {
        code: output.status.code(),
        findings,
        stderr,
    })
}

#[test]
fn a_healthy_setup_warns_of_nothing() {
    let Some(run) = doctor("a_healthy_setup_warns_of_nothing", &Setup::default()) else {
        return;
    };
    let unwell: Vec<_> = run
        .findings
        .iter()
        .filter(|finding| finding["status"] != "ok")
        .collect();
    assert!(unwell.is_empty(), "{unwell:?}");
    assert_eq!(run.findings.len(), 10, "{:?}", run.findings);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

#[test]
fn a_container_default_dev_shm_warns_with_the_shm_size_fix() {
    let setup = Setup {
        shm_size: "64m",
        ..Setup::default()
    };
    let Some(run) = doctor("container_default_dev_shm", &setup) else {
        return;
    };
    run.expect("dev_shm", "warn", &["--shm-size=8g", "--ipc=host"]);
    assert!(run.detail("dev_shm").contains("64 MB"));
    // What the default does about it: segments within 48 MiB, then memfds.
    let placement = run.detail("default_placement");
    assert!(
        placement.contains("named segments for the next 48 MiB")
            && placement.contains("free of 64 MiB")
            && placement.contains("memfds past that"),
        "{placement}"
    );
    assert_eq!(
        run.code,
        Some(0),
        "a warning alone does not fail: {}",
        run.stderr
    );
}

#[test]
fn a_low_open_file_limit_warns_to_raise_ulimit() {
    let setup = Setup {
        open_files: 256,
        ..Setup::default()
    };
    let Some(run) = doctor("low_open_file_limit", &setup) else {
        return;
    };
    run.expect(
        "open_files",
        "warn",
        &["raise `ulimit -n` to at least 4096"],
    );
    let hard_too = Setup {
        open_files_hard: 1024,
        ..setup
    };
    let run =
        doctor("low_hard_open_file_limit", &hard_too).expect("namespaces worked a moment ago");
    run.expect(
        "open_files",
        "warn",
        &[
            "raise the hard limit to at least 4096",
            "--ulimit nofile=4096",
        ],
    );
}

#[test]
fn remove_ipc_warns_for_a_regular_user_unless_they_linger() {
    let removes = Setup {
        logind_conf: Some("[Login]\nRemoveIPC=no\n#RemoveIPC=no\nRemoveIPC=yes\n"),
        uid: Some(4242),
        ..Setup::default()
    };
    let Some(run) = doctor("remove_ipc_yes", &removes) else {
        return;
    };
    run.expect(
        "remove_ipc",
        "warn",
        &[
            "set `RemoveIPC=no` in /etc/systemd/logind.conf",
            "loginctl enable-linger 4242",
        ],
    );
    let placement = run.detail("default_placement");
    assert!(
        placement.starts_with("memfds for every storage (RemoveIPC=yes"),
        "{placement}"
    );
    let default = Setup {
        logind_conf: None,
        ..removes
    };
    let run = doctor("remove_ipc_default", &default).expect("namespaces worked a moment ago");
    run.expect("remove_ipc", "warn", &["RemoveIPC=no"]);
    let lingers = Setup {
        lingering: Some("4242"),
        ..default
    };
    let run = doctor("remove_ipc_lingering", &lingers).expect("namespaces worked a moment ago");
    run.expect("remove_ipc", "ok", &[]);
    let placement = run.detail("default_placement");
    assert!(placement.starts_with("named segments"), "{placement}");
}

#[test]
fn a_leaked_segment_warns_to_run_gc() {
    // No process has pid 999999 in the test's fresh PID namespace; gc,
    // and so the doctor, leave alone what changed (ctime) under 5 s ago.
    let setup = Setup {
        before: "printf 0123456789 > /dev/shm/torch_999999_1_0; sleep 6;",
        args: &[],
        ..Setup::default()
    };
    let Some(run) = doctor("leaked_segment", &setup) else {
        return;
    };
    run.expect("leaked_segments", "warn", &["tensorshare gc"]);
    assert!(
        run.finding("leaked_segments")["detail"]
            .as_str()
            .unwrap_or_default()
            .starts_with("1 leaked")
    );
}

#[test]
fn a_planned_load_names_the_limit_it_hits_first() {
    let shm_too_small = Setup {
        shm_size: "2g",
        args: &[
            "--strategy",
            "file_system",
            "--tensors",
            "10",
            "--bytes",
            "3GiB",
        ],
        ..Setup::default()
    };
    let Some(run) = doctor("planned_load_shm", &shm_too_small) else {
        return;
    };
    run.expect("planned_load", "fail", &["/dev/shm", "--shm-size"]);
    assert_eq!(run.code, Some(1), "a failed check exits 1: {}", run.stderr);

    let fds_too_few = Setup {
        open_files: 1024,
        open_files_hard: 1024,
        args: &[
            "--strategy",
            "file_descriptor",
            "--tensors",
            "5000",
            "--bytes",
            "1000",
        ],
        ..Setup::default()
    };
    let run = doctor("planned_load_fds", &fds_too_few).expect("namespaces worked a moment ago");
    run.expect(
        "planned_load",
        "fail",
        &["raise `ulimit -n` to at least 5256"],
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);

    let fits = Setup {
        args: &[
            "--strategy",
            "file_system",
            "--tensors",
            "100",
            "--bytes",
            "1000000",
        ],
        ..Setup::default()
    };
    let run = doctor("planned_load_fits", &fits).expect("namespaces worked a moment ago");
    run.expect("planned_load", "ok", &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

/// The library gives the same checks an embedding program logs at start.
#[test]
fn the_library_checks_this_machine() {
    let findings = tensorshare::doctor::check();
    assert_eq!(findings.len(), 10, "{findings:?}");
    for finding in &findings {
        assert_eq!(
            finding.fix.is_some(),
            finding.status != tensorshare::doctor::Status::Ok,
            "{finding}"
        );
    }
}
