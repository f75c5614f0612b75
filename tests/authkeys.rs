//! One key per process: connections made by a `SharingContext` carry its
//! authkey, a connection of another key is refused before anything is
//! sent, a peer that cannot fetch for want of the key is named as the
//! cause, and a producer can wait until its storages are fetched.

mod support;

use std::time::{Duration, Instant};

use tensorshare::connection::{Client, ConnectionOptions, Listener};
use tensorshare::{Authkey, Connection, DType, Error, SharingContext, StrategyKind, Value};

use support::cases;

fn tensor(seed: u8) -> Value {
    Value::Tensor(cases::contiguous(DType::Float32, &[256], seed, true))
}

#[test]
fn connections_a_context_makes_carry_its_key() {
    let server = SharingContext::new(Authkey::random().expect("key"));
    let client = SharingContext::new(server.authkey().clone());
    let listener = server.listen_in_private_dir().expect("listen");
    let address = listener.address().clone();
    let accepting = std::thread::spawn(move || listener.accept().expect("accept"));
    let mut out = client.connect(&address).expect("connect");
    let mut inbound = accepting.join().expect("accept thread");
    assert_eq!(out.get_ref().authkey(), Some(client.authkey()));
    for seed in 0..5 {
        let sent = tensor(seed);
        out.send(&sent).expect("send");
        let got = inbound.recv().expect("recv");
        cases::check_echo(&sent, &got).expect("same tensor");
    }
}

#[test]
fn a_connection_of_another_key_is_refused_before_anything_is_sent() {
    let connection_key = Authkey::random().expect("key");
    let sharing = SharingContext::new(Authkey::random().expect("another key"));
    let listener = Listener::bind_in_private_dir(&connection_key, ConnectionOptions::default())
        .expect("listen");
    let address = listener.address().clone();
    let accepting = std::thread::spawn(move || listener.accept().expect("accept"));
    let out =
        Client::connect(&address, &connection_key, ConnectionOptions::default()).expect("connect");
    let inbound = accepting.join().expect("accept thread");

    // Refused when the connection is bound to the context, before any
    // value could be sent or received on it.
    let error = Connection::new(out, &sharing).expect_err("another key");
    assert!(matches!(error, Error::AuthkeyMismatch), "{error:?}");
    assert!(
        error.to_string().contains("SharingContext::connect"),
        "says what to do: {error}"
    );
    assert_eq!(sharing.sharer_stats(), None, "nothing was shared");
    let error = Connection::new(inbound, &sharing).expect_err("another key");
    assert!(matches!(error, Error::AuthkeyMismatch), "{error:?}");
}

#[test]
fn a_peer_without_the_key_is_named_as_the_cause() {
    let sender = SharingContext::new(Authkey::random().expect("key"))
        .with_strategy(StrategyKind::FileDescriptor)
        .with_inline_fds(false);
    let stranger = SharingContext::new(Authkey::random().expect("another key"));
    let (mut out, mut inbound) = support::connection_pair(&sender, &stranger);
    out.send(&tensor(2)).expect("send");
    let refused = inbound.recv().expect_err("the fetch is refused");
    assert!(
        refused.to_string().contains("authkey"),
        "the receiver is told why: {refused}"
    );

    // The producer waiting for its fetch hears why it will not come.
    let error = sender
        .wait_until_fetched(Duration::from_secs(10))
        .expect_err("a peer failed to authenticate");
    let message = error.to_string();
    assert!(message.contains("its authkey differs"), "{message}");
    assert!(message.contains("(once)"), "{message}");

    // The receiver leaves as a torch process whose fetch failed would; the
    // failure is said once, as the cause of what follows, then no more.
    let stranger2 = SharingContext::new(Authkey::random().expect("a third key"));
    // The same end of the socket pair, now receiving through `stranger2`.
    let mut inbound = Connection::new(inbound.into_inner(), &stranger2)
        .expect("an unauthenticated end binds to any context");
    out.send(&tensor(3)).expect("send");
    let _ = inbound.recv();
    drop(inbound);
    let error = out.recv().expect_err("the peer is gone");
    match &error {
        Error::PeerAuthkey {
            failures: 2,
            connection: Some(_),
        } => {}
        other => panic!("expected the peer's failure as the cause, got {other:?}"),
    }
    assert!(
        error.to_string().contains("the connection then failed"),
        "{error}"
    );
    let again = out.send(&tensor(4)).expect_err("still gone");
    assert!(
        matches!(again, Error::Connection(_)),
        "reported once: {again:?}"
    );
}

#[test]
fn a_producer_waits_until_its_storages_are_fetched() {
    let authkey = Authkey::random().expect("key");
    let sender = SharingContext::new(authkey.clone())
        .with_strategy(StrategyKind::FileDescriptor)
        .with_inline_fds(false);
    let receiver = SharingContext::new(authkey);
    let (mut out, mut inbound) = support::connection_pair(&sender, &receiver);
    let sent: Vec<Value> = (0..4).map(tensor).collect();
    for value in &sent {
        out.send(value).expect("send");
    }
    assert_eq!(sender.unfetched_shares(), 4);

    // Nobody reads yet: the wait ends at its timeout, saying so.
    let error = sender
        .wait_until_fetched(Duration::from_millis(100))
        .expect_err("nobody fetched");
    assert!(
        error
            .to_string()
            .starts_with("4 shared storages were not fetched"),
        "{error}"
    );

    let start = Instant::now();
    let reading = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        (0..4)
            .map(|_| inbound.recv().expect("recv"))
            .collect::<Vec<_>>()
    });
    sender
        .wait_until_fetched(Duration::from_secs(30))
        .expect("fetched");
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert_eq!(sender.unfetched_shares(), 0);
    for (sent, got) in sent.iter().zip(reading.join().expect("reader")) {
        cases::check_echo(sent, &got).expect("same tensor");
    }
}

/// The case that used to show as a broken pipe: a torch consumer that
/// connects with the right key but whose process holds another (its
/// `current_process().authkey`), so that its resource sharer fetch is
/// refused ("digest sent was rejected") and it leaves.
#[test]
fn a_torch_peer_whose_fetch_is_refused_is_named_as_the_cause() {
    let Some(python) = support::test_python("a_torch_peer_whose_fetch_is_refused") else {
        return;
    };
    let sharing = SharingContext::new(Authkey::random().expect("key"))
        .with_strategy(StrategyKind::FileDescriptor);
    let listener = sharing.listen_in_private_dir().expect("listen");
    let address = listener.address().as_path().expect("a path").to_owned();
    let consumer = r#"
import sys
from multiprocessing.connection import Client
import torch, torch.multiprocessing  # registers torch's reducers
conn = Client(sys.argv[1], family="AF_UNIX", authkey=bytes.fromhex(sys.argv[2]))
try:
    conn.recv()
except Exception as error:
    print(type(error).__name__, error, file=sys.stderr)
    sys.exit(3)
"#;
    let mut child = std::process::Command::new(python)
        .args(["-c", consumer])
        .arg(&address)
        .arg(sharing.authkey().to_hex())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the torch consumer");
    let mut connection = listener.accept().expect("accept");
    connection.send(&tensor(5)).expect("send");
    let error = sharing
        .wait_until_fetched(Duration::from_secs(60))
        .expect_err("the consumer's fetch is refused");
    assert!(error.to_string().contains("its authkey differs"), "{error}");

    let status = child.wait().expect("consumer exits");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("digest sent was rejected"), "{stderr}");
    // Reported once already: what follows is the plain broken connection.
    let after = connection.recv().expect_err("the consumer left");
    assert!(matches!(after, Error::Connection(_)), "{after:?}");
}
