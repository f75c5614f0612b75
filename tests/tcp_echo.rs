//! `tensorshare echo` on TCP, and stock torch on the other end of a TCP
//! connection with nothing but `multiprocessing.connection`: echo serving
//! a torch `Client(("127.0.0.1", port))`, a Rust client driving a torch
//! `Listener(("127.0.0.1", 0))`, the listener's safe defaults, and a silent
//! peer that holds nothing but its own thread.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{Server, cases, output_within, python_script, tensorshare_exe, test_python};
use tensorshare::connection::{Client, ConnectionOptions};
use tensorshare::{Authkey, Connection, SharingContext, Value};

/// `tensorshare echo --listen ADDRESS` with `authkey` and `extra` flags.
fn echo_command(address: &str, authkey: &Authkey, extra: &[&str]) -> Command {
    let mut command = Command::new(tensorshare_exe());
    command
        .args(["echo", "--listen", address, "--authkey", &authkey.to_hex()])
        .args(extra)
        .env_remove(tensorshare::connection::AUTHKEY_ENV);
    command
}

/// `tcp_peer.py ROLE --address ADDRESS` with `authkey`.
fn torch_peer(python: &str, role: &str, address: &str, authkey: &Authkey) -> Command {
    let mut command = Command::new(python);
    command.arg(python_script("tcp_peer.py")).args([
        role,
        "--address",
        address,
        "--authkey",
        &authkey.to_hex(),
    ]);
    command
}

/// The cases echoed by a torch peer that sends back with plain `pickle`,
/// each with what is wrong with its echo. torch's plain pickle writes the
/// storage of each view apart (`pickle.dumps([x[0], x[1]])` rebuilds two
/// storages), so two views of one storage come back on two, each intact.
fn torch_pickle_echo_failures(connection: &mut Connection) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases::all(&cases::sharable_dtypes()) {
        connection.send(&case.value).expect("send");
        let echoed = connection.recv().expect("receive the echo");
        let checked = match (&case.value, &echoed) {
            (Value::List(sent), Value::List(got))
                if case.name == "two views of one storage" && sent.len() == got.len() =>
            {
                (sent.iter().zip(got.iter()))
                    .try_for_each(|(sent, got)| cases::check_echo(sent, got))
            }
            _ => cases::check_echo(&case.value, &echoed),
        };
        if let Err(why) = checked {
            failures.push(format!("{}: {why}", case.name));
        }
    }
    failures
}

#[test]
fn echo_serves_a_stock_torch_client_over_tcp() {
    let Some(python) = test_python("echo_serves_a_stock_torch_client_over_tcp") else {
        return;
    };
    let authkey = Authkey::random().expect("a key");
    let mut server = Server::start_reporting(echo_command("127.0.0.1:0", &authkey, &[]));
    let address = server.address.to_string();
    assert!(
        address.starts_with("127.0.0.1:") && !address.ends_with(":0"),
        "{address}"
    );
    let output = output_within(
        &mut torch_peer(&python, "drive", &address, &authkey),
        Duration::from_secs(300),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = server.stop_and_read_stderr();
    assert!(
        output.status.success(),
        "torch drive failed:\n{stdout}\n{}\necho stderr:\n{stderr}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("ok dtype_float32") && stdout.contains("ok view_transpose"),
        "{stdout}"
    );
    assert!(stdout.contains("ok refused_file_descriptor"), "{stdout}");
    assert!(
        stderr.contains("authenticated with the authkey but not encrypted"),
        "{stderr}"
    );
    for form in ["rebuild_storage_fd", "rebuild_storage_filename"] {
        let refusal = stderr
            .lines()
            .find(|line| line.contains(form) && line.contains("does not cross hosts"));
        let refusal = refusal.unwrap_or_else(|| panic!("no {form} refusal in: {stderr}"));
        assert!(refusal.contains("pickle.dumps"), "{refusal}");
    }
}

#[test]
fn a_rust_client_drives_a_stock_torch_listener_over_tcp() {
    let Some(python) = test_python("a_rust_client_drives_a_stock_torch_listener_over_tcp") else {
        return;
    };
    let authkey = Authkey::random().expect("a key");
    // CPython's Listener takes IPv6 when told the family (its Client does not).
    for listen in ["127.0.0.1:0", "[::1]:0"] {
        let server = Server::start_reporting(torch_peer(&python, "serve", listen, &authkey));
        // The context prefers file_descriptor; over TCP its storages go as bytes.
        let sharing = SharingContext::new(authkey.clone());
        let mut connection = sharing.connect(&server.address).expect("connect to torch");
        assert!(connection.get_ref().stream().is_tcp());
        let failures = torch_pickle_echo_failures(&mut connection);
        assert!(failures.is_empty(), "{listen}: {failures:#?}");
        let wrong = Authkey::random().expect("another key");
        let refused = Client::connect(&server.address, &wrong, ConnectionOptions::default());
        assert!(refused.is_err(), "torch let a wrong key in");
        let mut again = sharing.connect(&server.address).expect("connect");
        let again = torch_pickle_echo_failures(&mut again);
        assert!(again.is_empty(), "{listen}: {again:#?}");
    }
}

#[test]
fn echo_listens_beyond_loopback_only_when_asked_and_never_with_a_short_key() {
    let authkey = Authkey::random().expect("a key");
    let refused = output_within(
        &mut echo_command("0.0.0.0:0", &authkey, &[]),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("--allow-remote") && stderr.contains("reachable from other hosts"),
        "{stderr}"
    );

    let mut allowed =
        Server::start_reporting(echo_command("0.0.0.0:0", &authkey, &["--allow-remote"]));
    let port = allowed.address.as_tcp().expect("TCP").port();
    let sharing = SharingContext::new(authkey.clone());
    let loopback = format!("127.0.0.1:{port}").parse().expect("address");
    let failures = cases::echo_failures(&mut sharing.connect(&loopback).expect("connect"));
    assert!(failures.is_empty(), "{failures:#?}");
    let stderr = allowed.stop_and_read_stderr();
    assert!(stderr.contains("not encrypted"), "{stderr}");

    for short in [Authkey::new(Vec::new()), Authkey::new(vec![7u8; 15])] {
        let refused = output_within(
            &mut echo_command("127.0.0.1:0", &short, &[]),
            Duration::from_secs(30),
        );
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{stderr}");
        assert!(stderr.contains("needs at least 16"), "{stderr}");
    }
}

#[test]
fn a_silent_or_oversized_tcp_peer_holds_nothing_but_its_own_thread() {
    let authkey = Authkey::random().expect("a key");
    let flags = ["--handshake-timeout", "2", "--max-message-bytes", "1048576"];
    let mut server = Server::start_reporting(echo_command("127.0.0.1:0", &authkey, &flags));
    let port = server.address.as_tcp().expect("TCP").port();
    // Connects and never answers the challenge.
    let mut silent = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let connected = Instant::now();
    // Another client is served meanwhile, and so is one after it that
    // announces a message above the cap and is cut off.
    let sharing = SharingContext::new(authkey.clone());
    let mut served = sharing
        .connect(&server.address)
        .expect("connect beside the silent peer");
    let failures = cases::echo_failures(&mut served);
    assert!(failures.is_empty(), "{failures:#?}");
    let options = ConnectionOptions::default();
    let oversized = Client::connect(&server.address, &authkey, options).expect("connect");
    oversized
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut oversized = oversized.into_stream();
    oversized
        .write_all(&(4_i32 << 20).to_be_bytes())
        .expect("announce 4 MiB");
    let mut rest = Vec::new();
    let _ = oversized.read_to_end(&mut rest);
    // The silent peer is let go once its handshake timeout passes.
    let mut seen = Vec::new();
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    silent
        .read_to_end(&mut seen)
        .expect("the server closes the silent peer");
    assert!(
        connected.elapsed() >= Duration::from_secs(1),
        "closed too early"
    );
    assert!(seen.starts_with(&[0, 0, 0]), "{seen:?}");
    // Still serving, on the connection that was open all along.
    let failures = cases::echo_failures(&mut served);
    assert!(failures.is_empty(), "{failures:#?}");
    let stderr = server.stop_and_read_stderr();
    assert!(stderr.contains("did not finish within 2s"), "{stderr}");
    assert!(
        stderr.contains("above the limit of 1048576 bytes"),
        "{stderr}"
    );
    assert!(
        stderr.contains("(127.0.0.1:"),
        "peers are named by address: {stderr}"
    );
}
