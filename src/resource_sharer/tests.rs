//! The resource sharer's server and client: Rust to Rust in one process
//! and across processes, fetched-once and withdrawal semantics, refused
//! clients (garbage, wrong authkeys, unknown keys, stalled peers),
//! shutdown, fd leak checks, and interoperation with CPython's
//! `multiprocessing.resource_sharer` in both directions (and with torch's
//! `_new_shared_fd_cpu` when torch is there).
//!
//! Cross-process and leak tests re-run this test binary with
//! `TENSORSHARE_SHARER_TEST_CHILD` set, so each child runs one entry point
//! alone and counts only its own fds.
//!
//! The CPython tests need an interpreter in `TENSORSHARE_TEST_PYTHON`.
//! Without it they print a notice and pass, unless
//! `TENSORSHARE_REQUIRE_INTEROP=1` (as `scripts/test` sets); then torch must
//! be importable too.

#[path = "../../tests/support/processes.rs"]
mod processes;
#[path = "../../tests/support/test_python.rs"]
mod test_python;

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tensorshare_compat::connection::{Dialect, client_handshake, write_message};
use tensorshare_compat::resource_sharer::MAX_REQUEST_LEN;
use tensorshare_strategies::file_descriptor::{FdSegment, FileDescriptorStrategy};
use tensorshare_strategies::{SharingStrategy, WritableSegment};

use super::registration::DupFdId;
use super::{
    FetchError, RegisterError, ResourceSharer, SharerOptions, SharerSocket, SharerStats, fetch_fd,
};
use processes::{eventually, hex, unhex};
use test_python::{interop_required, test_python};

/// The child role `entry` of this module by its name in the test binary,
/// which runs it by its full path: this module's, less the crate's name.
fn role_path(entry: &str) -> String {
    let (_crate, here) = module_path!()
        .split_once("::")
        .expect("a module inside the crate");
    format!("{here}::{entry}")
}

const AUTHKEY: &[u8] = b"resource sharer test authkey";
const TIMEOUT: Duration = Duration::from_secs(10);
const CHILD_ENV: &str = "TENSORSHARE_SHARER_TEST_CHILD";

/// A shared memory segment holding `contents`, and an fd for it to register.
fn shared_fd(contents: &[u8]) -> (FdSegment, OwnedFd) {
    let strategy = FileDescriptorStrategy;
    let mut segment = strategy.allocate(contents.len()).expect("allocate memfd");
    segment.as_bytes_mut().copy_from_slice(contents);
    let fd = strategy.export(&segment).expect("export fd");
    (segment, fd)
}

/// `(st_dev, st_ino)` and the first `len` bytes of the file behind `fd`.
fn identity_and_contents(fd: OwnedFd, len: usize) -> ((u64, u64), Vec<u8>) {
    let file = File::from(fd);
    let metadata = file.metadata().expect("fstat");
    let mut contents = vec![0; len];
    file.read_exact_at(&mut contents, 0).expect("pread");
    ((metadata.dev(), metadata.ino()), contents)
}

fn identity_of(segment: &FdSegment) -> (u64, u64) {
    let identity = segment.identity();
    (identity.dev, identity.ino)
}

fn stats_eventually(sharer: &ResourceSharer, what: &str, check: impl Fn(&SharerStats) -> bool) {
    eventually(what, || check(&sharer.stats()));
}

fn assert_not_served(result: Result<OwnedFd, FetchError>) {
    match result {
        Err(error @ FetchError::NotServed { .. }) => {
            assert!(
                error.to_string().contains("each DupFd can be fetched once"),
                "{error}"
            );
        }
        other => panic!("expected NotServed, got {other:?}"),
    }
}

#[test]
fn fetches_the_same_file_once_within_a_process() {
    let sharer = ResourceSharer::start(AUTHKEY).expect("start sharer");
    let (segment, fd) = shared_fd(b"twelve bytes");
    let registration = sharer.register(fd).expect("register");
    let id = registration.id().clone();
    assert_eq!(id.address.as_bytes(), sharer.address());
    assert!(registration.is_pending());

    let fetcher = thread::spawn(move || id.fetch(AUTHKEY, TIMEOUT));
    let fetched = fetcher.join().expect("fetch thread").expect("fetch");
    let (identity, contents) = identity_and_contents(fetched, 12);
    assert_eq!(identity, identity_of(&segment));
    assert_eq!(contents, b"twelve bytes");
    assert!(!registration.is_pending());

    assert_not_served(registration.id().fetch(AUTHKEY, TIMEOUT));
    // A key counts as served once its fd is on the way, after the fetcher
    // may already hold it.
    processes::wait_until(TIMEOUT, || sharer.stats().served == 1);
    let stats = sharer.stats();
    assert_eq!((stats.served, stats.unknown_key, stats.pending), (1, 1, 0));
}

/// Whether the sharer's abstract name is bound, as `/proc/net/unix` says.
fn is_bound(sharer: &ResourceSharer) -> bool {
    let name = sharer
        .socket_address()
        .as_abstract_name()
        .expect("an abstract address");
    let name = std::str::from_utf8(name).expect("an ASCII name");
    processes::bound_abstract_names()
        .iter()
        .any(|bound| bound == name)
}

/// A connection to the sharer's socket, whatever its kind.
fn connect(sharer: &ResourceSharer) -> UnixStream {
    let address = sharer.socket_address().to_socket_addr().expect("address");
    UnixStream::connect_addr(&address).expect("connect")
}

#[test]
fn listens_in_the_abstract_namespace_by_default() {
    let sharer = ResourceSharer::start(AUTHKEY).expect("start sharer");
    assert!(sharer.socket_path().is_none());
    let address = sharer.address();
    assert_eq!(address.first(), Some(&0), "a NUL starts an abstract name");
    let name = std::str::from_utf8(&address[1..]).expect("an ASCII name");
    let prefix = format!("tensorshare-sharer-{}-", std::process::id());
    let random = name.strip_prefix(&prefix).expect("named for this process");
    assert_eq!(random.len(), 16, "{name}");
    assert!(
        random
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        "{name}"
    );
    assert_eq!(sharer.address_str().as_bytes(), address);
    assert!(is_bound(&sharer));
    let other = ResourceSharer::start(AUTHKEY).expect("start another sharer");
    assert_ne!(other.address(), address, "names are unique");

    let (_segment, fd) = shared_fd(b"x");
    let registration = sharer.register(fd).expect("register");
    sharer.shutdown();
    // A child another test spawns at this moment holds a copy of the
    // socket until it execs.
    eventually("the name goes with the socket", || !is_bound(&sharer));
    assert!(
        !registration.is_pending(),
        "registered fds closed at shutdown"
    );
    assert_eq!(
        sharer.register(shared_fd(b"y").1).map(|_| ()),
        Err(RegisterError::ShutDown)
    );
    match registration.id().fetch(AUTHKEY, TIMEOUT) {
        Err(error @ FetchError::SharerGone { .. }) => {
            assert!(
                error.to_string().contains("sending process exited"),
                "{error}"
            );
        }
        other => panic!("expected SharerGone, got {other:?}"),
    }
}

#[test]
fn a_path_socket_lives_in_a_private_directory() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let parent = tempfile::tempdir().expect("tempdir");
    let options = SharerOptions::new().with_socket(SharerSocket::PathIn(parent.path().into()));
    let sharer = ResourceSharer::start_with(AUTHKEY, options).expect("start sharer");
    let path = sharer.socket_path().expect("a socket file").to_owned();
    assert_eq!(sharer.address(), path.as_os_str().as_encoded_bytes());
    let dir = path.parent().expect("socket dir").to_owned();
    assert_eq!(dir.parent(), Some(parent.path()));
    let dir_name = dir
        .file_name()
        .and_then(|name| name.to_str())
        .expect("dir name");
    let prefix = format!("tensorshare-sharer-{}-", std::process::id());
    assert!(
        dir_name.strip_prefix(&prefix).is_some_and(|r| r.len() == 8),
        "{dir_name}"
    );
    let socket_name = path
        .file_name()
        .and_then(|name| name.to_str())
        .expect("name");
    assert!(socket_name.starts_with("listener-"), "{socket_name}");
    let mode = std::fs::metadata(&dir)
        .expect("stat dir")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    assert!(
        std::fs::metadata(&path)
            .expect("stat socket")
            .file_type()
            .is_socket()
    );

    let (segment, fd) = shared_fd(b"by path");
    let registration = sharer.register(fd).expect("register");
    let fetched = registration.id().fetch(AUTHKEY, TIMEOUT).expect("fetch");
    assert_eq!(identity_and_contents(fetched, 7).0, identity_of(&segment));
    sharer.shutdown();
    assert!(!path.exists() && !dir.exists(), "socket and dir removed");
}

#[test]
fn dropping_the_last_arc_shuts_down() {
    let sharer = ResourceSharer::start(AUTHKEY).expect("start sharer");
    let name = sharer.address()[1..].to_vec();
    let bound = || {
        processes::bound_abstract_names()
            .iter()
            .any(|bound| bound.as_bytes() == name)
    };
    let registration = sharer
        .register(shared_fd(b"kept alive").1)
        .expect("register");
    drop(sharer);
    // The registration keeps the sharer serving.
    assert!(bound());
    let id = registration.id().clone();
    assert_eq!(
        identity_and_contents(id.fetch(AUTHKEY, TIMEOUT).expect("fetch"), 10).1,
        b"kept alive"
    );
    drop(registration);
    eventually("the last registration ends the sharer", || !bound());
}

#[test]
fn shutdown_is_prompt_even_when_the_socket_file_is_gone() {
    let parent = tempfile::tempdir().expect("tempdir");
    let options = SharerOptions::new().with_socket(SharerSocket::PathIn(parent.path().into()));
    let sharer = ResourceSharer::start_with(AUTHKEY, options).expect("start sharer");
    let path = sharer.socket_path().expect("a socket file").to_owned();
    std::fs::remove_file(&path).expect("remove socket");
    let dir = path.parent().expect("dir").to_owned();
    let start = Instant::now();
    drop(sharer);
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "took {:?}",
        start.elapsed()
    );
    assert!(!dir.exists());
}

#[test]
fn a_bad_socket_dir_is_an_error_that_says_what_to_do() {
    let file = tempfile::NamedTempFile::new().expect("a file");
    let options = SharerOptions::new().with_socket(SharerSocket::PathIn(file.path().into()));
    let error = ResourceSharer::start_with(AUTHKEY, options).expect_err("not a directory");
    let message = error.to_string();
    assert!(message.contains("TENSORSHARE_SHARER_DIR"), "{message}");
    assert!(message.contains("abstract namespace"), "{message}");

    let deep = tempfile::tempdir().expect("tempdir");
    let long = deep.path().join("d".repeat(100));
    std::fs::create_dir(&long).expect("a deep directory");
    let options = SharerOptions::new().with_socket(SharerSocket::PathIn(long.clone()));
    let error = ResourceSharer::start_with(AUTHKEY, options).expect_err("too long a path");
    assert!(error.to_string().contains("short path"), "{error}");
    assert_eq!(
        std::fs::read_dir(&long).expect("list").count(),
        0,
        "nothing left behind"
    );
}

/// Child entry point: connects to `SHARER_ADDRESS_HEX` and prints what the
/// sharer says before closing: nothing, for a process of another user.
#[test]
#[ignore = "a child role: a resource sharer test runs it"]
fn child_knock_entry() {
    assert_eq!(processes::role_setting(CHILD_ENV), "knock");
    let address = unhex(&std::env::var("SHARER_ADDRESS_HEX").expect("SHARER_ADDRESS_HEX"));
    let address = crate::connection::Address::from_bytes(&address).expect("an address");
    let mut stream =
        UnixStream::connect_addr(&address.to_socket_addr().expect("address")).expect("connect");
    let mut said = Vec::new();
    let _ = stream.read_to_end(&mut said);
    println!("READ [{}]", hex(&said));
}

#[test]
fn another_users_process_is_refused_before_the_handshake() {
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists());
    let (true, Some(setpriv)) = (nix::unistd::geteuid().is_root(), setpriv) else {
        // Through the handle, not eprintln!, so that test capture does not hide it.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: another_users_process_is_refused_before_the_handshake needs root and \
             setpriv"
        );
        return;
    };
    let sharer = ResourceSharer::start(AUTHKEY).expect("start sharer");
    let output = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(std::env::current_exe().expect("test binary"))
        .args(processes::child_role_args(&role_path("child_knock_entry")))
        .env(CHILD_ENV, "knock")
        .env("SHARER_ADDRESS_HEX", hex(sharer.address()))
        .output()
        .expect("run this test binary as nobody");
    processes::expect_success(&output, "the knock as nobody");
    assert_eq!(
        line_after(&output, "READ "),
        "[]",
        "the sharer said something"
    );
    stats_eventually(&sharer, "other_user", |stats| stats.other_user == 1);
    let stats = sharer.stats();
    assert_eq!(
        (stats.bad_handshake, stats.disconnected),
        (0, 0),
        "{stats:?}"
    );

    // Root's and this user's processes are served.
    let registration = sharer.register(shared_fd(b"ours").1).expect("register");
    registration.id().fetch(AUTHKEY, TIMEOUT).expect("fetch");
}

#[test]
fn dropped_registration_withdraws_the_fd() {
    let sharer = ResourceSharer::start(AUTHKEY).expect("start sharer");
    let registration = sharer
        .register(shared_fd(b"withdrawn").1)
        .expect("register");
    let id = registration.id().clone();
    drop(registration);
    assert_eq!(sharer.stats().pending, 0);
    assert_not_served(id.fetch(AUTHKEY, TIMEOUT));

    let (segment, fd) = shared_fd(b"back");
    let registration = sharer.register(fd).expect("register");
    let id = registration.id().clone();
    let returned = registration.withdraw().expect("unfetched fd comes back");
    assert_eq!(identity_and_contents(returned, 4).0, identity_of(&segment));
    assert_not_served(id.fetch(AUTHKEY, TIMEOUT));
}

#[test]
fn keep_until_fetched_outlives_the_guard() {
    let sharer = ResourceSharer::start(AUTHKEY).expect("start sharer");
    let first = sharer.register(shared_fd(b"first").1).expect("register");
    let second = sharer.register(shared_fd(b"second").1).expect("register");
    assert_eq!(second.id().key, first.id().key + 1, "keys count up");
    let id = first.keep_until_fetched();
    assert_eq!(sharer.stats().pending, 2);
    assert_eq!(
        identity_and_contents(id.fetch(AUTHKEY, TIMEOUT).expect("fetch"), 5).1,
        b"first"
    );
    drop(second);
    assert_eq!(sharer.stats().pending, 0);
}

#[test]
fn registers_from_many_threads() {
    let sharer = ResourceSharer::start(AUTHKEY).expect("start sharer");
    let (_segment, fd) = shared_fd(b"many");
    let fd = Arc::new(fd);
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let sharer = Arc::clone(&sharer);
            let fd = Arc::clone(&fd);
            thread::spawn(move || {
                (0..50)
                    .map(|_| {
                        let registration = sharer
                            .register(fd.try_clone().expect("dup"))
                            .expect("register");
                        registration.keep_until_fetched().key
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let keys: HashSet<i64> = handles
        .into_iter()
        .flat_map(|handle| handle.join().expect("register thread"))
        .collect();
    assert_eq!(keys.len(), 400);
    assert_eq!(sharer.stats().pending, 400);
    let fetchers: Vec<_> = keys
        .iter()
        .take(20)
        .map(|&key| {
            let address = sharer.address().to_vec();
            thread::spawn(move || fetch_fd(&address, key, AUTHKEY, TIMEOUT))
        })
        .collect();
    for fetcher in fetchers {
        fetcher.join().expect("fetch thread").expect("fetch");
    }
    assert_eq!(sharer.stats().pending, 380);
}

#[test]
fn refused_clients_are_counted_and_serving_goes_on() {
    let options = SharerOptions::new()
        .with_workers(1)
        // Long enough that no client meant to be refused for what it sends
        // times out first on a loaded machine.
        .with_connection_timeout(Duration::from_secs(2));
    let sharer = ResourceSharer::start_with(AUTHKEY, options).expect("start sharer");
    let address = sharer.address().to_vec();
    let good = sharer
        .register(shared_fd(b"still served").1)
        .expect("register");

    // Garbage instead of a handshake answer.
    let mut garbage = connect(&sharer);
    garbage
        .write_all(b"GET / HTTP/1.0\r\n\r\n")
        .expect("write garbage");
    let _ = garbage.read_to_end(&mut Vec::new());
    stats_eventually(&sharer, "bad_handshake", |stats| stats.bad_handshake == 1);

    // A wrong authkey.
    match fetch_fd(&address, good.id().key, b"another key", TIMEOUT) {
        Err(error @ FetchError::WrongAuthkey { .. }) => {
            let message = error.to_string();
            assert!(message.contains("current_process().authkey"), "{message}");
            assert!(message.contains("--authkey"), "{message}");
        }
        other => panic!("expected WrongAuthkey, got {other:?}"),
    }
    stats_eventually(&sharer, "wrong_authkey", |stats| stats.wrong_authkey == 1);

    // Authenticated, then requests that are not `(key, pid)`.
    let malformed: [&[u8]; 4] = [
        b"\x80\x04N.",                     // None, CPython's stop() message
        b"\x80\x02cposix\nsystem\nq\x00.", // a global
        b"\x80\x02K\x01K\x02K\x03\x87.",   // a 3-tuple
        b"not a pickle",
    ];
    for request in malformed {
        let mut stream = connect(&sharer);
        client_handshake(&mut stream, AUTHKEY, Dialect::Modern).expect("handshake");
        write_message(&mut stream, request).expect("send request");
        let _ = stream.read_to_end(&mut Vec::new());
    }
    // A request header claiming more than the cap.
    let mut stream = connect(&sharer);
    client_handshake(&mut stream, AUTHKEY, Dialect::Modern).expect("handshake");
    let claimed = u32::try_from(MAX_REQUEST_LEN + 1).expect("small");
    stream
        .write_all(&claimed.to_be_bytes())
        .expect("send header");
    let _ = stream.read_to_end(&mut Vec::new());
    stats_eventually(&sharer, "malformed_request", |stats| {
        stats.malformed_request == 5
    });

    // A key never registered.
    assert_not_served(fetch_fd(&address, 9999, AUTHKEY, TIMEOUT));
    assert_eq!(sharer.stats().unknown_key, 1);

    // A client that connects and says nothing holds the only worker until
    // the connection timeout, then the good client is served.
    let stalled = connect(&sharer);
    let start = Instant::now();
    let fd = good
        .id()
        .fetch(AUTHKEY, TIMEOUT)
        .expect("fetch after the stalled client");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(identity_and_contents(fd, 12).1, b"still served");
    drop(stalled);
    // A key counts as served once its fd is on the way, which may be after
    // the receiver has it.
    processes::wait_until(Duration::from_secs(5), || sharer.stats().served == 1);
    let stats = sharer.stats();
    assert_eq!(
        (stats.timed_out, stats.served, stats.pending),
        (1, 1, 0),
        "{stats:?}"
    );

    // A client that gives up before asking.
    drop(connect(&sharer));
    stats_eventually(&sharer, "disconnected", |stats| stats.disconnected == 1);
}

#[test]
fn fetch_errors_say_what_happened() {
    let missing = std::env::temp_dir().join("tensorshare-no-such-dir/sharer-none");
    match fetch_fd(
        missing.to_str().expect("utf-8").as_bytes(),
        1,
        AUTHKEY,
        TIMEOUT,
    ) {
        Err(FetchError::SharerGone { .. }) => {}
        other => panic!("expected SharerGone, got {other:?}"),
    }
    match fetch_fd(b"\0tensorshare-no-such-abstract-name", 1, AUTHKEY, TIMEOUT) {
        Err(FetchError::SharerGone { .. }) => {}
        other => panic!("expected SharerGone for an abstract name, got {other:?}"),
    }
    for address in [&b""[..], b"/tmp/a\0b", &[b'/'; 200][..]] {
        match fetch_fd(address, 1, AUTHKEY, TIMEOUT) {
            Err(FetchError::InvalidAddress { .. }) => {}
            other => panic!("expected InvalidAddress for {address:?}, got {other:?}"),
        }
    }
}

#[test]
fn fetch_times_out_on_a_silent_sharer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("silent");
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let start = Instant::now();
    let result = fetch_fd(
        path.to_str().expect("utf-8").as_bytes(),
        1,
        AUTHKEY,
        Duration::from_millis(200),
    );
    match result {
        Err(FetchError::TimedOut { .. }) => {}
        other => panic!("expected TimedOut, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(2));
    drop(listener);
}

/// Runs one entry point of this test binary in a child process.
fn run_child(entry: &str, role: &str, args: &[(&str, String)]) -> Output {
    let mut command = processes::child_role(&role_path(entry));
    command.env(CHILD_ENV, role);
    for (name, value) in args {
        command.env(name, value);
    }
    let output = command.output().expect("run child");
    processes::expect_success(&output, &format!("child {entry}"));
    output
}

/// What follows `prefix` on the first stdout line of `output` holding it
/// (the test harness may print its own text before it on the same line).
fn line_after(output: &Output, prefix: &str) -> String {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.split_once(prefix).map(|(_, rest)| rest))
        .map(str::to_owned)
        .unwrap_or_else(|| {
            panic!(
                "no {prefix:?} line in:\n{}\n--- stderr\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        })
}

/// Child entry point: fetches `SHARER_ADDRESS_HEX`/`SHARER_KEY` and prints what
/// it got.
#[test]
#[ignore = "a child role: a resource sharer test runs it"]
fn child_fetch_entry() {
    assert_eq!(processes::role_setting(CHILD_ENV), "fetch");
    let address = unhex(&std::env::var("SHARER_ADDRESS_HEX").expect("SHARER_ADDRESS_HEX"));
    let key: i64 = std::env::var("SHARER_KEY")
        .expect("SHARER_KEY")
        .parse()
        .expect("key");
    let len: usize = std::env::var("SHARER_LEN")
        .expect("SHARER_LEN")
        .parse()
        .expect("len");
    match fetch_fd(&address, key, AUTHKEY, TIMEOUT) {
        Ok(fd) => {
            let ((dev, ino), contents) = identity_and_contents(fd, len);
            println!("FETCHED {dev} {ino} {}", hex(&contents));
        }
        Err(error) => println!("ERROR {error}"),
    }
}

#[test]
fn fetches_across_processes() {
    let sharer = ResourceSharer::start(AUTHKEY).expect("start sharer");
    let (segment, fd) = shared_fd(b"across processes");
    let registration = sharer.register(fd).expect("register");
    let args = [
        (
            "SHARER_ADDRESS_HEX",
            hex(registration.id().address.as_bytes()),
        ),
        ("SHARER_KEY", registration.id().key.to_string()),
        ("SHARER_LEN", "16".to_owned()),
    ];
    let first = run_child("child_fetch_entry", "fetch", &args);
    let (dev, ino) = identity_of(&segment);
    assert_eq!(
        line_after(&first, "FETCHED "),
        format!("{dev} {ino} {}", hex(b"across processes"))
    );
    let second = run_child("child_fetch_entry", "fetch", &args);
    let error = line_after(&second, "ERROR ");
    assert!(error.contains("each DupFd can be fetched once"), "{error}");
}

fn open_fds() -> usize {
    processes::open_fds(std::process::id())
}

/// Child entry point: register/withdraw and register/fetch cycles leave the
/// fd count where it was.
#[test]
#[ignore = "a child role: a resource sharer test runs it"]
fn child_leak_entry() {
    assert_eq!(processes::role_setting(CHILD_ENV), "leak");
    let (_segment, fd) = shared_fd(b"leak check");
    let before_start = open_fds();
    let sharer = ResourceSharer::start(AUTHKEY).expect("start sharer");
    let serving = open_fds();

    for _ in 0..500 {
        drop(
            sharer
                .register(fd.try_clone().expect("dup"))
                .expect("register"),
        );
    }
    assert_eq!(open_fds(), serving, "after 500 register + drop unfetched");

    for _ in 0..200 {
        let registration = sharer
            .register(fd.try_clone().expect("dup"))
            .expect("register");
        drop(registration.id().fetch(AUTHKEY, TIMEOUT).expect("fetch"));
    }
    for key in 0..25 {
        assert!(fetch_fd(sharer.address(), 100_000 + key, AUTHKEY, TIMEOUT).is_err());
        assert!(fetch_fd(sharer.address(), 1, b"wrong", TIMEOUT).is_err());
    }
    // The worker closes its end just after the client has the fd.
    eventually("fds back to the serving count", || open_fds() == serving);
    assert_eq!(sharer.stats().served, 200);

    drop(sharer);
    assert_eq!(open_fds(), before_start, "after shutdown");
    println!("LEAKCHECK OK");
}

#[test]
fn no_fd_leaks() {
    let output = run_child("child_leak_entry", "leak", &[]);
    line_after(&output, "LEAKCHECK OK");
}

fn run_python(python: &str, script: &str, args: &[&str]) -> Output {
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run TENSORSHARE_TEST_PYTHON={python}: {e}"));
    assert!(
        output.status.success(),
        "python failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Stock CPython fetching from our sharer: `DupFd.detach()` (or torch's
/// `rebuild_storage_fd`, which detaches and maps the fd with
/// `UntypedStorage._new_shared_fd_cpu`), then a second detach of the same
/// id, which must fail. The address comes in hex, with the form its `_id`
/// holds it in: `bytes` (as a pickle carries an abstract name) or `str`
/// (a path, or an abstract name with its NUL, which `Client` takes too).
const PYTHON_DETACH: &str = r#"
import multiprocessing, os, sys
from multiprocessing.resource_sharer import DupFd

authkey, address, form, key, size, how = sys.argv[1:7]
multiprocessing.current_process().authkey = bytes.fromhex(authkey)
address = bytes.fromhex(address)
if form == "str":
    address = address.decode()
d = DupFd.__new__(DupFd)
d._id = (address, int(key))
if how == "torch":
    import torch
    from torch.multiprocessing.reductions import rebuild_storage_fd
    storage = rebuild_storage_fd(torch.UntypedStorage, d, int(size))
    print("DATA", bytes(storage.tolist()).hex(), flush=True)
else:
    fd = d.detach()
    st = os.fstat(fd)
    print("DATA", os.pread(fd, int(size), 0).hex(), flush=True)
    print("IDENTITY", st.st_dev, st.st_ino, flush=True)
    os.close(fd)
try:
    d.detach()
except Exception as error:
    print("SECOND", type(error).__name__, flush=True)
else:
    sys.exit("a second detach of the same DupFd succeeded")
"#;

fn python_fetches_from_rust(python: &str, how: &str, form: &str, options: SharerOptions) {
    let sharer = ResourceSharer::start_with(AUTHKEY, options).expect("start sharer");
    let contents = format!("fetched by CPython via {how}").into_bytes();
    let (segment, fd) = shared_fd(&contents);
    let registration = sharer.register(fd).expect("register");
    let id: &DupFdId = registration.id();
    let output = run_python(
        python,
        PYTHON_DETACH,
        &[
            &hex(AUTHKEY),
            &hex(id.address.as_bytes()),
            form,
            &id.key.to_string(),
            &contents.len().to_string(),
            how,
        ],
    );
    assert_eq!(line_after(&output, "DATA "), hex(&contents));
    if how == "pread" {
        let (dev, ino) = identity_of(&segment);
        assert_eq!(line_after(&output, "IDENTITY "), format!("{dev} {ino}"));
    }
    assert_eq!(line_after(&output, "SECOND "), "EOFError");
    processes::wait_until(TIMEOUT, || sharer.stats().served == 1);
    let stats = sharer.stats();
    assert_eq!(
        (stats.served, stats.unknown_key, stats.pending),
        (1, 1, 0),
        "{stats:?}"
    );
}

#[test]
fn cpython_fetches_from_rust_sharer() {
    let Some(python) = test_python(file!()) else {
        return;
    };
    // An abstract name as `bytes`, as torch's pickles carry it, and as
    // `str`; a path as `str`.
    python_fetches_from_rust(&python, "pread", "bytes", SharerOptions::new());
    python_fetches_from_rust(&python, "pread", "str", SharerOptions::new());
    let parent = tempfile::tempdir().expect("tempdir");
    let path = SharerOptions::new().with_socket(SharerSocket::PathIn(parent.path().into()));
    python_fetches_from_rust(&python, "pread", "str", path);
}

#[test]
fn torch_maps_an_fd_from_rust_sharer() {
    let Some(python) = test_python(file!()) else {
        return;
    };
    let has_torch = Command::new(&python)
        .args(["-c", "import torch"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !has_torch {
        assert!(
            !interop_required(),
            "TENSORSHARE_REQUIRE_INTEROP=1 but {python} has no torch"
        );
        let _ = writeln!(std::io::stderr(), "SKIPPED: {python} cannot import torch");
        return;
    }
    python_fetches_from_rust(&python, "torch", "bytes", SharerOptions::new());
}

/// Stock CPython serving: registers a memfd with `DupFd(fd)`, which starts
/// its resource sharer, prints `_id` and the authkey, and serves until its
/// stdin closes.
const PYTHON_SHARER: &str = r#"
import json, multiprocessing, os, sys
from multiprocessing.resource_sharer import DupFd

contents = bytes.fromhex(sys.argv[1])
fd = os.memfd_create("tensorshare-test")
os.write(fd, contents)
d = DupFd(fd)
st = os.fstat(fd)
os.close(fd)
address, key = d._id
print(json.dumps({
    "address": address,
    "key": key,
    "authkey": multiprocessing.current_process().authkey.hex(),
    "dev": st.st_dev,
    "ino": st.st_ino,
}), flush=True)
sys.stdin.read()
"#;

#[test]
fn rust_fetches_from_cpython_sharer() {
    let Some(python) = test_python(file!()) else {
        return;
    };
    let contents = b"served by CPython's resource sharer";
    let mut child = Command::new(&python)
        .args(["-c", PYTHON_SHARER, &hex(contents)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run TENSORSHARE_TEST_PYTHON={python}: {e}"));
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read python's line");
    let Ok(info) = serde_json::from_str::<serde_json::Value>(&line) else {
        let _ = child.kill();
        let output = child.wait_with_output().expect("wait");
        panic!(
            "python printed {line:?}; stderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let address = info["address"].as_str().expect("address");
    let key = info["key"].as_i64().expect("key");
    let authkey =
        crate::Authkey::from_hex(info["authkey"].as_str().expect("authkey")).expect("hex authkey");
    let authkey = authkey.as_bytes().to_vec();
    let identity = (
        info["dev"].as_u64().expect("dev"),
        info["ino"].as_u64().expect("ino"),
    );

    match fetch_fd(address.as_bytes(), key, b"not the authkey", TIMEOUT) {
        Err(FetchError::WrongAuthkey { .. }) => {}
        other => panic!("expected WrongAuthkey from CPython, got {other:?}"),
    }
    let fd = fetch_fd(address.as_bytes(), key, &authkey, TIMEOUT).expect("fetch from CPython");
    let (fetched_identity, fetched) = identity_and_contents(fd, contents.len());
    assert_eq!(fetched, contents);
    assert_eq!(fetched_identity, identity);
    assert_not_served(fetch_fd(address.as_bytes(), key, &authkey, TIMEOUT));

    drop(child.stdin.take());
    let status = child.wait().expect("wait for python");
    assert!(status.success(), "python sharer exited with {status}");
}
