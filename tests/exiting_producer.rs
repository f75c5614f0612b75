//! What a stock torch receiver can still read once its Rust sender is gone:
//! a producer (`tests/peers/exiting_producer.rs`) sends 60 batches and
//! exits, or is killed, while torch is still reading
//! (`compat/python/exiting_producer_receiver.py`). Every batch sent must
//! rebuild with its values, and nothing may be left behind.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value as Json;
use tensorshare_strategies::services::shm_manager::IN_FLIGHT_WAIT_ENV;

use support::{
    build_manager_executable, files_in, python_script, segments_of, test_python, wait_until,
};

/// The batches a producer sends.
const BATCHES: &str = "60";

/// Longer than the shared-memory manager's 2 s grace for the names of a
/// client gone without freeing them: a pause, counted from a sender's
/// exit, after which it has been gone for longer than that. Only the
/// `file_system` strategy has such a clock; the others' receivers pause
/// until their sender has sent everything (`sent 60`) or exited, and no
/// longer.
const PAST_THE_GRACE: &str = "2.5";

/// The line a producer prints once it has sent every batch, before it
/// waits for its receiver.
const SENT_EVERY_BATCH: &str = "sent 60";

/// Builds the producer once for this test binary, as
/// `support::tensorshare_exe` builds the command, into this test binary's
/// target directory, beside which the `file_system` strategy finds the
/// manager's executable.
fn producer() -> &'static Path {
    static PRODUCER: OnceLock<PathBuf> = OnceLock::new();
    PRODUCER.get_or_init(build_producer)
}

fn build_producer() -> PathBuf {
    build_manager_executable();
    let test_exe = std::env::current_exe().expect("the path of this test binary");
    let profile_dir = test_exe
        .parent()
        .and_then(Path::parent)
        .expect("a test binary in <target>/<profile>/deps");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut command = Command::new(cargo);
    command
        .args(["build", "--quiet", "--locked", "-p", "tensorshare"])
        .args(["--example", "exiting_producer", "--target-dir"])
        .arg(profile_dir.parent().expect("a target directory"));
    if profile_dir.ends_with("release") {
        command.arg("--release");
    }
    let status = command.stdin(Stdio::null()).status().expect("run cargo");
    assert!(
        status.success(),
        "building the producer failed: {command:?}"
    );
    profile_dir.join("examples").join("exiting_producer")
}

/// Runs the receiver with `options` against producers sharing by
/// `strategy` with `producer_args` after the batch count; one JSON outcome
/// a run. Fails with torch's words when a batch does not rebuild.
fn receive(python: &str, strategy: &str, options: &[&str], producer_args: &[&str]) -> Vec<Json> {
    receive_with_in_flight_wait(python, strategy, options, producer_args, None)
}

/// As [`receive`], the producers' managers keeping segments in flight for
/// `in_flight_wait` seconds once no client is left, when given.
fn receive_with_in_flight_wait(
    python: &str,
    strategy: &str,
    options: &[&str],
    producer_args: &[&str],
    in_flight_wait: Option<&str>,
) -> Vec<Json> {
    let producer = producer();
    let mut receiver = Command::new(python);
    if let Some(wait) = in_flight_wait {
        receiver.env(IN_FLIGHT_WAIT_ENV, wait);
    }
    let output = receiver
        .arg(python_script("exiting_producer_receiver.py"))
        .args(options)
        .arg("--")
        .arg(producer)
        .args([strategy, BATCHES])
        .args(producer_args)
        .stdin(Stdio::null())
        .output()
        .expect("start the receiver");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{strategy} with {options:?}: the receiver failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("an outcome line"))
        .collect()
}

/// Asserts that each run received all 60 batches and the end, and that its
/// producer exited cleanly after waiting for them.
fn assert_all_received(strategy: &str, runs: &[Json], expected_runs: usize) {
    assert_eq!(runs.len(), expected_runs, "{strategy}: {runs:?}");
    for (run, outcome) in runs.iter().enumerate() {
        assert_eq!(outcome["received"], 60, "{strategy} run {run}: {outcome}");
        assert_eq!(outcome["ended"], "none", "{strategy} run {run}: {outcome}");
        assert_eq!(outcome["producer"], 0, "{strategy} run {run}: {outcome}");
        assert_eq!(
            outcome["said"][0], "done",
            "{strategy} run {run}: {outcome}"
        );
    }
}

/// Asserts that each run's producer, killed once it sent batch 30, left
/// torch every batch it sent.
fn assert_sent_before_the_kill_received(strategy: &str, runs: &[Json], expected_runs: usize) {
    assert_eq!(runs.len(), expected_runs, "{strategy}: {runs:?}");
    for (run, outcome) in runs.iter().enumerate() {
        let received = outcome["received"].as_u64().expect("a count");
        assert!(received >= 30, "{strategy} run {run}: {outcome}");
        assert_eq!(outcome["ended"], "eof", "{strategy} run {run}: {outcome}");
        assert_eq!(outcome["producer"], -9, "{strategy} run {run}: {outcome}");
    }
}

/// Runs `tensorshare gc` over `dir` with no grace, as an operator
/// reclaiming what senders left, and asserts that it leaves nothing. Its
/// `/dev/shm` is an empty directory: the `file_system` tests beside it
/// have segments in flight whose senders are gone.
fn assert_gc_reclaims(dir: &Path) {
    let output = support::gc_without_segments([
        "--min-age".as_ref(),
        "0".as_ref(),
        "--memmap-dir".as_ref(),
        dir.as_os_str(),
    ]);
    support::expect_success(&output, "tensorshare gc");
    assert_eq!(files_in(dir), Vec::<PathBuf>::new(), "gc left files");
}

/// Asserts that no segment of the producers of `runs` outlives their
/// managers' idle exit.
fn assert_no_segments_left(runs: &[Json]) {
    let pids: Vec<u32> = runs
        .iter()
        .map(|outcome| outcome["pid"].as_u64().expect("a pid") as u32)
        .collect();
    let gone = wait_until(Duration::from_secs(20), || {
        pids.iter().all(|&pid| segments_of(pid).is_empty())
    });
    let left: Vec<String> = pids.iter().flat_map(|&pid| segments_of(pid)).collect();
    assert!(gone, "segments left behind: {left:?}");
}

#[test]
fn a_file_system_producer_that_exits_loses_no_batch_20_runs_in_a_row() {
    let Some(python) = test_python("a_file_system_producer_that_exits_loses_no_batch") else {
        return;
    };
    // torch pauses after its 20th batch until the producer, which sent
    // the last one without waiting for it, has been gone past the grace.
    let options = [
        "--runs",
        "20",
        "--pause-after",
        "20",
        "--until-exit",
        "--pause",
        PAST_THE_GRACE,
    ];
    let runs = receive(&python, "file_system", &options, &[]);
    assert_all_received("file_system", &runs, 20);
    assert_no_segments_left(&runs);
}

#[test]
fn a_memmap_producer_that_exits_loses_no_batch_20_runs_in_a_row() {
    let Some(python) = test_python("a_memmap_producer_that_exits_loses_no_batch") else {
        return;
    };
    let dir = tempfile::tempdir().expect("a memmap directory");
    let dir_arg = dir.path().to_str().expect("a UTF-8 path");
    // torch pauses after its 20th batch until the producer has sent the
    // last one and waits for torch to open the rest.
    let options = [
        "--runs",
        "20",
        "--pause-after",
        "20",
        "--until-said",
        SENT_EVERY_BATCH,
        "--pause",
        "0.2",
    ];
    let runs = receive(&python, "memmap", &options, &[dir_arg]);
    assert_all_received("memmap", &runs, 20);
    // `wait_until_fetched` saw every file opened: each producer removed its
    // files as it exited.
    assert_eq!(files_in(dir.path()), Vec::<PathBuf>::new());
}

#[test]
fn producers_that_exit_without_waiting_leave_their_batches_readable() {
    let Some(python) = test_python("producers_that_exit_without_waiting") else {
        return;
    };
    let options = [
        "--runs",
        "3",
        "--pause-after",
        "20",
        "--until-exit",
        "--pause",
        PAST_THE_GRACE,
    ];
    let runs = receive(&python, "file_system", &options, &["--no-wait"]);
    assert_all_received("file_system", &runs, 3);
    assert_no_segments_left(&runs);

    // The files not yet opened when the context ended stay for torch; only
    // gc removes them, the producers being gone. No clock runs for them:
    // torch reads on as soon as the producer has exited.
    let dir = tempfile::tempdir().expect("a memmap directory");
    let dir_arg = dir.path().to_str().expect("a UTF-8 path");
    let options = ["--runs", "3", "--pause-after", "20", "--until-exit"];
    let runs = receive(&python, "memmap", &options, &["--no-wait", dir_arg]);
    assert_all_received("memmap", &runs, 3);
    assert!(
        !files_in(dir.path()).is_empty(),
        "no file was left for torch"
    );
    assert_gc_reclaims(dir.path());
}

#[test]
fn a_file_system_producer_gone_before_torch_opened_anything_loses_no_batch() {
    let Some(python) = test_python("a_file_system_producer_gone_before_torch_opened_anything")
    else {
        return;
    };
    // torch has not opened a segment, so it is not yet a client of the
    // producer's manager, which has none left: only the segments' counts
    // say that messages are still to be read.
    let options = ["--runs", "3", "--read-after-exit", PAST_THE_GRACE];
    let runs = receive(&python, "file_system", &options, &[]);
    assert_all_received("file_system", &runs, 3);
    assert_no_segments_left(&runs);
}

#[test]
fn file_descriptor_and_bytes_producers_lose_no_batch_20_runs_in_a_row() {
    let Some(python) = test_python("file_descriptor_and_bytes_producers_lose_no_batch") else {
        return;
    };
    // A file_descriptor producer waits for every fetch: torch pauses until
    // it has sent everything and waits. A bytes message carries its
    // storages, so its producer, blocked on a full socket, can say nothing
    // until torch reads on: torch pauses a moment, the socket full.
    let runs_of = |until: &[&'static str]| {
        let mut options = vec!["--runs", "20", "--pause-after", "20"];
        options.extend_from_slice(until);
        options
    };
    for (strategy, options) in [
        (
            "file_descriptor",
            runs_of(&["--until-said", SENT_EVERY_BATCH, "--pause", "0.2"]),
        ),
        ("bytes", runs_of(&["--pause", "0.1"])),
    ] {
        let runs = receive(&python, strategy, &options, &[]);
        assert_all_received(strategy, &runs, 20);
    }
}

#[test]
fn a_receiver_slower_than_its_file_system_producer_reads_every_batch() {
    let Some(python) = test_python("a_receiver_slower_than_its_file_system_producer") else {
        return;
    };
    // 60 batches at 50 ms each: the producer is gone for most of them.
    let runs = receive(&python, "file_system", &["--each", "0.05"], &[]);
    assert_all_received("file_system", &runs, 1);
    assert_no_segments_left(&runs);
}

#[test]
fn what_a_sigkilled_producer_sent_still_rebuilds() {
    let Some(python) = test_python("what_a_sigkilled_producer_sent_still_rebuilds") else {
        return;
    };
    // Killed once it sent batch 30, its own counts never taken back; torch
    // reads on for 3 s, past the grace the manager gives a dead client's
    // names. A segment counted for a message the kill cut off is kept for
    // the in-flight wait, here 2 s, then goes with the manager.
    let options = ["--runs", "3", "--kill-after", "30", "--each", "0.1"];
    let runs = receive_with_in_flight_wait(&python, "file_system", &options, &[], Some("2"));
    assert_sent_before_the_kill_received("file_system", &runs, 3);
    assert_no_segments_left(&runs);

    // A killed memmap sender removes nothing: gc does, once nobody maps
    // the files. No clock runs for them: torch reads on at once.
    let dir = tempfile::tempdir().expect("a memmap directory");
    let dir_arg = dir.path().to_str().expect("a UTF-8 path");
    let options = ["--runs", "3", "--kill-after", "30"];
    let runs = receive(&python, "memmap", &options, &[dir_arg]);
    assert_sent_before_the_kill_received("memmap", &runs, 3);
    assert_gc_reclaims(dir.path());
}

/// Docker's and Podman's `/dev/shm` unless told otherwise.
const CONTAINER_SHM: &str = "64m";

/// A batch of 16 MiB: four fill a container's `/dev/shm`.
const CONTAINER_IMAGE: &str = "8,4,512,1024";

/// How a run in a container's `/dev/shm` ended: the receiver's outcome and
/// what was left in that `/dev/shm` once every process but the namespace's
/// shell had exited.
struct ContainerRun {
    outcome: Json,
    left: Vec<String>,
    stderr: String,
}

/// Runs stock torch holding its last 3 batches of 16 MiB against a
/// producer of 40 sharing by `strategy` (`default`: no strategy named),
/// both in a mount namespace of their own whose `/dev/shm` is a 64 MB
/// tmpfs, as in a container run without `--shm-size`; `None` where no
/// namespace can be made and none is required.
fn receive_in_a_container(python: &str, strategy: &str) -> Option<ContainerRun> {
    if !support::netns::mount_namespaces("a container's /dev/shm") {
        return None;
    }
    // The producer's manager unlinks what its clients left once they are
    // gone and its 2 s grace has passed: the listing waits for that, and
    // no longer, before the namespace (and its tmpfs) goes.
    let script = format!(
        "mount -t tmpfs -o size={CONTAINER_SHM} tmpfs /dev/shm || exit 97
         \"$@\"; status=$?
         for _ in $(seq 100); do [ -z \"$(ls -A /dev/shm)\" ] && break; sleep 0.1; done
         echo \"left $(ls -A /dev/shm | tr '\\n' ' ')\"
         exit $status"
    );
    let output = Command::new("unshare")
        .args(["--mount", "--pid", "--fork", "--mount-proc"])
        .args(["sh", "-c", &script, "sh", python])
        .arg(python_script("exiting_producer_receiver.py"))
        .args(["--image", CONTAINER_IMAGE, "--hold", "3", "--"])
        .arg(producer())
        .args([strategy, "40", "--image", CONTAINER_IMAGE])
        .stdin(Stdio::null())
        .output()
        .expect("unshare runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let mut lines = stdout.lines();
    let outcome = lines
        .next()
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| {
            panic!(
                "{strategy}: no outcome ({}):\n{stdout}\n{stderr}",
                output.status
            )
        });
    let left = lines
        .find_map(|line| line.strip_prefix("left"))
        .unwrap_or_else(|| panic!("{strategy}: no listing:\n{stdout}\n{stderr}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    Some(ContainerRun {
        outcome,
        left,
        stderr,
    })
}

#[test]
fn the_default_feeds_torch_through_a_containers_64_mb_dev_shm() {
    let Some(python) = test_python("the_default_feeds_torch_through_a_containers_64_mb_dev_shm")
    else {
        return;
    };
    let Some(run) = receive_in_a_container(&python, "default") else {
        return;
    };
    // Every batch, every element checked by torch, with 48 MiB held at once.
    let outcome = &run.outcome;
    assert_eq!(outcome["received"], 40, "{outcome}\n{}", run.stderr);
    assert_eq!(outcome["ended"], "none", "{outcome}");
    assert_eq!(outcome["producer"], 0, "{outcome}\n{}", run.stderr);
    assert_eq!(
        run.left,
        Vec::<String>::new(),
        "left in the container's /dev/shm"
    );

    // A strategy named is obeyed, and fails as it says: the segments do
    // not fit, and the error names the mount.
    let run = receive_in_a_container(&python, "file_system").expect("namespaces worked just now");
    let received = run.outcome["received"].as_u64().expect("a count");
    assert!(received < 40, "{}", run.outcome);
    assert_eq!(run.outcome["producer"], 1, "{}", run.outcome);
    assert!(
        run.stderr.contains("/dev/shm (64.0 MiB in all"),
        "the producer's error names the mount: {}",
        run.stderr
    );
    assert_eq!(
        run.left,
        Vec::<String>::new(),
        "left in the container's /dev/shm"
    );
}
