//! `multiprocessing.connection` over TCP between Rust processes' threads,
//! on loopback: addresses, framing and handshake, storages sent as bytes
//! whatever the context prefers, and shared-memory handles refused.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use support::cases;
use tensorshare::connection::Address;
use tensorshare::connection::{Client, Connection, ConnectionError, ConnectionOptions, Listener};
use tensorshare::model::StorageKind;
use tensorshare::{Authkey, DType, Error, SharingContext, StrategyKind, Value};

/// A listener on `host` port 0, or `None` (with a notice) where the host
/// has no such interface (`::1` on a machine without IPv6).
fn listen_on(host: &str, authkey: &Authkey, options: ConnectionOptions) -> Option<Listener> {
    let address: Address = format!("{host}:0").parse().expect("a TCP address");
    match Listener::bind(&address, authkey, options) {
        Ok(listener) => Some(listener),
        Err(ConnectionError::Bind { cause, .. })
            if cause.kind() == ErrorKind::AddrNotAvailable && host.starts_with('[') =>
        {
            eprintln!("SKIPPED: no IPv6 loopback here ({cause})");
            None
        }
        Err(error) => panic!("binding {address}: {error}"),
    }
}

/// Echoes every message on one connection `listener` accepts, through the
/// context that made it, until the peer hangs up; the error that ended it
/// otherwise.
fn echo_one(listener: tensorshare::Listener) -> thread::JoinHandle<Result<(), Error>> {
    thread::spawn(move || {
        let mut connection = listener.accept()?;
        loop {
            match connection.recv() {
                Ok(value) => connection.send(&value)?,
                Err(error) if error.is_closed() => return Ok(()),
                Err(error) => return Err(error),
            }
        }
    })
}

#[test]
fn port_zero_binds_a_free_port_that_clients_reach_on_v4_and_v6() {
    let authkey = Authkey::random().expect("a key");
    let options = ConnectionOptions::default();
    for host in ["127.0.0.1", "[::1]"] {
        let Some(listener) = listen_on(host, &authkey, options) else {
            continue;
        };
        let address = listener.address().clone();
        let tcp = address.as_tcp().expect("a TCP address");
        assert_ne!(tcp.port(), 0, "{address}");
        assert_eq!(
            address.to_string().parse::<Address>().expect("reparse"),
            address
        );
        assert!(!listener.is_reachable_from_other_hosts());
        let server = thread::spawn(move || -> Result<Vec<u8>, ConnectionError> {
            let mut connection = listener.accept()?;
            assert!(connection.stream().is_tcp());
            let message = connection.recv_bytes()?;
            connection.send_bytes(&message)?;
            Ok(message)
        });
        let mut connection = Client::connect(&address, &authkey, options).expect("connect");
        // Several segments' worth, patterned so that a reordering shows.
        let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
        connection.send_bytes(&big).expect("send");
        assert_eq!(connection.recv_bytes().expect("echo"), big);
        assert_eq!(server.join().expect("server").expect("served"), big);
    }
}

#[test]
fn a_host_name_resolves_and_every_address_is_tried() {
    let authkey = Authkey::random().expect("a key");
    let options = ConnectionOptions::default();
    // Bound to IPv4 alone, as Python's Listener(("localhost", port)) is:
    // where localhost resolves to ::1 first, that attempt is refused and the
    // next one connects.
    let listener = listen_on("127.0.0.1", &authkey, options).expect("IPv4 loopback");
    let port = listener.address().as_tcp().expect("TCP").port();
    let server = thread::spawn(move || listener.accept()?.recv_bytes());
    let named: Address = format!("localhost:{port}").parse().expect("address");
    let mut connection = Client::connect(&named, &authkey, options).expect("connect by name");
    connection.send_bytes(b"by name").expect("send");
    assert_eq!(server.join().expect("server").expect("served"), b"by name");

    let nowhere: Address = "no-such-host.invalid:6000".parse().expect("address");
    let error = Client::connect(&nowhere, &authkey, options).unwrap_err();
    assert!(matches!(error, ConnectionError::Connect { .. }), "{error}");
    assert!(
        error.to_string().contains("no-such-host.invalid:6000"),
        "{error}"
    );
}

#[test]
fn a_wrong_key_is_refused_over_tcp_and_the_listener_serves_on() {
    let authkey = Authkey::random().expect("a key");
    let options = ConnectionOptions::default();
    let listener = listen_on("127.0.0.1", &authkey, options).expect("listener");
    let address = listener.address().clone();
    let server = thread::spawn(move || -> Result<Vec<u8>, ConnectionError> {
        let refused = listener.accept().unwrap_err();
        assert!(refused.is_handshake_failure(), "{refused}");
        listener.accept()?.recv_bytes()
    });
    let wrong = Authkey::random().expect("another key");
    assert!(Client::connect(&address, &wrong, options).is_err());
    let mut connection = Client::connect(&address, &authkey, options).expect("connect");
    connection.send_bytes(b"after").expect("send");
    assert_eq!(server.join().expect("server").expect("served"), b"after");
}

#[test]
fn storages_go_as_bytes_over_tcp_whatever_strategy_the_context_prefers() {
    let authkey = Authkey::random().expect("a key");
    for strategy in [
        StrategyKind::FileDescriptor,
        StrategyKind::FileSystem,
        StrategyKind::Memmap,
        StrategyKind::Bytes,
    ] {
        let server = SharingContext::new(authkey.clone()).with_strategy(strategy);
        let listener = server
            .listen(&"127.0.0.1:0".parse().expect("address"))
            .expect("listen");
        let address = listener.address().clone();
        let echo = echo_one(listener);
        let client = SharingContext::new(authkey.clone()).with_strategy(strategy);
        let mut connection = client.connect(&address).expect("connect");
        let failures = cases::echo_failures(&mut connection);
        assert!(failures.is_empty(), "{strategy}: {failures:#?}");
        // The echo of a storage in this process's shared memory is a copy.
        let shared = Value::Tensor(cases::contiguous(DType::Float32, &[64], 1, true));
        connection.send(&shared).expect("send");
        let back = connection.recv().expect("echo");
        let kind = back.as_tensor().expect("a tensor").storage().kind();
        assert_eq!(
            kind,
            StorageKind::Strategy(StrategyKind::Bytes),
            "{strategy}"
        );
        assert_eq!(
            client.unfetched_shares(),
            0,
            "nothing was offered for fetching"
        );
        drop(connection);
        echo.join().expect("echo thread").expect("echo served");
    }
}

#[test]
fn a_pinned_shared_memory_strategy_refuses_tcp_and_keeps_unix() {
    let authkey = Authkey::random().expect("a key");
    let receiver = SharingContext::new(authkey.clone());
    let listener = receiver
        .listen(&"127.0.0.1:0".parse().expect("address"))
        .expect("listen");
    let address = listener.address().clone();
    let echo = echo_one(listener);
    let pinned =
        SharingContext::new(authkey.clone()).with_pinned_strategy(StrategyKind::FileSystem);
    let mut connection = pinned.connect(&address).expect("connect");
    let tensor = Value::Tensor(cases::contiguous(DType::Int64, &[8], 2, false));
    let error = connection.send(&tensor).unwrap_err();
    assert!(
        matches!(error, Error::PinnedStrategyOverTcp { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("pinned to file_system") && message.contains("with_strategy"),
        "{message}"
    );
    // Nothing went out: the connection is still in step, and serves a
    // context pinned to bytes.
    let bytes = SharingContext::new(authkey.clone()).with_pinned_strategy(StrategyKind::Bytes);
    let mut connection =
        tensorshare::Connection::new(connection.into_inner(), &bytes).expect("the same key");
    connection.send(&tensor).expect("pinned bytes go over TCP");
    cases::check_echo(&tensor, &connection.recv().expect("echo")).expect("intact");
    drop(connection);
    echo.join().expect("echo thread").expect("echo served");

    let fd = SharingContext::new(authkey).with_pinned_strategy(StrategyKind::FileDescriptor);
    let (mut ours, mut theirs) = support::connection_pair(&fd, &fd);
    ours.send(&tensor)
        .expect("a pinned strategy over a Unix socket");
    let got = theirs.recv().expect("receive");
    assert_eq!(
        got.as_tensor().expect("tensor").storage().kind(),
        StorageKind::Strategy(StrategyKind::FileDescriptor)
    );
}

#[test]
fn shared_memory_handles_arriving_over_tcp_are_refused_with_what_to_do() {
    // The file_system sender registers its segment with the manager.
    support::build_manager_executable();
    let authkey = Authkey::random().expect("a key");
    let receiver = SharingContext::new(authkey.clone());
    let options = ConnectionOptions::default();
    let listener = receiver
        .listen(&"127.0.0.1:0".parse().expect("address"))
        .expect("listen");
    let address = listener.address().clone();
    let forms = [
        (StrategyKind::FileDescriptor, "rebuild_storage_fd"),
        (StrategyKind::FileSystem, "rebuild_storage_filename"),
        (StrategyKind::Memmap, "from_file"),
    ];
    let server = thread::spawn(move || {
        let mut refusals = Vec::new();
        for _ in 0..forms.len() {
            let mut connection = listener.accept().expect("accept");
            refusals.push(connection.recv().unwrap_err().to_string());
        }
        (refusals, receiver)
    });
    let mut senders = Vec::new();
    for (strategy, _) in forms {
        let sender = SharingContext::new(authkey.clone()).with_strategy(strategy);
        let tensor = Value::Tensor(cases::contiguous(DType::UInt8, &[4096], 3, false));
        // What a torch process's conn.send(tensor) writes: the handle form.
        let pickle = sender.dumps(&tensor).expect("dumps");
        let mut connection = Client::connect(&address, &authkey, options).expect("connect");
        connection.send_bytes(&pickle).expect("send");
        senders.push((sender, connection));
    }
    let (refusals, _receiver) = server.join().expect("server");
    for ((_, form), refusal) in forms.iter().zip(&refusals) {
        for part in [
            *form,
            "shared memory does not cross hosts",
            "pickle.dumps",
            "loopback",
        ] {
            assert!(refusal.contains(part), "{part:?} missing from: {refusal}");
        }
    }
    // The fd was never fetched: the refusal comes before any fetch.
    let (fd_sender, _) = &senders[0];
    assert_eq!(fd_sender.sharer_stats().map_or(0, |stats| stats.served), 0);
}

#[test]
fn a_silent_peer_costs_the_listener_its_handshake_timeout_only() {
    let authkey = Authkey::random().expect("a key");
    let options = ConnectionOptions::default().with_handshake_timeout(Duration::from_millis(500));
    let listener = listen_on("127.0.0.1", &authkey, options).expect("listener");
    let address = listener.address().clone();
    let port = address.as_tcp().expect("TCP").port();
    let mut silent = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let start = Instant::now();
    let refused = listener.accept().unwrap_err();
    assert!(
        matches!(refused, ConnectionError::HandshakeTimeout { .. }),
        "{refused}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    // The listener closed it: the peer sees the challenge, then the end.
    let mut seen = Vec::new();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    silent.read_to_end(&mut seen).expect("read to the end");
    assert!(seen.windows(11).any(|w| w == b"#CHALLENGE#"), "{seen:?}");
    let _ = silent.write_all(b"late");
    let server = thread::spawn(move || listener.accept()?.recv_bytes());
    let mut connection: Connection = Client::connect(&address, &authkey, options).expect("connect");
    connection.send_bytes(b"next").expect("send");
    assert_eq!(server.join().expect("server").expect("served"), b"next");
}

#[test]
fn a_message_above_2_gib_takes_the_long_length_form_over_tcp() {
    let authkey = Authkey::random().expect("a key");
    // 2 GiB and 8 bytes: past i32::MAX, so -1 and an 8-byte length.
    let len = (1usize << 31) + 8;
    let options = ConnectionOptions::default().with_max_message_bytes(len);
    let listener = listen_on("127.0.0.1", &authkey, options).expect("listener");
    let address = listener.address().clone();
    let server = thread::spawn(move || -> Result<(usize, u8, u8), ConnectionError> {
        let mut connection = listener.accept()?;
        let mut message = Vec::new();
        let received = connection.recv_bytes_into(&mut message)?;
        Ok((received, message[0], message[len - 1]))
    });
    let mut payload = vec![0u8; len];
    payload[0] = 0xa5;
    payload[len - 1] = 0x5a;
    let mut connection = Client::connect(&address, &authkey, options).expect("connect");
    connection.send_bytes(&payload).expect("send");
    drop(payload);
    let (received, first, last) = server.join().expect("server").expect("received");
    assert_eq!((received, first, last), (len, 0xa5, 0x5a));
}

#[test]
fn tcp_connections_take_their_keepalive_from_the_dead_peer_timeout() {
    use nix::sys::socket::getsockopt;
    use nix::sys::socket::sockopt::{KeepAlive, TcpKeepCount, TcpKeepIdle, TcpKeepInterval};

    let authkey = Authkey::random().expect("a key");
    for timeout in [Some(Duration::from_secs(90)), None] {
        let options = ConnectionOptions::default().with_tcp_dead_peer_timeout(timeout);
        let listener = listen_on("127.0.0.1", &authkey, options).expect("listener");
        let address = listener.address().clone();
        let server = thread::spawn(move || listener.accept().expect("accept"));
        let client = Client::connect(&address, &authkey, options).expect("connect");
        let accepted = server.join().expect("server");
        for connection in [&client, &accepted] {
            let tcp = connection.stream().as_tcp().expect("a TCP socket");
            let keepalive = getsockopt(tcp, KeepAlive).expect("SO_KEEPALIVE");
            assert_eq!(keepalive, timeout.is_some(), "{timeout:?}");
            if keepalive {
                // Probes after 30 s of silence, 8 of them 7 s apart: given
                // up on within the 90 s.
                let idle = getsockopt(tcp, TcpKeepIdle).expect("idle");
                let interval = getsockopt(tcp, TcpKeepInterval).expect("interval");
                let count = getsockopt(tcp, TcpKeepCount).expect("count");
                assert_eq!((idle, interval, count), (30, 7, 8));
            }
        }
    }
    assert_eq!(
        ConnectionOptions::default(),
        ConnectionOptions::default().with_tcp_dead_peer_timeout(Some(Duration::from_secs(120))),
        "the default dead-peer timeout is the two minutes its docs give"
    );
}

#[test]
fn a_live_peer_that_reads_late_outlasts_the_dead_peer_timeout() {
    let authkey = Authkey::random().expect("a key");
    let timeout = Duration::from_secs(2);
    let options = ConnectionOptions::default()
        .with_tcp_dead_peer_timeout(Some(timeout))
        .with_max_message_bytes(64 << 20);
    let listener = listen_on("127.0.0.1", &authkey, options).expect("listener");
    let address = listener.address().clone();
    let reader = thread::spawn(move || -> Result<usize, ConnectionError> {
        let mut connection = listener.accept()?;
        // The sender fills both socket buffers and waits, its data
        // unacknowledged by a zero window, for longer than the timeout.
        thread::sleep(timeout * 3);
        connection.recv_bytes().map(|message| message.len())
    });
    let mut connection = Client::connect(&address, &authkey, options).expect("connect");
    connection
        .send_bytes(&vec![1u8; 64 << 20])
        .expect("a slow reader is no dead peer");
    assert_eq!(reader.join().expect("reader").expect("received"), 64 << 20);
}
