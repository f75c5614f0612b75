//! The memmap files of a sender killed by SIGKILL: nobody removes them as
//! it would have, and no receiver says when it is done with one. They are
//! reclaimed, once no process maps them, by `tensorshare gc` and by the
//! next memmap sender's first file in the directory; a file still mapped,
//! and the files of a sender that keeps its files, are left.

mod support;

use std::path::Path;
use std::time::Duration;

use tensorshare::{Authkey, DType, SharingContext, StrategyKind, Value};
use tensorshare_strategies::memmap::MemmapFileName;

use support::{Server, cases, files_in, wait_until};

/// `tensorshare echo --strategy memmap` with its files in `dir`, and
/// `flags`.
fn memmap_echo(authkey: &Authkey, dir: &Path, flags: &[&str]) -> Server {
    let (mut command, address) = Server::echo_command(authkey, "memmap");
    command.arg("--memmap-dir").arg(dir).args(flags);
    Server::start(command, address)
}

/// Sends `count` tensors inline to a memmap echo in `dir`, which answers
/// each in a file of its own, then SIGKILLs it; returns the echoes, each
/// mapping its file here.
fn echoes_of_a_killed_sender(dir: &Path, count: usize, flags: &[&str]) -> Vec<Value> {
    let authkey = Authkey::random().expect("authkey");
    let mut server = memmap_echo(&authkey, dir, flags);
    // Inline copies: every echo is a file the server made.
    let sharing = SharingContext::new(authkey.clone())
        .with_strategy(StrategyKind::Bytes)
        .with_memmap_dir(dir)
        .expect("a memmap directory");
    let mut connection = server.connect(&sharing);
    let echoes: Vec<Value> = (0..count)
        .map(|i| {
            let tensor = cases::contiguous(DType::Float32, &[256], i as u8 + 1, false);
            connection
                .send(&Value::Tensor(tensor))
                .expect("send a tensor");
            connection.recv().expect("its echo")
        })
        .collect();
    server.child.kill().expect("SIGKILL the echo");
    server.child.wait().expect("reap it");
    echoes
}

fn gc(dir: &Path) -> String {
    gc_with_min_age(dir, "0")
}

fn gc_with_min_age(dir: &Path, min_age: &str) -> String {
    let output = support::gc_without_segments([
        "--min-age".as_ref(),
        min_age.as_ref(),
        "--memmap-dir".as_ref(),
        dir.as_os_str(),
    ]);
    support::expect_success(&output, "tensorshare gc")
}

#[test]
fn a_killed_senders_files_are_kept_while_a_receiver_may_still_open_them() {
    let dir = tempfile::tempdir().expect("a memmap directory");
    // Sent within the echo's unfetched lifetime (300 s): a receiver may
    // still open each, and torch's from_file would make a file of zeros
    // in place of one removed.
    drop(echoes_of_a_killed_sender(dir.path(), 2, &[]));
    let sent = files_in(dir.path());
    assert_eq!(sent.len(), 2);
    // Past a grace of 1 s for fresh files: the mark alone keeps them.
    std::thread::sleep(Duration::from_millis(1200));
    let stdout = gc_with_min_age(dir.path(), "1");
    assert_eq!(files_in(dir.path()), sent, "{stdout}");
    assert!(
        stdout.contains("marked it as named by a message a receiver may still open"),
        "{stdout}"
    );
    // An operator's --min-age 0 takes them all the same.
    let stdout = gc(dir.path());
    assert!(files_in(dir.path()).is_empty(), "{stdout}");
}

#[test]
fn gc_reclaims_a_killed_senders_files_once_nobody_maps_them() {
    let dir = tempfile::tempdir().expect("a memmap directory");
    let mut echoes = echoes_of_a_killed_sender(dir.path(), 3, &[]);
    let left = files_in(dir.path());
    assert_eq!(left.len(), 3, "the killed sender's files: {left:?}");
    for file in &left {
        let name = file
            .file_name()
            .and_then(|name| name.to_str())
            .expect("a name");
        MemmapFileName::parse(name).expect("a memmap file name with its creator's pid");
    }

    // One echo still maps its file here: that one stays.
    let mapped = echoes.pop().expect("an echo");
    drop(echoes);
    let stdout = gc(dir.path());
    assert_eq!(files_in(dir.path()).len(), 1, "{stdout}");
    assert!(
        stdout.contains(&format!("kept: held by pid {}", std::process::id())),
        "{stdout}"
    );
    assert!(
        stdout.contains("2 memmap files, 2048 bytes (2.0 KiB) removed"),
        "{stdout}"
    );

    drop(mapped);
    let stdout = gc(dir.path());
    assert!(files_in(dir.path()).is_empty(), "{stdout}");
}

#[test]
fn the_next_sender_reclaims_a_killed_senders_files() {
    let dir = tempfile::tempdir().expect("a memmap directory");
    // Its files are awaited by receivers for 2 s after their send.
    drop(echoes_of_a_killed_sender(
        dir.path(),
        2,
        &["--unfetched-lifetime", "2"],
    ));
    assert_eq!(files_in(dir.path()).len(), 2);

    // A new sender's first file in the directory: once the grace for fresh
    // files and the mark have passed, the dead sender's go, and the new one
    // stays.
    let sharing = SharingContext::new(Authkey::random().expect("authkey"))
        .with_strategy(StrategyKind::Memmap)
        .with_memmap_dir(dir.path())
        .expect("a memmap directory");
    let tensor = cases::contiguous(DType::Float32, &[256], 9, false);
    let pickle = sharing.dumps(&Value::Tensor(tensor)).expect("dumps");
    let ours = files_in(dir.path())
        .into_iter()
        .filter(|file| {
            file.to_string_lossy()
                .contains(&format!("_{}_", std::process::id()))
        })
        .collect::<Vec<_>>();
    assert_eq!(ours.len(), 1, "the new sender's file");
    assert!(
        wait_until(Duration::from_secs(20), || files_in(dir.path()) == ours),
        "left: {:?}",
        files_in(dir.path())
    );
    drop(pickle);
}

#[test]
fn kept_files_of_a_killed_sender_are_never_reclaimed() {
    let dir = tempfile::tempdir().expect("a memmap directory");
    drop(echoes_of_a_killed_sender(dir.path(), 2, &["--keep-files"]));
    let kept = files_in(dir.path());
    assert_eq!(kept.len(), 2);
    let stdout = gc(dir.path());
    assert_eq!(files_in(dir.path()), kept, "{stdout}");
}
