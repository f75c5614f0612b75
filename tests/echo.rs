//! `tensorshare echo` driven from Rust: every case comes back intact and on
//! the same memory, thousands of messages leak nothing, bad peers lose only
//! their own connection, and SIGTERM/SIGINT clean up.

mod support;

use std::time::Duration;

use tensorshare::connection::{AUTHKEY_ENV, Client, ConnectionOptions};
use tensorshare::{Authkey, DType, SharingContext, StrategyKind, Value};
use tensorshare_strategies::file_descriptor::FdSegment;

use support::{Server, cases, open_fds, settle_unfetched, shared_mappings, wait_until};

#[test]
fn every_case_comes_back_intact() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().unwrap();
    let mut server = Server::echo(&authkey, "file_descriptor");
    let sharing = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let mut connection = server.connect(&sharing);
    support::assert_echoes_intact(&mut server, &mut connection, "echo");
}

#[test]
fn an_echoed_storage_is_the_storage_sent() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().unwrap();
    let server = Server::echo(&authkey, "file_descriptor");
    let sharing = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let mut connection = server.connect(&sharing);
    let sent = cases::contiguous(DType::Float32, &[1024], 1, true);
    let (_echoed, storages) = cases::echo_times(&mut connection, &sent, 1);
    // torch's shared_cache semantics: the fd that comes back names the
    // memfd that was sent, so it resolves to the very same storage.
    assert!(storages[0].same_as(sent.storage()));

    // A heap storage is moved into shared memory once, however often it is sent.
    let heap = cases::contiguous(DType::Int32, &[64], 2, false);
    let mut inodes = Vec::new();
    for _ in 0..3 {
        connection.send(&Value::Tensor(heap.clone())).unwrap();
        let back = connection.recv().unwrap();
        let storage = back.as_tensor().unwrap().storage().clone();
        let tensorshare::model::Residence::Local(segment) = storage.residence() else {
            panic!("echoed storage not mapped here");
        };
        inodes.push(
            segment
                .downcast_ref::<FdSegment>()
                .expect("a memfd")
                .identity(),
        );
    }
    assert!(inodes.windows(2).all(|w| w[0] == w[1]), "{inodes:?}");
}

/// The fifth strategy `CONTRIBUTING.md` adds, built with `--cfg
/// tensorshare_tmpfile`: every case goes to `tensorshare echo` and back
/// under it, and what comes back is the memory sent.
#[cfg(tensorshare_tmpfile)]
#[test]
fn the_strategy_contributing_adds_echoes_with_itself() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().unwrap();
    let mut server = Server::echo(&authkey, "tmpfile");
    let sharing = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::Tmpfile);
    let mut connection = server.connect(&sharing);
    support::assert_echoes_intact(&mut server, &mut connection, "echo");
    // Allocated in the strategy's memory, sent from there, and back.
    let sent = tensorshare::Tensor::from_slice(&sharing, &[0.5f32; 1024], &[1024])
        .expect("a tensor in a tmpfile");
    assert_eq!(sent.storage().kind(), StrategyKind::Tmpfile.into());
    let (_echoed, storages) = cases::echo_times(&mut connection, &sent, 1);
    assert!(storages[0].same_as(sent.storage()));
}

#[test]
fn thousands_of_messages_leak_no_fds_or_mappings() {
    let _counts = support::process_counts::counting();
    let authkey = Authkey::random().unwrap();
    let server = Server::echo(&authkey, "file_descriptor");
    let sharing = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let mut connection = server.connect(&sharing);
    let same = Value::Tensor(cases::contiguous(DType::Float32, &[256], 3, true));
    // Alternate one storage sent again and again with fresh ones.
    let mut round = |n: usize| cases::echo_alternating(&mut connection, &same, n, true);
    round(200);
    settle(&sharing);
    let (fds, maps) = (open_fds(server.pid()), shared_mappings(server.pid()));
    let (own_fds, own_maps) = (
        open_fds(std::process::id()),
        shared_mappings(std::process::id()),
    );
    round(3000);
    settle(&sharing);
    // Keys given back late leave the echo's copies open a moment longer.
    let (mut fds_after, mut maps_after) = (0, 0);
    wait_until(Duration::from_secs(15), || {
        (fds_after, maps_after) = (open_fds(server.pid()), shared_mappings(server.pid()));
        fds_after <= fds + 4 && maps_after <= maps + 4
    });
    assert!(
        fds_after <= fds + 4,
        "echo fds grew from {fds} to {fds_after}"
    );
    assert!(
        maps_after <= maps + 4,
        "echo mappings grew from {maps} to {maps_after}"
    );
    let own_after = open_fds(std::process::id());
    assert!(
        own_after <= own_fds + 8,
        "client fds grew from {own_fds} to {own_after}"
    );
    let own_maps_after = shared_mappings(std::process::id());
    assert!(
        own_maps_after <= own_maps + 8,
        "client mappings grew from {own_maps} to {own_maps_after}"
    );
    let stats = sharing.sharer_stats().expect("a sharer");
    assert!(
        stats.released >= 3200 && stats.served == 0,
        "a tensorshare echo maps the fds attached to each message: {stats:?}"
    );
}

/// Lets the fds both sides attached to their messages be given back, so
/// that fd counts show what is held, not what is in flight.
fn settle(sharing: &SharingContext) {
    assert_eq!(settle_unfetched(sharing), 0);
    // The echo's keys go back from this process's release thread, which
    // gathers them for a few milliseconds.
    std::thread::sleep(Duration::from_millis(100));
}

/// Sends `payload` as one message on a fresh connection and expects the
/// server to hang up instead of answering.
fn still_serves(server: &Server, sharing: &SharingContext) {
    let mut connection = server.connect(sharing);
    let value = Value::Tensor(cases::contiguous(DType::Int16, &[8], 5, false));
    connection.send(&value).unwrap();
    let echoed = connection.recv().unwrap();
    cases::check_echo(&value, &echoed).unwrap();
}

#[test]
fn bad_messages_are_answered_with_nothing_and_the_connection_serves_on() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().unwrap();
    let mut server = Server::echo(&authkey, "file_descriptor");
    let sharing = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let marker = tempfile::tempdir().unwrap().path().join("pwned");
    let mut system = b"\x80\x04cposix\nsystem\n(Vtouch ".to_vec();
    system.extend(marker.to_str().unwrap().as_bytes());
    system.extend(b"\ntR.");
    let forged_fd = b"\x80\x02ctorch.multiprocessing.reductions\nrebuild_storage_fd\n(\
        ctorch.storage\nUntypedStorage\ncmultiprocessing.resource_sharer\nDupFd\n)\x81\
        }V_id\nV/nonexistent/socket\nK\x01\x86sbK\x10tR.";
    let mut deep = vec![0x80, 4];
    // 200k empty lists, then APPENDs that put each inside the one below it.
    deep.extend(std::iter::repeat_n(b']', 200_000));
    deep.extend(std::iter::repeat_n(b'a', 199_999));
    deep.push(b'.');
    let payloads: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"\x00\x01not a pickle at all".to_vec()),
        ("os.system", system),
        (
            "builtins.eval",
            b"\x80\x04cbuiltins\neval\n(V1+1\ntR.".to_vec(),
        ),
        (
            "truncated",
            b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00]\x94(K\x01K\x02".to_vec(),
        ),
        ("forged DupFd", forged_fd.to_vec()),
        ("200k-deep nesting", deep),
    ];
    for (name, payload) in &payloads {
        server.expect_refused(&authkey, payload, name);
        still_serves(&server, &sharing);
        assert!(!marker.exists(), "{name}: code ran");
    }
    let wrong = Authkey::new(b"not the key".to_vec());
    assert!(Client::connect(&server.address, &wrong, ConnectionOptions::default()).is_err());
    still_serves(&server, &sharing);

    let stderr = server.stop_and_read_stderr();
    for reason in ["not allowed", "truncated", "cannot fetch"] {
        assert!(
            stderr.contains(reason),
            "stderr lacks {reason:?}:\n{stderr}"
        );
    }
    assert!(
        stderr.lines().all(|l| l.starts_with("tensorshare echo: ")),
        "{stderr}"
    );
}

#[test]
fn sigterm_and_sigint_remove_the_socket() {
    let _counts = support::process_counts::making();
    for signal in ["TERM", "INT"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("echo.sock");
        let authkey = Authkey::random().unwrap();
        let mut command = std::process::Command::new(support::tensorshare_exe());
        command
            .args(["echo", "--listen"])
            .arg(&path)
            .args(["--authkey", &authkey.to_hex()])
            .env("TMPDIR", dir.path());
        // Once with the resource sharer on a socket file next to the echo's:
        // both go.
        if signal == "TERM" {
            command.env(tensorshare::resource_sharer::SHARER_DIR_ENV, dir.path());
        } else {
            command.env_remove(tensorshare::resource_sharer::SHARER_DIR_ENV);
        }
        let mut server = Server::start(command, path.to_str().unwrap().parse().unwrap());
        // Leave an fd unfetched in the echo: a message whose echo is read as
        // bytes, never unpickled, so that its fd is never fetched.
        let sharing = SharingContext::new(authkey.clone());
        let mut connection = server.connect(&sharing);
        connection
            .send(&Value::Tensor(cases::contiguous(
                DType::Float32,
                &[16],
                1,
                true,
            )))
            .unwrap();
        // The echo has answered, so its share is registered.
        connection
            .get_mut()
            .recv_bytes()
            .expect("the echo of the tensor");
        let sharer_dirs = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|entry| {
                entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with("tensorshare-sharer-")
            })
            .count();
        assert_eq!(sharer_dirs, usize::from(signal == "TERM"));
        let status = server.signal_and_wait(signal, Duration::from_secs(10));
        assert!(
            status.success(),
            "SIG{signal}: {status:?}: {}",
            server.read_stderr()
        );
        assert!(!path.exists(), "SIG{signal} left the socket behind");
        let left = support::tree(dir.path());
        assert!(left.is_empty(), "SIG{signal} left {left:?}");
    }
}

#[test]
fn an_unknown_strategy_is_refused_with_advice() {
    let _counts = support::process_counts::making();
    let output = std::process::Command::new(support::tensorshare_exe())
        .args([
            "echo",
            "--listen",
            "@tensorshare-never",
            "--authkey",
            "00",
            "--strategy",
            "carrier_pigeon",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("file_descriptor"), "{stderr}");
}

fn tensorshare(args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(support::tensorshare_exe());
    command.args(args).env_remove(AUTHKEY_ENV);
    command
}

/// A usage error: clap's status, and `error:` naming `needle`.
fn assert_usage_error(output: &std::process::Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains(needle), "{stderr}");
    assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
}

#[test]
fn the_authkey_comes_from_the_environment_a_file_or_the_command_line() {
    let _counts = support::process_counts::making();
    let help = tensorshare(&["echo", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for needle in ["`ps`", AUTHKEY_ENV, "--authkey-file"] {
        assert!(
            help.contains(needle),
            "--help should mention {needle}:\n{help}"
        );
    }

    let authkey = Authkey::random().unwrap();
    let sharing = SharingContext::new(authkey.clone());
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("authkey");
    std::fs::write(&key_file, format!("{}\n", authkey.to_hex())).unwrap();
    let key_file = key_file.to_str().unwrap();

    // From the environment.
    let address = support::unique_address("echo-env");
    let mut command = tensorshare(&["echo", "--listen", &address.to_string()]);
    command.env(AUTHKEY_ENV, authkey.to_hex());
    still_serves(&Server::start(command, address), &sharing);
    // From a file, with a trailing newline.
    let address = support::unique_address("echo-file");
    let command = tensorshare(&[
        "echo",
        "--listen",
        &address.to_string(),
        "--authkey-file",
        key_file,
    ]);
    still_serves(&Server::start(command, address), &sharing);

    // None, or two at once, is a usage error.
    let hex = authkey.to_hex();
    let none = tensorshare(&["echo", "--listen", "@never"])
        .output()
        .unwrap();
    assert_usage_error(&none, AUTHKEY_ENV);
    let env_and_flag = tensorshare(&["echo", "--listen", "@never", "--authkey", &hex])
        .env(AUTHKEY_ENV, &hex)
        .output()
        .unwrap();
    assert_usage_error(&env_and_flag, AUTHKEY_ENV);
    let env_and_file = tensorshare(&["echo", "--listen", "@never", "--authkey-file", key_file])
        .env(AUTHKEY_ENV, &hex)
        .output()
        .unwrap();
    assert_usage_error(&env_and_file, AUTHKEY_ENV);
    let flag_and_file = tensorshare(&[
        "echo",
        "--listen",
        "@never",
        "--authkey",
        &hex,
        "--authkey-file",
        key_file,
    ])
    .output()
    .unwrap();
    assert_usage_error(&flag_and_file, "--authkey-file");
    // An unreadable file or a key that is not hex: usage errors too, and
    // never the key itself.
    let missing = tensorshare(&[
        "echo",
        "--listen",
        "@never",
        "--authkey-file",
        "/nonexistent/authkey",
    ])
    .output()
    .unwrap();
    assert_usage_error(&missing, "/nonexistent/authkey");
    std::fs::write(dir.path().join("bad"), "not hex, a secret\n").unwrap();
    let bad = tensorshare(&["echo", "--listen", "@never", "--authkey-file"])
        .arg(dir.path().join("bad"))
        .output()
        .unwrap();
    assert_usage_error(&bad, "hex");
    assert!(!String::from_utf8_lossy(&bad.stderr).contains("secret"));
}

#[test]
fn help_lists_the_four_strategies() {
    let _counts = support::process_counts::making();
    let names: Vec<&str> = StrategyKind::ALL.iter().map(|kind| kind.name()).collect();
    let short = tensorshare(&["echo", "-h"]).output().unwrap();
    let short = String::from_utf8_lossy(&short.stdout);
    let listed = format!("[possible values: {}]", names.join(", "));
    assert!(short.contains(&listed), "{listed} in:\n{short}");
    // --help describes each.
    let long = tensorshare(&["echo", "--help"]).output().unwrap();
    let long = String::from_utf8_lossy(&long.stdout);
    for name in names {
        assert!(long.contains(&format!("- {name}: ")), "{name} in:\n{long}");
    }
}

#[test]
fn a_zero_message_limit_is_a_usage_error() {
    let _counts = support::process_counts::making();
    for limit in ["0", "-1", ""] {
        let output = support::output_within(
            &mut tensorshare(&[
                "echo",
                "--listen",
                "@never",
                "--authkey",
                "00",
                "--max-message-bytes",
                limit,
            ]),
            Duration::from_secs(10),
        );
        assert_usage_error(&output, "--max-message-bytes");
    }
}
