//! `multiprocessing.connection` endpoints: Rust to Rust over paths and
//! abstract names, refusals (wrong authkeys, silent peers, oversized
//! messages), socket file cleanup, and interoperation with CPython's
//! `Listener` and `Client`.
//!
//! The CPython tests need an interpreter in `TENSORSHARE_TEST_PYTHON` (any
//! CPython 3.8+; no torch). Without it they print a notice and pass, unless
//! `TENSORSHARE_REQUIRE_INTEROP=1`, as `scripts/test` sets.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tensorshare::connection::Address;
use tensorshare::connection::{
    Client, Connection, ConnectionError, ConnectionOptions, Dialect, Listener,
};
use tensorshare::{Authkey, Registry, Value};
use tensorshare_compat::connection::{AuthError, Rejection};

use support::{test_python, unique_address};

/// `pickle.dumps(7, protocol=4)`.
const PICKLED_SEVEN: &[u8] = b"\x80\x04K\x07.";

fn key(hex: &str) -> Authkey {
    Authkey::from_hex(hex).expect("authkey hex")
}

/// Accepts one connection in a thread and runs `serve` on it.
fn serve_one<T: Send + 'static>(
    listener: Listener,
    serve: impl FnOnce(Connection) -> T + Send + 'static,
) -> thread::JoinHandle<(Listener, T)> {
    thread::spawn(move || {
        let connection = listener.accept().expect("accept");
        let result = serve(connection);
        (listener, result)
    })
}

fn echo_round_trip(address: &Address) {
    let authkey = Authkey::random().expect("random authkey");
    let listener =
        Listener::bind(address, &authkey, ConnectionOptions::default()).expect("bind listener");
    let server = serve_one(listener, |mut connection| {
        let mut buf = Vec::new();
        while connection.recv_bytes_into(&mut buf).is_ok() {
            connection.send_bytes(&buf).expect("echo");
        }
    });
    let mut client =
        Client::connect(address, &authkey, ConnectionOptions::default()).expect("connect");
    for message in [&b"hello"[..], b"", PICKLED_SEVEN] {
        client.send_bytes(message).expect("send");
        assert_eq!(client.recv_bytes().expect("receive"), message);
    }
    drop(client);
    server.join().expect("server thread");
}

#[test]
fn rust_to_rust_over_a_path() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let address = Address::path(dir.path().join("echo.sock")).expect("path address");
    echo_round_trip(&address);
}

#[test]
fn rust_to_rust_over_an_abstract_name() {
    echo_round_trip(&unique_address("connection"));
}

#[test]
fn rust_to_rust_in_a_private_directory() {
    let authkey = Authkey::random().expect("random authkey");
    let listener = Listener::bind_in_private_dir(&authkey, ConnectionOptions::default())
        .expect("bind in a private directory");
    let address = listener.address().clone();
    let path = address.as_path().expect("a path").to_path_buf();
    let dir = path.parent().expect("a directory").to_path_buf();
    let server = serve_one(listener, |mut connection| {
        connection.recv_bytes().expect("receive")
    });
    let mut client =
        Client::connect(&address, &authkey, ConnectionOptions::default()).expect("connect");
    client.send_bytes(b"private").expect("send");
    let (listener, received) = server.join().expect("server thread");
    assert_eq!(received, b"private");
    drop(listener);
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

#[test]
fn large_and_empty_messages_in_both_directions() {
    let address = unique_address("connection");
    let authkey = Authkey::random().expect("random authkey");
    let listener =
        Listener::bind(&address, &authkey, ConnectionOptions::default()).expect("bind listener");
    let large: Vec<u8> = (0..3 * 1024 * 1024).map(|i: u32| (i % 251) as u8).collect();
    let expected = large.clone();
    let server = serve_one(listener, move |mut connection| {
        let mut buf = Vec::new();
        assert_eq!(
            connection.recv_bytes_into(&mut buf).expect("large"),
            expected.len()
        );
        assert!(buf == expected, "the 3 MiB message arrived changed");
        assert_eq!(connection.recv_bytes_into(&mut buf).expect("empty"), 0);
        assert!(buf.is_empty());
        connection.send_bytes(&expected).expect("send large back");
        connection.send_bytes(b"").expect("send empty back");
    });
    let mut client =
        Client::connect(&address, &authkey, ConnectionOptions::default()).expect("connect");
    client.send_bytes(&large).expect("send large");
    client.send_bytes(b"").expect("send empty");
    assert!(client.recv_bytes().expect("large back") == large);
    assert_eq!(client.recv_bytes().expect("empty back"), b"");
    server.join().expect("server thread");
    assert!(matches!(client.recv_bytes(), Err(ConnectionError::Closed)));
}

#[test]
fn wrong_authkey_is_refused_and_the_listener_keeps_serving() {
    for dialect in [Dialect::Modern, Dialect::Legacy] {
        let address = unique_address("connection");
        let options = ConnectionOptions::default().with_dialect(dialect);
        let right = key("0123456789abcdef");
        let wrong = key("fedcba9876543210");
        let listener = Listener::bind(&address, &right, options).expect("bind listener");
        let server = thread::spawn(move || {
            let refused = listener.accept().expect_err("a wrong key must be refused");
            let mut accepted = listener.accept().expect("the next client is served");
            let message = accepted.recv_bytes().expect("receive");
            (refused, message)
        });

        let client_error = Client::connect(&address, &wrong, options)
            .expect_err("the listener must refuse a wrong key");
        assert!(
            matches!(
                client_error,
                ConnectionError::Auth {
                    cause: AuthError::WrongAuthkey(Rejection::PeerRejectedOurDigest),
                    ..
                }
            ),
            "{client_error:?}"
        );
        assert!(client_error.is_handshake_failure());
        let shown = client_error.to_string();
        assert!(
            shown.contains("authkeys differ") && shown.contains("same key"),
            "{shown}"
        );

        let mut good = Client::connect(&address, &right, options).expect("right key");
        good.send_bytes(b"after").expect("send");
        let (refused, message) = server.join().expect("server thread");
        assert!(
            matches!(
                refused,
                ConnectionError::Auth {
                    cause: AuthError::WrongAuthkey(Rejection::PeerDigestWrong),
                    ..
                }
            ),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("authkeys differ"), "{refused}");
        assert_eq!(message, b"after");
    }
}

#[test]
fn a_client_refuses_a_listener_with_another_key() {
    // The listener holds the wrong key this time: the client's own check
    // (the second half of the handshake) must not be skipped either.
    let address = unique_address("connection");
    let listener =
        Listener::bind(&address, &key("aa"), ConnectionOptions::default()).expect("bind listener");
    let server = thread::spawn(move || listener.accept().map(|_| ()));
    let error = Client::connect(&address, &key("bb"), ConnectionOptions::default())
        .expect_err("different keys");
    assert!(error.to_string().contains("authkeys differ"), "{error}");
    assert!(server.join().expect("server thread").is_err());
}

#[test]
fn empty_authkeys_still_authenticate() {
    let address = unique_address("connection");
    let empty = Authkey::new(Vec::new());
    let listener =
        Listener::bind(&address, &empty, ConnectionOptions::default()).expect("bind listener");
    let server = thread::spawn(move || {
        let refused = listener.accept().map(|_| ());
        let accepted = listener.accept().map(|_| ());
        (refused, accepted)
    });
    // Not "00": HMAC pads keys with zero bytes, so b"" and b"\0" are one key
    // to CPython as well.
    assert!(Client::connect(&address, &key("01"), ConnectionOptions::default()).is_err());
    Client::connect(&address, &empty, ConnectionOptions::default()).expect("same empty key");
    let (refused, accepted) = server.join().expect("server thread");
    assert!(refused.is_err_and(|e| e.is_handshake_failure()));
    accepted.expect("the empty key matches itself");
}

#[test]
fn a_silent_peer_hits_the_handshake_timeout() {
    let address = unique_address("connection");
    let authkey = Authkey::random().expect("random authkey");
    // The good client after the silent one has as long: enough for a
    // loaded machine.
    let timeout = Duration::from_secs(1);
    let options = ConnectionOptions::default().with_handshake_timeout(timeout);
    let listener = Listener::bind(&address, &authkey, options).expect("bind listener");
    let server = thread::spawn(move || {
        let started = Instant::now();
        let refused = listener.accept().expect_err("a silent peer must time out");
        let waited = started.elapsed();
        let served = listener.accept().map(|_| ());
        (refused, waited, served)
    });
    let socket = address.to_socket_addr().expect("socket address");
    let silent = UnixStream::connect_addr(&socket).expect("raw connect");
    // Read the challenge and answer nothing; the connection stays open.
    let mut challenge = [0u8; 64];
    let _ = (&silent).read(&mut challenge);
    thread::sleep(timeout * 2);
    Client::connect(&address, &authkey, ConnectionOptions::default()).expect("next client");
    let (refused, waited, served) = server.join().expect("server thread");
    assert!(
        matches!(refused, ConnectionError::HandshakeTimeout { timeout: t, .. } if t == timeout),
        "{refused:?}"
    );
    assert!(refused.is_handshake_failure());
    assert!(
        refused.to_string().contains("handshake_timeout"),
        "{refused}"
    );
    assert!(
        waited >= timeout && waited < timeout * 10,
        "waited {waited:?}"
    );
    served.expect("the listener keeps serving after a timeout");
    drop(silent);
}

#[test]
fn a_trickling_peer_cannot_stretch_the_handshake() {
    // The deadline covers the whole handshake, not each read: one byte every
    // 100 ms would otherwise keep a 300 ms timeout from ever firing.
    let address = unique_address("connection");
    let timeout = Duration::from_millis(300);
    let options = ConnectionOptions::default().with_handshake_timeout(timeout);
    let listener = Listener::bind(&address, &key("00"), options).expect("bind listener");
    let server = thread::spawn(move || {
        let started = Instant::now();
        let refused = listener.accept().map(|_| ());
        (refused, started.elapsed())
    });
    let socket = address.to_socket_addr().expect("socket address");
    let mut trickler = UnixStream::connect_addr(&socket).expect("raw connect");
    let mut challenge = [0u8; 64];
    let _ = trickler.read(&mut challenge);
    for byte in [0u8, 0, 0, 20].into_iter().chain([b'x'; 20]) {
        if trickler.write_all(&[byte]).is_err() {
            break;
        }
        thread::sleep(Duration::from_millis(100));
        if server.is_finished() {
            break;
        }
    }
    let (refused, waited) = server.join().expect("server thread");
    assert!(
        matches!(refused, Err(ConnectionError::HandshakeTimeout { .. })),
        "{refused:?}"
    );
    assert!(waited < timeout * 4, "the handshake lasted {waited:?}");
}

#[test]
fn a_client_times_out_on_a_silent_listener() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("silent.sock");
    // A plain socket that accepts (through the kernel's queue) and never speaks.
    let _silent = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let address = Address::path(&path).expect("address");
    let timeout = Duration::from_millis(200);
    let options = ConnectionOptions::default().with_handshake_timeout(timeout);
    let error = Client::connect(&address, &key("00"), options).expect_err("must time out");
    assert!(
        matches!(error, ConnectionError::HandshakeTimeout { .. }),
        "{error:?}"
    );
}

#[test]
fn socket_file_is_removed_on_drop_but_only_if_still_ours() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("owned.sock");
    let address = Address::path(&path).expect("address");
    let authkey = key("00");

    let listener =
        Listener::bind(&address, &authkey, ConnectionOptions::default()).expect("bind listener");
    let file_type = std::fs::symlink_metadata(&path)
        .expect("socket file")
        .file_type();
    assert!(file_type.is_socket());
    drop(listener);
    assert!(!path.exists(), "the socket file is left behind");

    // A second bind on an existing path is refused with advice.
    let first =
        Listener::bind(&address, &authkey, ConnectionOptions::default()).expect("bind again");
    let taken = Listener::bind(&address, &authkey, ConnectionOptions::default())
        .expect_err("the path is taken");
    assert!(taken.to_string().contains("stale socket file"), "{taken}");

    // Someone removes our file and binds their own: dropping ours must not
    // remove theirs.
    std::fs::remove_file(&path).expect("remove the first socket file");
    let second = Listener::bind(&address, &authkey, ConnectionOptions::default()).expect("rebind");
    drop(first);
    assert!(
        path.exists(),
        "dropping the first listener removed the second's file"
    );
    drop(second);
    assert!(!path.exists());
}

#[test]
fn a_length_above_the_limit_is_refused_without_allocating() {
    let options = ConnectionOptions::default();
    for (header, claimed) in [
        // 2^62 bytes in the 8-byte form: allocating it would abort the test.
        (
            [&[0xff, 0xff, 0xff, 0xff][..], &(1u64 << 62).to_be_bytes()].concat(),
            1u64 << 62,
        ),
        // One byte above the default 1 GiB limit.
        (((1u32 << 30) + 1).to_be_bytes().to_vec(), (1u64 << 30) + 1),
    ] {
        let (ours, mut theirs) = UnixStream::pair().expect("socket pair");
        let mut connection = Connection::from_stream(ours, options);
        theirs.write_all(&header).expect("write header");
        let error = connection.recv_bytes().expect_err("above the limit");
        assert!(
            matches!(error, ConnectionError::MessageTooLarge { claimed: c, limit }
                if c == claimed && limit == 1 << 30),
            "{error:?}"
        );
        assert!(error.to_string().contains("max_message_bytes"), "{error}");
    }

    // A smaller limit applies as set; a message at the limit passes.
    let (ours, theirs) = UnixStream::pair().expect("socket pair");
    let small = ConnectionOptions::default().with_max_message_bytes(4);
    let mut connection = Connection::from_stream(ours, small);
    let mut peer = Connection::from_stream(theirs, small);
    peer.send_bytes(b"four").expect("send");
    peer.send_bytes(b"five!").expect("send");
    assert_eq!(connection.recv_bytes().expect("at the limit"), b"four");
    assert!(matches!(
        connection.recv_bytes(),
        Err(ConnectionError::MessageTooLarge {
            claimed: 5,
            limit: 4
        })
    ));
}

/// A read timeout in the middle of a message loses nothing: the next
/// receive goes on from where it stopped, fds included, and every receive
/// form shares that progress.
#[test]
fn a_read_timeout_mid_message_keeps_what_arrived() {
    let (ours, mut theirs) = UnixStream::pair().expect("socket pair");
    let mut connection = Connection::from_stream(ours, ConnectionOptions::default());
    connection
        .set_read_timeout(Some(Duration::from_millis(50)))
        .expect("read timeout");
    let file = std::fs::File::open("/proc/self/exe").expect("a file to attach");
    // The header and one byte, with an fd; then the rest, in pieces.
    tensorshare_strategies::platform::fd_passing::send_with_fds(
        theirs.as_fd(),
        &[0, 0, 0, 6, b'h'],
        &[file.as_fd()],
    )
    .expect("first part");
    let mut buf = b"old contents".to_vec();
    assert!(matches!(
        connection.recv_bytes_with_fds(&mut buf),
        Err(ConnectionError::ReadTimeout)
    ));
    assert_eq!(buf, b"old contents", "a failed receive leaves the buffer");
    theirs.write_all(b"el").expect("second part");
    assert!(matches!(
        connection.recv_bytes(),
        Err(ConnectionError::ReadTimeout)
    ));
    theirs.write_all(b"lo!").expect("last part");
    theirs
        .write_all(&[0, 0, 0, 4, b'n', b'e', b'x', b't'])
        .expect("next message");
    let fds = connection
        .recv_bytes_with_fds(&mut buf)
        .expect("the whole message");
    assert_eq!(buf, b"hello!");
    assert_eq!(fds.len(), 1, "the fd that came with the first part");
    assert_eq!(connection.recv_bytes().expect("in step"), b"next");
}

#[test]
fn truncated_messages_and_read_timeouts_are_reported() {
    let (ours, mut theirs) = UnixStream::pair().expect("socket pair");
    let mut connection = Connection::from_stream(ours, ConnectionOptions::default());
    connection
        .set_read_timeout(Some(Duration::from_millis(50)))
        .expect("read timeout");
    assert!(matches!(
        connection.recv_bytes(),
        Err(ConnectionError::ReadTimeout)
    ));
    theirs.write_all(&[0, 0, 0, 10, b'a']).expect("write");
    drop(theirs);
    let error = connection.recv_bytes().expect_err("cut short");
    assert!(matches!(error, ConnectionError::Receive(_)), "{error:?}");
}

#[test]
fn connecting_to_nothing_says_what_to_check() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let address = Address::path(dir.path().join("nobody.sock")).expect("address");
    let error = Client::connect(&address, &key("00"), ConnectionOptions::default())
        .expect_err("nothing listens");
    assert!(
        matches!(error, ConnectionError::Connect { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("is the listener running"),
        "{error}"
    );
}

#[test]
fn clones_share_the_socket_and_expose_the_fd() {
    use std::os::fd::AsFd;

    let (ours, theirs) = UnixStream::pair().expect("socket pair");
    let options = ConnectionOptions::default();
    let mut sender = Connection::from_stream(ours, options);
    let mut receiver = sender.try_clone().expect("clone");
    let mut peer = Connection::from_stream(theirs, options);
    peer.send_bytes(b"to the clone").expect("send");
    assert_eq!(receiver.recv_bytes().expect("receive"), b"to the clone");
    sender.send_bytes(b"back").expect("send");
    assert_eq!(peer.recv_bytes().expect("receive"), b"back");
    let fd = sender.as_fd();
    assert!(
        std::fs::read_link(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            fd.as_raw_fd()
        }))
        .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
    );
    let stream = receiver.into_stream().into_unix().expect("a Unix socket");
    stream.peer_addr().expect("a connected stream has a peer");
}

// --- CPython ---------------------------------------------------------------

/// `argv`: role, address (`@name` for abstract), key hex.
const PYTHON_PEER: &str = r#"
import sys
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Listener

role, address, key = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
if address.startswith('@'):
    address = '\0' + address[1:]

if role == 'client':
    with Client(address, authkey=key) as conn:
        conn.send({'a': [1, 2.5, 'x']})
        print(repr(conn.recv()), flush=True)
elif role == 'client-wrong-key':
    try:
        Client(address, authkey=key)
    except AuthenticationError as error:
        print('AuthenticationError:', error, flush=True)
    else:
        sys.exit('the Rust listener accepted a wrong key')
elif role == 'listener':
    with Listener(address, authkey=key) as listener:
        print('ready', flush=True)
        with listener.accept() as conn:
            print(repr(conn.recv()), flush=True)
            conn.send_bytes(b'bye')
elif role == 'listener-wrong-key':
    with Listener(address, authkey=key) as listener:
        print('ready', flush=True)
        try:
            listener.accept()
        except AuthenticationError as error:
            print('AuthenticationError:', error, flush=True)
        else:
            sys.exit('the Python listener accepted a wrong key')
else:
    sys.exit('unknown role ' + role)
"#;

fn spawn_python(python: &str, role: &str, address: &Address, authkey: &Authkey) -> Child {
    Command::new(python)
        .args([
            "-c",
            PYTHON_PEER,
            role,
            &address.to_string(),
            &authkey.to_hex(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run TENSORSHARE_TEST_PYTHON={python}: {e}"))
}

/// Waits for the Python peer and returns its stdout, failing with its
/// stderr when it did not succeed.
fn python_output(child: Child) -> String {
    let output = child.wait_with_output().expect("wait for python");
    support::expect_success(&output, "the python peer")
}

/// Accepts one connection from `child`, failing (with the child's stderr)
/// if it exits or a minute passes first.
fn accept_from(listener: &Listener, child: &mut Child) -> Result<Connection, ConnectionError> {
    listener.set_nonblocking(true).expect("non-blocking");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match listener.accept() {
            Err(error) if error.is_would_block() => {}
            other => {
                listener.set_nonblocking(false).expect("blocking");
                return other;
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            panic!("python exited ({status}) without connecting:\n{stderr}");
        }
        assert!(
            Instant::now() < deadline,
            "python did not connect within a minute"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for the Python listener's `ready` line.
fn wait_until_ready(child: &mut Child) -> BufReader<std::process::ChildStdout> {
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    let _ = stdout.read_line(&mut line);
    if line.trim() != "ready" {
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        panic!("python listener did not start: {line:?}\n{stderr}");
    }
    stdout
}

fn python_client_talks_to_rust_listener(python: &str, address: &Address, dialect: Dialect) {
    let authkey = Authkey::random().expect("random authkey");
    let options = ConnectionOptions::default().with_dialect(dialect);
    let listener = Listener::bind(address, &authkey, options).expect("bind listener");
    let mut child = spawn_python(python, "client", address, &authkey);
    let mut connection = accept_from(&listener, &mut child).expect("accept python");
    let pickle = connection.recv_bytes().expect("receive python's message");
    let value = Registry::default()
        .loads(&pickle)
        .expect("decode python's pickle");
    let Value::Dict(items) = &value else {
        panic!("expected a dict, got {value:?}")
    };
    let [(Value::Str(key), Value::List(list))] = &items[..] else {
        panic!("expected {{'a': [...]}}, got {value:?}")
    };
    assert_eq!(&**key, "a");
    assert!(
        matches!(
            &list[..],
            [Value::Int(1), Value::Float(f), Value::Str(s)] if *f == 2.5 && &**s == "x"
        ),
        "{list:?}"
    );
    connection.send_bytes(PICKLED_SEVEN).expect("reply");
    assert_eq!(python_output(child).trim(), "7");
}

fn rust_client_talks_to_python_listener(python: &str, address: &Address) {
    let authkey = Authkey::random().expect("random authkey");
    let mut child = spawn_python(python, "listener", address, &authkey);
    let mut stdout = wait_until_ready(&mut child);
    let mut connection =
        Client::connect(address, &authkey, ConnectionOptions::default()).expect("connect");
    connection.send_bytes(PICKLED_SEVEN).expect("send");
    let mut received = String::new();
    let _ = stdout.read_line(&mut received);
    assert_eq!(
        received.trim(),
        "7",
        "python's conn.recv() printed {received:?}"
    );
    assert_eq!(connection.recv_bytes().expect("python's reply"), b"bye");
    python_output(child);
}

#[test]
fn python_client_to_rust_listener_over_a_path() {
    let Some(python) = test_python(file!()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temporary directory");
    for (name, dialect) in [
        ("modern.sock", Dialect::Modern),
        ("legacy.sock", Dialect::Legacy),
    ] {
        let address = Address::path(dir.path().join(name)).expect("address");
        python_client_talks_to_rust_listener(&python, &address, dialect);
    }
}

#[test]
fn python_client_to_rust_listener_over_an_abstract_name() {
    let Some(python) = test_python(file!()) else {
        return;
    };
    python_client_talks_to_rust_listener(&python, &unique_address("connection"), Dialect::Modern);
}

#[test]
fn rust_client_to_python_listener_over_a_path() {
    let Some(python) = test_python(file!()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("python.sock");
    let address = Address::path(&path).expect("address");
    rust_client_talks_to_python_listener(&python, &address);
    assert!(
        !Path::new(&path).exists(),
        "python's listener removes its file"
    );
}

#[test]
fn rust_client_to_python_listener_over_an_abstract_name() {
    let Some(python) = test_python(file!()) else {
        return;
    };
    rust_client_talks_to_python_listener(&python, &unique_address("connection"));
}

#[test]
fn python_with_a_wrong_key_is_refused_both_ways() {
    let Some(python) = test_python(file!()) else {
        return;
    };
    let ours = key("00112233");
    let theirs = key("33221100");

    // Python's Client with the wrong key against our listener, which then
    // serves a right one.
    let address = unique_address("connection");
    let listener =
        Listener::bind(&address, &ours, ConnectionOptions::default()).expect("bind listener");
    let mut child = spawn_python(&python, "client-wrong-key", &address, &theirs);
    let refused = accept_from(&listener, &mut child).expect_err("wrong key");
    assert!(refused.is_handshake_failure(), "{refused:?}");
    assert!(refused.to_string().contains("authkeys differ"), "{refused}");
    assert!(python_output(child).contains("AuthenticationError"));
    let mut child = spawn_python(&python, "client", &address, &ours);
    let mut connection = accept_from(&listener, &mut child).expect("right key");
    connection.recv_bytes().expect("python's message");
    connection.send_bytes(PICKLED_SEVEN).expect("reply");
    assert_eq!(python_output(child).trim(), "7");

    // Our Client with the wrong key against Python's listener.
    let address = unique_address("connection");
    let mut child = spawn_python(&python, "listener-wrong-key", &address, &theirs);
    let _stdout = wait_until_ready(&mut child);
    let error =
        Client::connect(&address, &ours, ConnectionOptions::default()).expect_err("wrong key");
    assert!(error.to_string().contains("authkeys differ"), "{error}");
    let output = child.wait_with_output().expect("wait for python");
    support::expect_success(&output, "the python peer");
}
