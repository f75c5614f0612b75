//! Stock CPython 3.10 to 3.13 (those of the machine's pyenv, else the
//! test Python), without torch, over TCP: each one's
//! `Client(("127.0.0.1", port))` to a Rust listener that challenges in
//! either dialect, and a Rust client to each one's `Listener`. 3.12 and
//! later challenge with `{sha256}`, older ones with bare MD5.

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;

use tensorshare::Authkey;
use tensorshare::connection::Address;
use tensorshare::connection::{Client, ConnectionOptions, Dialect, Listener};

/// `argv`: role (`client` or `listener`), port, key hex.
const PEER: &str = r#"
import sys
from multiprocessing.connection import Client, Listener
role, port, key = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
if role == "client":
    with Client(("127.0.0.1", port), authkey=key) as conn:
        conn.send_bytes(b"from " + sys.version.split()[0].encode())
        print(conn.recv_bytes().decode(), flush=True)
else:
    with Listener(("127.0.0.1", 0), authkey=key) as listener:
        print(listener.address[1], flush=True)
        with listener.accept() as conn:
            conn.send_bytes(conn.recv_bytes() + b" back")
"#;

/// The CPython 3.10 to 3.13 interpreters of the machine's pyenv
/// (`$PYENV_ROOT`, else `~/.pyenv`), one of each minor release.
fn cpythons() -> Vec<PathBuf> {
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".pyenv")));
    let Some(Ok(entries)) = root.map(|root| std::fs::read_dir(root.join("versions"))) else {
        return Vec::new();
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let minor = ["3.10.", "3.11.", "3.12.", "3.13."]
                .into_iter()
                .find(|prefix| name.starts_with(prefix))?;
            let python = entry.path().join("bin/python3");
            python.exists().then(|| (minor.to_owned(), python))
        })
        .collect();
    found.sort();
    found.dedup_by(|later, earlier| later.0 == earlier.0);
    found.into_iter().map(|(_, python)| python).collect()
}

fn peer(python: &PathBuf, role: &str, port: u16, authkey: &Authkey) -> Command {
    let mut command = Command::new(python);
    command
        .args(["-c", PEER, role, &port.to_string(), &authkey.to_hex()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

#[test]
fn every_cpython_here_speaks_to_us_over_tcp_in_both_dialects() {
    let mut pythons = cpythons();
    if pythons.is_empty() {
        // Without pyenv's, the test Python is one CPython at least (under
        // `scripts/test`, which fails rather than skip without it).
        let Some(python) =
            support::test_python("every_cpython_here_speaks_to_us_over_tcp_in_both_dialects")
        else {
            return;
        };
        pythons.push(PathBuf::from(python));
    }
    for python in &pythons {
        let shown = python.display();
        for dialect in [Dialect::Modern, Dialect::Legacy] {
            let authkey = Authkey::random().expect("a key");
            let options = ConnectionOptions::default().with_dialect(dialect);
            let address: Address = "127.0.0.1:0".parse().expect("address");
            let listener = Listener::bind(&address, &authkey, options).expect("bind");
            let port = listener.address().as_tcp().expect("TCP").port();
            let server = thread::spawn(move || {
                let mut connection = listener.accept().expect("accept CPython");
                let message = connection.recv_bytes().expect("receive");
                connection.send_bytes(b"hello").expect("answer");
                message
            });
            let output = peer(python, "client", port, &authkey)
                .output()
                .expect("run");
            let stdout = support::expect_success(&output, &format!("{shown} client"));
            assert_eq!(stdout.trim(), "hello", "{shown} {dialect:?}");
            let message = server.join().expect("server");
            assert!(message.starts_with(b"from 3.1"), "{shown}: {message:?}");
        }

        let authkey = Authkey::random().expect("a key");
        let mut listener = peer(python, "listener", 0, &authkey).spawn().expect("run");
        let mut stdout = BufReader::new(listener.stdout.take().expect("stdout"));
        let mut port = String::new();
        stdout.read_line(&mut port).expect("the port");
        let address: Address = format!("127.0.0.1:{}", port.trim())
            .parse()
            .expect("address");
        let options = ConnectionOptions::default();
        let mut connection = Client::connect(&address, &authkey, options)
            .unwrap_or_else(|e| panic!("{shown} listener: {e}"));
        connection.send_bytes(b"ping").expect("send");
        assert_eq!(
            connection.recv_bytes().expect("answer"),
            b"ping back",
            "{shown}"
        );
        let output = listener.wait_with_output().expect("wait");
        support::expect_success(&output, &format!("{shown} listener"));
    }
}
