//! Framing and handshake against real CPython `multiprocessing.connection`,
//! every version from 3.10 to 3.13 found on the machine.
//!
//! Interpreters come from `TENSORSHARE_CPYTHONS` (colon-separated paths,
//! each of which must work) or are discovered in pyenv and on `PATH`. With none found the tests print a
//! loud notice and pass, unless `TENSORSHARE_REQUIRE_INTEROP=1`.

#[path = "../../tests/support/test_python.rs"]
mod test_python;

use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tensorshare_compat::connection::{
    AuthError, Dialect, FramingError, HmacDigest, Rejection, client_handshake, read_message,
    server_handshake, write_message,
};
use test_python::interop_required;

/// How long one CPython process may live before it is killed.
const PYTHON_DEADLINE: Duration = Duration::from_secs(30);

const MAX_MESSAGE: usize = 8 << 20;

const LISTENER_PY: &str = r#"
import sys
from multiprocessing import AuthenticationError
from multiprocessing.connection import Listener
path, key = sys.argv[1], bytes.fromhex(sys.argv[2])
with Listener(address=path, family='AF_UNIX', authkey=key) as listener:
    try:
        conn = listener.accept()
    except AuthenticationError as e:
        print('AuthenticationError:', e, flush=True)
        sys.exit(3)
    count = 0
    while True:
        try:
            data = conn.recv_bytes()
        except EOFError:
            break
        conn.send_bytes(data[::-1])
        count += 1
    print('echoed', count, flush=True)
"#;

const CLIENT_PY: &str = r#"
import sys
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
path, key = sys.argv[1], bytes.fromhex(sys.argv[2])
try:
    conn = Client(path, family='AF_UNIX', authkey=key)
except AuthenticationError as e:
    print('AuthenticationError:', e, flush=True)
    sys.exit(3)
payloads = [b'', b'hello from python', bytes(range(256)) * 4096, b'\x01' * 20000]
for p in payloads:
    conn.send_bytes(p)
    echo = conn.recv_bytes()
    if echo != p[::-1]:
        print('bad echo for a message of', len(p), 'bytes', flush=True)
        sys.exit(4)
conn.close()
print('ok', len(payloads), flush=True)
"#;

/// One CPython interpreter under test.
#[derive(Clone, Debug)]
struct Interpreter {
    path: PathBuf,
    minor: u32,
}

impl Interpreter {
    fn version(&self) -> String {
        format!("3.{} ({})", self.minor, self.path.display())
    }

    /// The digest this version's `deliver_challenge` asks for, which our
    /// answer must use.
    fn challenge_digest(&self) -> HmacDigest {
        if self.minor >= 12 {
            HmacDigest::Sha256
        } else {
            HmacDigest::Md5
        }
    }

    /// The digest this version answers a challenge of `dialect` with.
    fn answers(&self, dialect: Dialect) -> HmacDigest {
        match dialect {
            Dialect::Modern if self.minor >= 12 => HmacDigest::Sha256,
            _ => HmacDigest::Md5,
        }
    }
}

fn interpreters() -> &'static [Interpreter] {
    static FOUND: OnceLock<Vec<Interpreter>> = OnceLock::new();
    FOUND.get_or_init(discover)
}

fn discover() -> Vec<Interpreter> {
    let explicit = std::env::var("TENSORSHARE_CPYTHONS")
        .ok()
        .filter(|l| !l.trim().is_empty());
    let candidates: Vec<PathBuf> = match &explicit {
        Some(list) => list
            .split(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect(),
        None => default_candidates(),
    };
    let mut found: Vec<Interpreter> = Vec::new();
    for path in candidates {
        let Some(minor) = python_minor(&path) else {
            // A named interpreter that does not run is a broken setup, not
            // a reason to skip.
            assert!(
                explicit.is_none(),
                "TENSORSHARE_CPYTHONS names {}, which is not a working CPython 3.10-3.13",
                path.display()
            );
            continue;
        };
        if !found.iter().any(|known| known.minor == minor) {
            found.push(Interpreter { path, minor });
        }
    }
    found.sort_by_key(|i| i.minor);
    found
}

fn default_candidates() -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    let pyenv_root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".pyenv")));
    let mut versions: Vec<PathBuf> = pyenv_root
        .and_then(|root| fs::read_dir(root.join("versions")).ok())
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    versions.sort();
    for minor in 10..=13 {
        let prefix = format!("3.{minor}.");
        for dir in &versions {
            let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name.starts_with(&prefix) {
                candidates.push(dir.join("bin").join(format!("python3.{minor}")));
            }
        }
        if let Some(path) = std::env::var_os("PATH") {
            for dir in std::env::split_paths(&path) {
                candidates.push(dir.join(format!("python3.{minor}")));
            }
        }
    }
    candidates.retain(|p| p.is_file());
    candidates
}

/// The minor version if `path` is a CPython 3.10 to 3.13 that runs.
fn python_minor(path: &Path) -> Option<u32> {
    let mut child = Command::new(path)
        .args([
            "-c",
            "import sys; print(sys.implementation.name, sys.version_info[1])",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + PYTHON_DEADLINE;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let output = child.wait_with_output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let mut words = text.split_whitespace();
    if words.next()? != "cpython" {
        return None;
    }
    let minor: u32 = words.next()?.parse().ok()?;
    (output.status.success() && (10..=13).contains(&minor)).then_some(minor)
}

/// The interpreters to test, or `None` after printing why there are none.
fn interpreters_or_skip(test: &str) -> Option<&'static [Interpreter]> {
    let found = interpreters();
    if found.is_empty() {
        assert!(
            !interop_required(),
            "{test}: no CPython 3.10-3.13 found and TENSORSHARE_REQUIRE_INTEROP=1; install one \
             or list interpreters in TENSORSHARE_CPYTHONS"
        );
        eprintln!("\n*** SKIPPED: no CPython 3.10-3.13 found ({test}) ***\n");
        return None;
    }
    let versions: Vec<String> = found.iter().map(Interpreter::version).collect();
    eprintln!("{test}: testing against CPython {}", versions.join(", "));
    Some(found)
}

/// A scratch directory for one scenario's socket and the Python output.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tsconn-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("sock")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A running Python script whose output goes to files in the scratch dir.
struct PythonRun {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    started: Instant,
    what: String,
}

/// How a Python run ended.
struct PythonExit {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl PythonRun {
    fn spawn(py: &Interpreter, script: &str, scratch: &Scratch, key: &[u8], what: &str) -> Self {
        let stdout = scratch.dir.join("stdout");
        let stderr = scratch.dir.join("stderr");
        let child = Command::new(&py.path)
            .arg("-c")
            .arg(script)
            .arg(scratch.socket())
            .arg(hex(key))
            .stdin(Stdio::null())
            .stdout(File::create(&stdout).unwrap())
            .stderr(File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: cannot start {}: {e}", py.path.display()));
        Self {
            child,
            stdout,
            stderr,
            started: Instant::now(),
            what: format!("{what} with CPython {}", py.version()),
        }
    }

    fn deadline(&self) -> Instant {
        self.started + PYTHON_DEADLINE
    }

    fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits for the exit, killing the process at the deadline.
    fn finish(mut self) -> PythonExit {
        let code = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status.code(),
                Ok(None) if Instant::now() < self.deadline() => {
                    thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!(
                        "{}: CPython did not exit within {PYTHON_DEADLINE:?}",
                        self.what
                    );
                }
            }
        };
        PythonExit {
            code,
            stdout: fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr: fs::read_to_string(&self.stderr).unwrap_or_default(),
        }
    }
}

impl Drop for PythonRun {
    fn drop(&mut self) {
        // Only reached with the child still running when a check panicked.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn with_timeouts(stream: UnixStream) -> UnixStream {
    stream.set_read_timeout(Some(PYTHON_DEADLINE)).unwrap();
    stream.set_write_timeout(Some(PYTHON_DEADLINE)).unwrap();
    stream
}

/// Connects to the Python listener once it is listening.
fn connect_to(python: &mut PythonRun, path: &Path) -> UnixStream {
    loop {
        match UnixStream::connect(path) {
            Ok(stream) => return with_timeouts(stream),
            Err(e) if Instant::now() < python.deadline() && !python.has_exited() => {
                assert!(
                    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused),
                    "{}: connect failed: {e}",
                    python.what
                );
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{}: the listener never came up: {e}", python.what),
        }
    }
}

/// Accepts the Python client's connection.
fn accept_from(python: &mut PythonRun, listener: &UnixListener) -> UnixStream {
    listener.set_nonblocking(true).unwrap();
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                return with_timeouts(stream);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                assert!(
                    Instant::now() < python.deadline() && !python.has_exited(),
                    "{}: the client never connected",
                    python.what
                );
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{}: accept failed: {e}", python.what),
        }
    }
}

fn payloads() -> Vec<Vec<u8>> {
    vec![
        Vec::new(),
        b"hello from rust".to_vec(),
        (0..1 << 20).map(|i: u32| (i % 253) as u8).collect(),
        vec![2u8; 20_000],
    ]
}

fn expect_success(exit: &PythonExit, what: &str, stdout: &str) {
    assert!(
        exit.code == Some(0) && exit.stdout.trim() == stdout,
        "{what}: CPython exited with {:?}, stdout {:?}, stderr:\n{}",
        exit.code,
        exit.stdout,
        exit.stderr
    );
}

fn expect_authentication_error(exit: &PythonExit, what: &str) {
    assert!(
        exit.code == Some(3) && exit.stdout.starts_with("AuthenticationError:"),
        "{what}: expected CPython to raise AuthenticationError; exit {:?}, stdout {:?}, \
         stderr:\n{}",
        exit.code,
        exit.stdout,
        exit.stderr
    );
}

#[test]
fn rust_client_against_python_listener() {
    let Some(pythons) = interpreters_or_skip("rust_client_against_python_listener") else {
        return;
    };
    let key = b"tensorshare interop key \x00\xff";
    for py in pythons {
        for dialect in [Dialect::Legacy, Dialect::Modern] {
            let scratch = Scratch::new();
            let what = format!("Rust client ({dialect:?}) to Python Listener");
            let mut python = PythonRun::spawn(py, LISTENER_PY, &scratch, key, &what);
            let mut stream = connect_to(&mut python, &scratch.socket());
            let digests = client_handshake(&mut stream, key, dialect)
                .unwrap_or_else(|e| panic!("{}: handshake failed: {e}", python.what));
            assert_eq!(
                digests.we_answered_with,
                py.challenge_digest(),
                "{}",
                python.what
            );
            assert_eq!(
                digests.peer_answered_with,
                py.answers(dialect),
                "{}",
                python.what
            );
            let sent = payloads();
            for payload in &sent {
                write_message(&mut stream, payload).unwrap();
                let echo = read_message(&mut stream, MAX_MESSAGE)
                    .unwrap_or_else(|e| panic!("{}: no echo: {e}", python.what));
                let reversed: Vec<u8> = payload.iter().rev().copied().collect();
                assert!(
                    echo == reversed,
                    "{}: wrong echo for {} bytes",
                    python.what,
                    payload.len()
                );
            }
            drop(stream);
            let what = python.what.clone();
            expect_success(&python.finish(), &what, &format!("echoed {}", sent.len()));
        }
    }
}

#[test]
fn python_client_against_rust_listener() {
    let Some(pythons) = interpreters_or_skip("python_client_against_rust_listener") else {
        return;
    };
    let key = b"another key";
    for py in pythons {
        for dialect in [Dialect::Legacy, Dialect::Modern] {
            let scratch = Scratch::new();
            let listener = UnixListener::bind(scratch.socket()).unwrap();
            let what = format!("Python Client to Rust listener ({dialect:?})");
            let mut python = PythonRun::spawn(py, CLIENT_PY, &scratch, key, &what);
            let mut stream = accept_from(&mut python, &listener);
            let digests = server_handshake(&mut stream, key, dialect)
                .unwrap_or_else(|e| panic!("{}: handshake failed: {e}", python.what));
            assert_eq!(
                digests.peer_answered_with,
                py.answers(dialect),
                "{}",
                python.what
            );
            assert_eq!(
                digests.we_answered_with,
                py.challenge_digest(),
                "{}",
                python.what
            );
            let mut sizes = Vec::new();
            loop {
                match read_message(&mut stream, MAX_MESSAGE) {
                    Ok(message) => {
                        sizes.push(message.len());
                        let reversed: Vec<u8> = message.iter().rev().copied().collect();
                        write_message(&mut stream, &reversed).unwrap();
                    }
                    Err(FramingError::Closed) => break,
                    Err(e) => panic!("{}: read failed: {e}", python.what),
                }
            }
            assert_eq!(sizes, [0, 17, 1 << 20, 20_000], "{}", python.what);
            let what = python.what.clone();
            expect_success(&python.finish(), &what, "ok 4");
        }
    }
}

#[test]
fn wrong_authkey_is_refused_both_ways() {
    let Some(pythons) = interpreters_or_skip("wrong_authkey_is_refused_both_ways") else {
        return;
    };
    for py in pythons {
        // Python listens with one key, Rust connects with another.
        let scratch = Scratch::new();
        let what = "Rust client with a wrong key to Python Listener";
        let mut python = PythonRun::spawn(py, LISTENER_PY, &scratch, b"python key", what);
        let mut stream = connect_to(&mut python, &scratch.socket());
        let error = client_handshake(&mut stream, b"rust key", Dialect::Modern).unwrap_err();
        assert!(
            matches!(
                error,
                AuthError::WrongAuthkey(Rejection::PeerRejectedOurDigest)
            ),
            "{}: {error:?}",
            python.what
        );
        assert!(error.to_string().contains("the authkeys differ"), "{error}");
        drop(stream);
        let what = python.what.clone();
        expect_authentication_error(&python.finish(), &what);

        // Rust listens with one key, Python connects with another.
        for dialect in [Dialect::Legacy, Dialect::Modern] {
            let scratch = Scratch::new();
            let listener = UnixListener::bind(scratch.socket()).unwrap();
            let what = format!("Python Client with a wrong key to Rust listener ({dialect:?})");
            let mut python = PythonRun::spawn(py, CLIENT_PY, &scratch, b"python key", &what);
            let mut stream = accept_from(&mut python, &listener);
            let error = server_handshake(&mut stream, b"rust key", dialect).unwrap_err();
            assert!(
                matches!(error, AuthError::WrongAuthkey(Rejection::PeerDigestWrong)),
                "{}: {error:?}",
                python.what
            );
            drop(stream);
            let what = python.what.clone();
            expect_authentication_error(&python.finish(), &what);
        }
    }
}
