//! Stock torch on one host and tensorshare on another, over
//! `multiprocessing.connection` on TCP across a veth pair
//! (`support/netns.rs`): a Rust client driving a torch listener here, and
//! `tensorshare echo` serving torch clients in `cross_host_echo.rs`. Every
//! dtype and view, a 3 GiB message each way (the 8-byte length form), a
//! wrong authkey, a sender and a receiver that vanish mid-message, and
//! shared-memory handles refused. The torch side is `compat/python/tcp_peer.py` and
//! `cross_host_peer.py`.

mod support;

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use support::netns::{Host, TorchAcrossHosts};
use support::{Server, cases, python_script};
use tensorshare::connection::Address;
use tensorshare::connection::{Client, ConnectionError, ConnectionOptions};
use tensorshare::model::{Storage, TensorView};
use tensorshare::{Authkey, Connection, DType, Error, SharingContext, Tensor, Value};

/// A stock torch echo listener sending back plain pickles.
const TORCH_ECHO: [&str; 2] = ["tcp_peer.py", "serve"];

/// The torch side of what `tcp_peer.py` does not do.
const CROSS_HOST_PEER: &str = "cross_host_peer.py";

/// `SCRIPT COMMAND` (a script of `compat/python/`) listening on `host`'s
/// IPv4 address, port chosen by the system.
fn torch_listener(
    host: &Host,
    python: &str,
    [script, command]: [&str; 2],
    authkey: &Authkey,
    args: &[&str],
) -> Server {
    let mut torch = host.command(python);
    torch
        .arg(python_script(script))
        .arg(command)
        .args(["--address", &format!("{}:0", host.ipv4())])
        .args(["--authkey", &authkey.to_hex()])
        .args(args);
    Server::start_reporting(torch)
}

/// A connection from this thread to `address`, with `options`, whose
/// values go through `sharing` (and which authenticates with its key).
fn connect(address: &Address, sharing: &SharingContext, options: ConnectionOptions) -> Connection {
    let connection = Client::connect(address, sharing.authkey(), options)
        .unwrap_or_else(|e| panic!("connect to {address}: {e}"));
    Connection::new(connection, sharing).expect("a connection made with the context's key")
}

/// How many fds this process has open.
fn own_fds() -> usize {
    support::open_fds(std::process::id())
}

#[test]
fn a_rust_client_echoes_every_case_through_a_torch_listener_on_another_host() {
    let Some(setup) = TorchAcrossHosts::set_up(
        "a_rust_client_echoes_every_case_through_a_torch_listener_on_another_host",
    ) else {
        return;
    };
    let (python, pair, authkey) = (&setup.python, &setup.pair, &setup.authkey);
    let (torch_host, rust_host) = pair.hosts();
    let torch = torch_listener(torch_host, python, TORCH_ECHO, authkey, &[]);
    let address = torch.address.clone();
    let failures = rust_host.run_on(|| {
        // The context prefers file_system, as by default: over TCP
        // every storage goes as bytes all the same.
        let sharing = SharingContext::new(authkey.clone());
        let mut connection = connect(&address, &sharing, ConnectionOptions::default());
        cases::echo_failures(&mut connection)
    });
    // Torch's plain pickle writes each tensor's storage on its own
    // (`pickle.loads(pickle.dumps([a[:3], a[3:]]))` gives two storages), so
    // views that share a storage come back on two: torch's echo keeps
    // everything else.
    let failures: Vec<&String> = failures
        .iter()
        .filter(|failure| !failure.contains("storage aliasing differs"))
        .collect();
    assert!(failures.is_empty(), "echoes differ: {failures:#?}");
}

#[test]
fn a_wrong_authkey_from_a_rust_client_is_refused_by_a_torch_listener() {
    let Some(setup) = TorchAcrossHosts::set_up(
        "a_wrong_authkey_from_a_rust_client_is_refused_by_a_torch_listener",
    ) else {
        return;
    };
    let (python, pair, authkey) = (&setup.python, &setup.pair, &setup.authkey);
    let (torch_host, rust_host) = pair.hosts();
    let mut torch = torch_listener(torch_host, python, TORCH_ECHO, authkey, &[]);
    let address = torch.address.clone();
    let wrong = Authkey::random().expect("another key");
    let refused = rust_host
        .run_on(|| Client::connect(&address, &wrong, ConnectionOptions::default()))
        .expect_err("a torch listener let a wrong authkey in");
    assert!(refused.is_handshake_failure(), "{refused}");
    assert!(
        refused.to_string().contains(&address.to_string()),
        "{refused}"
    );
    // The listener refused that client only: the right key still gets in.
    let echoed = rust_host.run_on(|| {
        let sharing = SharingContext::new(authkey.clone());
        let mut connection = connect(&address, &sharing, ConnectionOptions::default());
        connection
            .send(&Value::Int(19))
            .and_then(|()| connection.recv())
    });
    let echoed = echoed.expect("an echo after the refusal");
    assert!(matches!(echoed, Value::Int(19)), "{echoed:?}");
    let stderr = torch.stop_and_read_stderr();
    assert!(
        stderr.contains("refused a client: AuthenticationError"),
        "torch's listener said: {stderr}"
    );
}

/// The chunk of the large pattern, as `cross_host_peer.py` has it: its
/// first 8 bytes are the chunk's index (little endian), byte i after them
/// is i % 256.
const LARGE_CHUNK: usize = 1 << 20;

/// 3 GiB: past `i32::MAX`, so the frame's length takes the 8-byte form.
const LARGE_BYTES: usize = 3 << 30;

/// The large pattern with `bump` added to every byte, chunk `index`.
fn large_chunk(template: &[u8], index: usize, bump: u8) -> Vec<u8> {
    let mut chunk = template.to_vec();
    for (byte, marker) in chunk.iter_mut().zip((index as u64).to_le_bytes()) {
        *byte = marker.wrapping_add(bump);
    }
    chunk
}

/// The pattern's template chunk with `bump` added to every byte.
fn large_template(bump: u8) -> Vec<u8> {
    (0..LARGE_CHUNK)
        .map(|i| (i % 256) as u8)
        .map(|b| b.wrapping_add(bump))
        .collect()
}

/// A uint8 tensor of `LARGE_BYTES` holding the pattern.
fn large_tensor() -> Tensor {
    let template = large_template(0);
    let mut bytes = vec![0u8; LARGE_BYTES];
    for (index, chunk) in bytes.chunks_exact_mut(LARGE_CHUNK).enumerate() {
        chunk.copy_from_slice(&template);
        chunk[..8].copy_from_slice(&(index as u64).to_le_bytes());
    }
    let view = TensorView::contiguous(DType::UInt8, &[LARGE_BYTES]);
    Tensor::new(Storage::from_vec(bytes), view).expect("a contiguous view")
}

/// The first chunk of `bytes` that is not the pattern with `bump` added.
fn first_wrong_chunk(bytes: &[u8], bump: u8) -> Option<usize> {
    let template = large_template(bump);
    bytes
        .chunks(LARGE_CHUNK)
        .enumerate()
        .position(|(index, chunk)| chunk != large_chunk(&template, index, bump))
}

#[test]
fn a_3_gib_tensor_crosses_to_torch_and_back_in_the_long_length_form() {
    let Some(setup) = TorchAcrossHosts::set_up(
        "a_3_gib_tensor_crosses_to_torch_and_back_in_the_long_length_form",
    ) else {
        return;
    };
    let (python, pair, authkey) = (&setup.python, &setup.pair, &setup.authkey);
    let (torch_host, rust_host) = pair.hosts();
    let mut torch = torch_listener(torch_host, python, [CROSS_HOST_PEER, "large"], authkey, &[]);
    let address = torch.address.clone();
    let options = ConnectionOptions::default().with_max_message_bytes(LARGE_BYTES + (1 << 20));
    let (sent_in, received_in, echoed) = rust_host.run_on(|| {
        let sharing = SharingContext::new(authkey.clone());
        let mut connection = connect(&address, &sharing, options);
        // One copy of the tensor at a time on each side: ours is gone
        // once sent, before torch sends its own back.
        let tensor = Value::Tensor(large_tensor());
        let start = Instant::now();
        connection.send(&tensor).expect("send 3 GiB");
        let sent_in = start.elapsed();
        drop(tensor);
        let start = Instant::now();
        let echoed = connection.recv().expect("receive 3 GiB");
        (sent_in, start.elapsed(), echoed)
    });
    let Value::Tensor(echoed) = echoed else {
        panic!("torch sent back {echoed:?}, not a tensor");
    };
    assert_eq!(echoed.dtype(), DType::UInt8);
    assert_eq!(echoed.sizes(), [LARGE_BYTES]);
    let bytes = echoed
        .storage()
        .bytes()
        .expect("received bytes are in this process");
    assert_eq!(first_wrong_chunk(bytes, 1), None, "the echo differs");
    drop(echoed);
    let log = torch.stop_and_read_stderr();
    eprintln!(
        "3 GiB across the veth: Rust to torch {:.2} s ({:.2} GB/s), torch to Rust {:.2} s \
         ({:.2} GB/s, torch pickling included){}",
        sent_in.as_secs_f64(),
        LARGE_BYTES as f64 / sent_in.as_secs_f64() / 1e9,
        received_in.as_secs_f64(),
        LARGE_BYTES as f64 / received_in.as_secs_f64() / 1e9,
        if log.is_empty() {
            String::new()
        } else {
            format!("; torch said: {log}")
        }
    );
}

#[test]
fn a_torch_sender_that_vanishes_mid_message_fails_the_read_within_its_timeout() {
    let Some(setup) = TorchAcrossHosts::set_up(
        "a_torch_sender_that_vanishes_mid_message_fails_the_read_within_its_timeout",
    ) else {
        return;
    };
    let (python, pair, authkey) = (&setup.python, &setup.pair, &setup.authkey);
    let (torch_host, rust_host) = pair.hosts();
    let mut torch = torch_listener(
        torch_host,
        python,
        [CROSS_HOST_PEER, "send-large"],
        authkey,
        &[],
    );
    let address = torch.address.clone();
    let fds_before = own_fds();
    let timeout = Duration::from_secs(3);
    let sharing = SharingContext::new(authkey.clone());
    let mut connection =
        rust_host.run_on(|| connect(&address, &sharing, ConnectionOptions::default()));
    // Torch writes 256 MiB, pickled before it listened, as soon as the
    // connection is up. Unread, at most the socket buffers' few MiB of it
    // get through before its write blocks: the message is in flight when
    // the link goes down and its sender is gone.
    std::thread::sleep(Duration::from_millis(500));
    pair.take_link_down(torch_host);
    let _ = torch.child.kill();
    let _ = torch.child.wait();

    connection
        .get_mut()
        .set_read_timeout(Some(timeout))
        .expect("set a read timeout");
    let start = Instant::now();
    let error = connection
        .recv()
        .expect_err("a message from a vanished sender");
    let waited = start.elapsed();
    assert!(
        matches!(error, Error::Connection(ConnectionError::ReadTimeout)),
        "{error}"
    );
    // It fails by its timeout, not by a hang nor by anything the dead
    // peer could have said.
    assert!(
        waited >= timeout && waited < timeout + Duration::from_secs(10),
        "failed after {waited:?} with a read timeout of {timeout:?}"
    );
    eprintln!("a vanished sender: `{error}` after {waited:.2?}");
    drop(connection);
    assert_eq!(own_fds(), fds_before, "fds left after the failed read");
}

#[test]
fn a_rust_sender_whose_torch_receiver_vanishes_fails_the_write_within_its_timeout() {
    let Some(setup) = TorchAcrossHosts::set_up(
        "a_rust_sender_whose_torch_receiver_vanishes_fails_the_write_within_its_timeout",
    ) else {
        return;
    };
    let (python, pair, authkey) = (&setup.python, &setup.pair, &setup.authkey);
    let (torch_host, rust_host) = pair.hosts();
    let mut torch = torch_listener(torch_host, python, [CROSS_HOST_PEER, "stall"], authkey, &[]);
    let address = torch.address.clone();
    let fds_before = own_fds();
    let timeout = Duration::from_secs(3);
    let (error, waited) = std::thread::scope(|scope| {
        // 256 MiB that torch never reads: the write blocks once the
        // socket buffers' few MiB are full, and then the link goes down.
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(500));
            pair.take_link_down(torch_host);
        });
        rust_host.run_on(|| {
            let sharing = SharingContext::new(authkey.clone());
            let mut connection = connect(&address, &sharing, ConnectionOptions::default());
            connection
                .get_mut()
                .set_write_timeout(Some(timeout))
                .expect("set a write timeout");
            let view = TensorView::contiguous(DType::UInt8, &[256 << 20]);
            let storage = Storage::from_vec(vec![7; 256 << 20]);
            let tensor = Value::Tensor(Tensor::new(storage, view).expect("a contiguous view"));
            let start = Instant::now();
            let error = connection
                .send(&tensor)
                .expect_err("256 MiB sent to a receiver that is gone");
            (error, start.elapsed())
        })
    });
    let _ = torch.child.kill();
    let Error::Connection(ConnectionError::Send { cause, .. }) = &error else {
        panic!("{error}");
    };
    assert!(
        matches!(cause.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{error}"
    );
    assert!(error.to_string().contains("write timeout"), "{error}");
    // The timeout bounds each write call (`SO_SNDTIMEO`), and a call that
    // moved some bytes into the socket buffers, which keep growing for a
    // while after the link went down, starts the next one: a few timeouts
    // at most, never a hang.
    assert!(
        waited >= timeout && waited < timeout * 5,
        "failed after {waited:?} with a write timeout of {timeout:?}"
    );
    eprintln!("a vanished receiver: `{error}` after {waited:.2?}");
    assert_eq!(own_fds(), fds_before, "fds left after the failed send");
}

#[test]
fn shared_memory_handles_from_a_torch_listener_are_refused() {
    let Some(setup) =
        TorchAcrossHosts::set_up("shared_memory_handles_from_a_torch_listener_are_refused")
    else {
        return;
    };
    let (python, pair, authkey) = (&setup.python, &setup.pair, &setup.authkey);
    let (torch_host, rust_host) = pair.hosts();
    for (strategy, form) in [
        ("file_descriptor", "rebuild_storage_fd"),
        ("file_system", "rebuild_storage_filename"),
    ] {
        let torch = torch_listener(
            torch_host,
            python,
            [CROSS_HOST_PEER, "serve-shared"],
            authkey,
            &["--strategy", strategy],
        );
        let address = torch.address.clone();
        let error = rust_host.run_on(|| {
            let sharing = SharingContext::new(authkey.clone());
            let mut connection = connect(&address, &sharing, ConnectionOptions::default());
            let tensor = Value::Tensor(cases::contiguous(DType::Float32, &[4], 1, false));
            connection.send(&tensor).expect("send a tensor");
            connection
                .recv()
                .expect_err("a shared-memory handle from another host was taken")
        });
        // The rebuilder's failure, naming it, around the refusal.
        let Error::Attach { cause, .. } = &error else {
            panic!("{strategy}: {error}");
        };
        let Error::SharedMemoryOverTcp {
            form: refused,
            peer,
        } = cause.as_ref()
        else {
            panic!("{strategy}: {error}");
        };
        assert_eq!(*refused, form);
        assert_eq!(peer.map(|peer| peer.ip()), Some(torch_host.ipv4()));
        let message = error.to_string();
        assert!(
            message.contains("shared memory does not cross hosts")
                && message.contains("pickle.dumps(obj)"),
            "{message}"
        );
    }
}
