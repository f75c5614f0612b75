//! The futures of `tensorshare::tokio`, dropped before they finish (a
//! timeout, a `select!`), lose no message and leave the connection in step.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::Duration;

use tensorshare::connection::{self, ConnectionOptions};
use tensorshare::{Authkey, Connection, Dict, SharingContext, StrategyKind, Tensor, Value};
use tensorshare_compat::connection::{Dialect, client_handshake, write_message};
use tokio::time::timeout;

/// A short wait, which the futures below cannot finish within.
const CUT: Duration = Duration::from_millis(200);
/// A wait long enough for anything that will finish.
const LONG: Duration = Duration::from_secs(60);

/// `stream` as a connection of values through `sharing`.
fn bound(stream: UnixStream, sharing: &SharingContext) -> Connection {
    let raw = connection::Connection::from_stream(stream, ConnectionOptions::default());
    Connection::new(raw, sharing).expect("the context's connection")
}

#[tokio::test]
async fn a_recv_dropped_in_the_middle_of_a_message_loses_none_of_it() {
    let sharing = SharingContext::new(Authkey::random().expect("a key"));
    let (ours, mut theirs) = UnixStream::pair().expect("a socket pair");
    let mut connection =
        tensorshare::tokio::Connection::new(bound(ours, &sharing)).expect("registered");
    let value = Value::from(Dict::new().with("step", 7).with("name", "resnet"));
    let mut frame = Vec::new();
    write_message(&mut frame, &sharing.dumps(&value).expect("pickled")).expect("framed");
    let (first, rest) = frame.split_at(frame.len() / 2);

    theirs.write_all(first).expect("the first half");
    timeout(CUT, connection.recv())
        .await
        .expect_err("half a message is not a message");
    theirs.write_all(rest).expect("the rest");
    theirs.write_all(&frame).expect("the next message");

    for _ in 0..2 {
        let got = timeout(LONG, connection.recv())
            .await
            .expect("in time")
            .expect("received");
        assert_eq!(got.try_get::<i64>("step").expect("step"), 7);
        assert_eq!(got.try_get::<&str>("name").expect("name"), "resnet");
    }
}

#[tokio::test]
async fn a_send_dropped_in_the_middle_of_a_message_is_finished_before_the_next() {
    let sharing =
        SharingContext::new(Authkey::random().expect("a key")).with_strategy(StrategyKind::Bytes);
    let (ours, theirs) = UnixStream::pair().expect("a socket pair");
    let mut sender =
        tensorshare::tokio::Connection::new(bound(ours, &sharing)).expect("registered");
    let mut receiver = bound(theirs, &sharing);
    // A message cut short would leave the reader waiting: fail instead.
    receiver
        .get_ref()
        .set_read_timeout(Some(LONG))
        .expect("a read timeout");
    // Far more than the socket holds: the send waits for the reader.
    let len = 32 << 20;
    let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let big = Tensor::from_slice(&StrategyKind::Bytes, &bytes, &[len]).expect("a tensor");

    timeout(CUT, sender.send(&big.clone().into()))
        .await
        .expect_err("nobody reads yet: the send is dropped part way");
    let reader = thread::spawn(move || {
        let first = receiver.recv().expect("the first message");
        let second = receiver.recv().expect("the second message");
        (first, second)
    });
    timeout(LONG, sender.flush())
        .await
        .expect("in time")
        .expect("finished");
    timeout(LONG, sender.send(&Value::from("after")))
        .await
        .expect("in time")
        .expect("sent");

    let (first, second) = reader.join().expect("the reader");
    let tensor = first.as_tensor().expect("the tensor");
    assert_eq!(tensor, &big, "the dropped send's message arrived whole");
    assert_eq!(second, "after");
}

#[tokio::test]
async fn an_accept_dropped_during_a_handshake_gives_that_peer_to_the_next_accept() {
    let authkey = Authkey::random().expect("a key");
    let sharing = SharingContext::new(authkey.clone());
    let mut listener =
        tensorshare::tokio::Listener::new(sharing.listen_in_private_dir().expect("listening"))
            .expect("registered");
    let path = listener.address().as_path().expect("a path").to_owned();

    timeout(CUT, listener.accept())
        .await
        .expect_err("nobody connects yet");
    // A peer that connects and answers the challenge only later.
    let mut peer = UnixStream::connect(&path).expect("connected");
    timeout(CUT, listener.accept())
        .await
        .expect_err("the handshake waits for the peer");
    let answering = thread::spawn(move || {
        client_handshake(&mut peer, authkey.as_bytes(), Dialect::default()).expect("accepted");
        peer
    });
    let accepted = timeout(LONG, listener.accept()).await.expect("in time");
    let mut connection = accepted.expect("the peer whose handshake began before");
    let peer = answering.join().expect("the peer");

    let mut peer = bound(peer, &sharing);
    peer.send(&Value::from("hello")).expect("sent");
    let got = timeout(LONG, connection.recv())
        .await
        .expect("in time")
        .expect("received");
    assert_eq!(got, "hello");
}

#[test]
fn outside_a_runtime_a_connection_is_refused_with_an_error() {
    let sharing = SharingContext::new(Authkey::random().expect("a key"));
    let (ours, _theirs) = UnixStream::pair().expect("a socket pair");
    let error =
        tensorshare::tokio::Connection::new(bound(ours, &sharing)).expect_err("no runtime here");
    assert!(error.to_string().contains("tokio runtime"), "{error}");
}

#[tokio::test]
async fn over_tcp_the_same_futures_send_storages_as_bytes() {
    let sharing = SharingContext::new(Authkey::random().expect("a key"));
    let address = tensorshare::connection::Address::tcp("127.0.0.1", 0).expect("an address");
    let mut listener =
        tensorshare::tokio::Listener::new(sharing.listen(&address).expect("listening"))
            .expect("registered");
    let bound = listener.address().clone();
    let server = tokio::spawn(async move {
        let mut connection = listener.accept().await.expect("accepted");
        let value = connection.recv().await.expect("received");
        connection.send(&value).await.expect("sent back");
    });
    let mut client = tensorshare::tokio::Connection::connect(&sharing, &bound)
        .await
        .expect("connected");
    assert!(client.get_ref().get_ref().stream().is_tcp());
    let tensor = Tensor::from_slice(&sharing, &[1.5f64, -2.5, 3.5], &[3]).expect("a tensor");
    client.send(&tensor.clone().into()).await.expect("sent");
    let back = timeout(LONG, client.recv())
        .await
        .expect("in time")
        .expect("received");
    let back = back.as_tensor().expect("a tensor");
    assert_eq!(back, &tensor);
    assert!(
        !back.storage().same_as(tensor.storage()),
        "a copy came over TCP"
    );
    server.await.expect("the server task");
}
