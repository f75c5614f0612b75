//! The `memmap` strategy end to end: `tensorshare echo --strategy memmap`
//! driven from Rust and from stock torch, torch rebuilding our files by
//! itself, hostile file references refused, truncation read as zeros, and
//! files removed with their last holder.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use tensorshare::model::Storage;
use tensorshare::{Authkey, DType, Error, SharingContext, StrategyKind, Value};
use tensorshare_compat::pickle::PickleBuilder;
use tensorshare_compat::pickle::{EncodeOptions, Node, NodeId, encode};
use tensorshare_strategies::memmap::MemmapSegment;

use support::cases::tensor_over;
use support::{Server, UnreadMessage, cases, files_in, test_python, unique_address};

/// A context that sends with memmap files in `dir`.
fn memmap_context(authkey: &Authkey, dir: &Path) -> SharingContext {
    SharingContext::new(authkey.clone())
        .with_strategy(StrategyKind::Memmap)
        .with_memmap_dir(dir)
        .expect("a memmap directory")
}

/// `tensorshare echo --strategy memmap` with its files in `dir`.
fn memmap_echo(authkey: &Authkey, dir: &Path) -> Server {
    memmap_echo_with(authkey, dir, &[])
}

fn memmap_echo_with(authkey: &Authkey, dir: &Path, flags: &[&str]) -> Server {
    let (mut command, address) = Server::echo_command(authkey, "memmap");
    command
        .arg("--memmap-dir")
        .arg(dir)
        .args(flags)
        // The flag, not the environment, must be what places the files.
        .env("TMPDIR", "/nonexistent");
    Server::start(command, address)
}

fn memmap_segment(storage: &Storage) -> &MemmapSegment {
    storage
        .local_segment::<MemmapSegment>()
        .expect("a memmap file mapped here")
}

/// Adds `getattr(torch._C.StorageBase, 'from_file')(path, shared, nbytes)`.
fn from_file_call(
    out: &mut PickleBuilder,
    class: (&'static str, &'static str),
    path: &str,
    shared: bool,
    nbytes: usize,
) -> NodeId {
    let getattr = out.global("builtins", "getattr");
    let class = out.global(class.0, class.1);
    let attribute = out.push(Node::Str("from_file".into()));
    let from_file = out.call(getattr, vec![class, attribute]);
    let path = out.push(Node::Str(path.into()));
    let shared = out.push(Node::Bool(shared));
    let nbytes = out.int(nbytes);
    out.call(from_file, vec![path, shared, nbytes])
}

/// A uint8 tensor over `from_file(path, True, nbytes)`.
fn memmap_tensor_pickle(path: &Path, nbytes: usize) -> Vec<u8> {
    let mut out = PickleBuilder::default();
    let path = path.to_str().expect("UTF-8 path");
    let storage = from_file_call(&mut out, ("torch._C", "StorageBase"), path, true, nbytes);
    tensor_over(out, storage, nbytes)
}

#[test]
fn every_case_comes_back_intact() {
    let dir = tempfile::tempdir().unwrap();
    let authkey = Authkey::random().unwrap();
    let mut server = memmap_echo(&authkey, dir.path());
    let sharing = memmap_context(&authkey, dir.path());
    let mut connection = server.connect(&sharing);
    support::assert_echoes_intact(&mut server, &mut connection, "memmap echo");
}

#[test]
fn an_echoed_file_is_the_one_sent_and_removed_with_its_last_holder() {
    let dir = tempfile::tempdir().unwrap();
    let authkey = Authkey::random().unwrap();
    let mut server = memmap_echo(&authkey, dir.path());
    let sharing = memmap_context(&authkey, dir.path());
    let mut connection = server.connect(&sharing);

    // A heap storage moves into one file, however often it is sent.
    let sent = cases::contiguous(DType::Float32, &[1024], 1, false);
    let (echoed, storages) = cases::echo_times(&mut connection, &sent, 3);
    assert!(storages.windows(2).all(|w| w[0].same_as(&w[1])));
    assert_eq!(storages[0].bytes(), sent.storage().bytes());
    let segment = memmap_segment(&storages[0]);
    assert!(segment.removes_file(), "the echo is our own file");
    let path = segment.path().to_path_buf();
    assert_eq!(files_in(dir.path()), vec![path.clone()]);
    let mode = std::fs::metadata(&path).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );

    // The echo server never removes our file; we do, once the tensor, its
    // echoes and the context (which keeps what it sent for its receivers
    // while they live) let go of it.
    drop((echoed, storages));
    assert_eq!(sharing.held_memmap_files(), 1, "the one file sent");
    drop(sent);
    assert!(
        path.exists(),
        "the context holds what it sent to a live receiver"
    );
    server.stop_and_read_stderr();
    let gone = support::wait_until(std::time::Duration::from_secs(3), || !path.exists());
    assert!(gone, "the context let go of a file whose receiver exited");
    assert_eq!(sharing.held_memmap_files(), 0);
    assert!(files_in(dir.path()).is_empty());
}

#[test]
fn a_context_allocates_in_its_memmap_dir_and_sends_that_file() {
    let dir = tempfile::tempdir().unwrap();
    let sharing = memmap_context(&Authkey::new(*b"key"), dir.path());
    let mut writer = sharing.allocate(4096).expect("allocate");
    writer.as_bytes_mut().fill(3);
    let storage = writer.freeze();
    let allocated = files_in(dir.path());
    assert_eq!(
        allocated.len(),
        1,
        "the allocation is a file of the context's directory"
    );
    assert_eq!(memmap_segment(&storage).path(), allocated[0]);

    let view = tensorshare::model::TensorView::contiguous(DType::UInt8, &[4096]);
    let tensor = tensorshare::Tensor::new(storage.clone(), view).unwrap();
    let pickle = sharing.dumps(&Value::Tensor(tensor)).expect("dumps");
    assert_eq!(files_in(dir.path()), allocated, "sent as it is, not copied");
    let back = sharing.loads(&pickle).expect("loads");
    let [back] = &back.tensors()[..] else {
        panic!("one tensor")
    };
    assert!(back.storage().same_as(&storage));
}

#[test]
fn kept_files_outlive_their_holders() {
    let dir = tempfile::tempdir().unwrap();
    let authkey = Authkey::random().unwrap();
    let sharing = memmap_context(&authkey, dir.path()).with_memmap_keep_files(true);
    let sent = cases::contiguous(DType::UInt8, &[100], 9, false);
    let bytes = sharing.dumps(&Value::Tensor(sent.clone())).unwrap();
    drop(sent);
    sharing.shutdown();
    let files = files_in(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    // Another process (here: a fresh context) still maps it.
    let other = memmap_context(&authkey, dir.path());
    let back = other.loads(&bytes).unwrap();
    let tensor = back.as_tensor().expect("a tensor");
    assert_eq!(tensor.storage().nbytes(), 100);
    assert!(!memmap_segment(tensor.storage()).removes_file());
}

/// A process that shuts its context down and exits with threads still
/// holding it (a server on SIGTERM) leaves no file kept for reuse.
#[test]
fn shutdown_removes_the_files_kept_for_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let sharing = memmap_context(&Authkey::random().unwrap(), dir.path());
    let storage = sharing.allocate(4096).unwrap().freeze();
    drop(storage);
    assert_eq!(files_in(dir.path()).len(), 1, "the file is kept for reuse");
    sharing.shutdown();
    assert_eq!(files_in(dir.path()), Vec::<PathBuf>::new());
}

#[test]
fn echo_removes_the_files_it_made_unless_told_to_keep_them() {
    for (flags, kept) in [(&[][..], 0), (&["--keep-files"][..], 1)] {
        let dir = tempfile::tempdir().unwrap();
        let authkey = Authkey::random().unwrap();
        let mut server = memmap_echo_with(&authkey, dir.path(), flags);
        // Sent inline, so the echo writes a file of its own for the reply.
        let sharing = memmap_context(&authkey, dir.path()).with_strategy(StrategyKind::Bytes);
        let mut connection = server.connect(&sharing);
        let sent = cases::contiguous(DType::Int64, &[64], 5, false);
        let (echoed, storages) = cases::echo_times(&mut connection, &sent, 1);
        assert_eq!(storages[0].bytes(), sent.storage().bytes());
        let segment = memmap_segment(&storages[0]);
        assert!(!segment.removes_file(), "the echo's file, not ours");
        assert_eq!(files_in(dir.path()), vec![segment.path().to_path_buf()]);
        drop(connection);
        let status = server.signal_and_wait("TERM", std::time::Duration::from_secs(10));
        assert!(status.success(), "{status:?}");
        drop((echoed, storages));
        assert_eq!(files_in(dir.path()).len(), kept, "{flags:?}");
    }
}

#[test]
fn stock_torch_drives_our_memmap_echo() {
    let Some(python) = test_python("memmap::stock_torch_drives_our_memmap_echo") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let authkey = Authkey::random().unwrap();
    let mut server = memmap_echo(&authkey, dir.path());
    // torch sends by file_descriptor (it has no memmap strategy) and gets
    // every echo back as a file it maps itself with from_file.
    let stdout = support::torch_drives(
        &python,
        &mut server,
        &authkey,
        &["--strategy", "memmap", "--hostile", "--repeat", "300"],
    );
    assert!(stdout.contains("ok zero_copy"), "{stdout}");
    // SIGTERM releases everything the echo sent: its files go with it.
    let status = server.signal_and_wait("TERM", std::time::Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    assert!(
        files_in(dir.path()).is_empty(),
        "{:?}",
        files_in(dir.path())
    );
}

#[test]
fn a_stock_torch_echo_answers_our_memmap_tensors() {
    let Some(python) = test_python("memmap::a_stock_torch_echo_answers_our_memmap_tensors") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let authkey = Authkey::random().unwrap();
    // torch maps each file with from_file, which keeps no fd: it can send
    // such a storage on by file_system only (echo_peer.py serve says why).
    let mut server = Server::torch_echo(&python, &authkey, "memmap");
    let sharing = memmap_context(&authkey, dir.path());
    let mut connection = server.connect(&sharing);
    support::assert_echoes_intact(&mut server, &mut connection, "torch echo");
}

#[test]
fn torch_rebuilds_our_pickle_and_writes_through_the_file() {
    let Some(python) = test_python("memmap::torch_rebuilds_our_pickle") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sharing = memmap_context(&Authkey::random().unwrap(), dir.path());
    let sent = cases::contiguous(DType::Int32, &[4, 4], 0, false);
    let bytes = sharing.dumps(&Value::Tensor(sent.clone())).unwrap();
    let script = r#"
import pickle, sys, torch
t = pickle.loads(sys.stdin.buffer.read())
assert type(t) is torch.Tensor and t.dtype == torch.int32 and t.shape == (4, 4), t
assert t.untyped_storage().filename is not None
print(int(t.long().sum()))
t[0, 0] = 12345
"#;
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected: i64 = sent
        .to_contiguous_bytes()
        .unwrap()
        .chunks(4)
        .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap())))
        .sum();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        expected.to_string()
    );
    // torch wrote into the file this process maps.
    let file = files_in(dir.path()).pop().expect("the sent file");
    let back = sharing.loads(&memmap_tensor_pickle(&file, 64)).unwrap();
    let storage = back.as_tensor().unwrap().storage().clone();
    assert_eq!(&storage.bytes().unwrap()[..4], &12345i32.to_le_bytes());
}

/// The error of loading `pickle`, which must be refused.
fn refused(sharing: &SharingContext, pickle: &[u8]) -> String {
    match sharing.loads(pickle) {
        Ok(value) => panic!("accepted: {value:?}"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn hostile_file_references_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let sharing = memmap_context(&Authkey::random().unwrap(), dir.path());

    // A file outside the memmap directory, however it is spelled.
    let secret = outside.path().join("secret");
    std::fs::write(&secret, [7u8; 64]).unwrap();
    let dotdot = dir
        .path()
        .join("..")
        .join(outside.path().file_name().unwrap())
        .join("secret");
    for path in [secret.clone(), dotdot, PathBuf::from("/etc/passwd")] {
        let err = refused(&sharing, &memmap_tensor_pickle(&path, 4));
        assert!(err.contains("StorageBase.from_file"), "{err}");
        assert!(err.contains("memmap path"), "{err}");
    }
    let relative = memmap_tensor_pickle(Path::new("relative.mmap"), 4);
    assert!(refused(&sharing, &relative).contains("not an absolute"));

    // A symbolic link inside the directory to a file outside.
    let link = dir.path().join("link.mmap");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let err = refused(&sharing, &memmap_tensor_pickle(&link, 4));
    assert!(err.contains("symbolic link"), "{err}");

    // A missing file, a file too small for the message, a directory.
    let err = refused(&sharing, &memmap_tensor_pickle(&dir.path().join("gone"), 4));
    assert!(err.contains("does not exist"), "{err}");
    let small = dir.path().join("small.mmap");
    std::fs::write(&small, [1u8; 10]).unwrap();
    let err = refused(&sharing, &memmap_tensor_pickle(&small, 11));
    assert!(
        err.contains("holds 10 bytes but the message announces 11"),
        "{err}"
    );
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let err = refused(&sharing, &memmap_tensor_pickle(&dir.path().join("sub"), 0));
    assert!(err.contains("not a regular file"), "{err}");

    // Nothing was created or changed.
    assert_eq!(std::fs::read(&secret).unwrap(), [7u8; 64]);
    assert_eq!(std::fs::read(&small).unwrap(), [1u8; 10]);
}

#[test]
fn getattr_is_allowed_only_for_from_file() {
    let dir = tempfile::tempdir().unwrap();
    let sharing = memmap_context(&Authkey::random().unwrap(), dir.path());
    let file = dir.path().join("data.mmap");
    std::fs::write(&file, [3u8; 8]).unwrap();
    let path = file.to_str().unwrap();

    // The accepted form, through each storage class spelling.
    for class in [
        ("torch._C", "StorageBase"),
        ("torch.storage", "UntypedStorage"),
        ("torch", "UntypedStorage"),
    ] {
        let mut out = PickleBuilder::default();
        let storage = from_file_call(&mut out, class, path, true, 8);
        let value = sharing.loads(&tensor_over(out, storage, 8)).unwrap();
        assert_eq!(
            value.as_tensor().unwrap().storage().bytes(),
            Some(&[3u8; 8][..])
        );
    }

    // Not shared: torch would read a private copy.
    let mut out = PickleBuilder::default();
    let storage = from_file_call(&mut out, ("torch._C", "StorageBase"), path, false, 8);
    let err = refused(&sharing, &tensor_over(out, storage, 8));
    assert!(err.contains("StorageBase.from_file"), "{err}");

    // Another attribute, another object, another argument count.
    let getattr_of = |module: &'static str, name: &'static str, attribute: &str| {
        let mut out = PickleBuilder::default();
        let getattr = out.global("builtins", "getattr");
        let object = out.global(module, name);
        let attribute = out.push(Node::Str(attribute.into()));
        let function = out.call(getattr, vec![object, attribute]);
        let argument = out.push(Node::Str(path.into()));
        let called = out.call(function, vec![argument]);
        encode(&out.finish(called), &EncodeOptions::new()).unwrap()
    };
    for (module, name, attribute) in [
        ("torch._C", "StorageBase", "from_buffer"),
        ("torch", "Tensor", "from_file"),
        ("torch", "float32", "from_file"),
    ] {
        let err = refused(&sharing, &getattr_of(module, name, attribute));
        assert!(err.contains("builtins.getattr"), "{err}");
    }
    // A global that is not allowed at all is refused by name while decoding.
    let err = refused(&sharing, &getattr_of("os", "system", "from_file"));
    assert!(err.contains("os.system"), "{err}");
    assert!(matches!(
        sharing.loads(&getattr_of("os", "system", "x")),
        Err(Error::Decode(_))
    ));
    let err = refused(
        &sharing,
        &getattr_of("torch._C", "StorageBase", "from_file"),
    );
    assert!(err.contains("StorageBase.from_file"), "{err}");
}

#[test]
fn a_file_truncated_under_the_mapping_reads_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let sharing = memmap_context(&Authkey::random().unwrap(), dir.path());
    let file = dir.path().join("shrinks.mmap");
    let nbytes = 4 * 4096;
    std::fs::write(&file, vec![5u8; nbytes]).unwrap();
    let value = sharing.loads(&memmap_tensor_pickle(&file, nbytes)).unwrap();
    let storage = value.as_tensor().unwrap().storage().clone();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let bytes = storage.bytes().unwrap();
    assert!(bytes[..4096].iter().all(|&b| b == 5));
    assert!(
        bytes[4096..].iter().all(|&b| b == 0),
        "lost pages read zeros"
    );
    assert!(memmap_segment(&storage).was_truncated());
    // Received files are not ours to remove.
    drop((value, storage));
    assert!(file.exists());
}

#[test]
fn one_file_named_twice_is_one_storage() {
    let dir = tempfile::tempdir().unwrap();
    let sharing = memmap_context(&Authkey::random().unwrap(), dir.path());
    let file = dir.path().join("twice.mmap");
    std::fs::write(&file, [1u8; 32]).unwrap();
    let pickle = memmap_tensor_pickle(&file, 32);
    let a = sharing.loads(&pickle).unwrap();
    let b = sharing.loads(&pickle).unwrap();
    let storage = |v: &Value| v.as_tensor().unwrap().storage().clone();
    assert!(storage(&a).same_as(&storage(&b)));
    // A file replaced at the same path is another storage.
    drop(b);
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, [2u8; 32]).unwrap();
    let c = sharing.loads(&pickle).unwrap();
    assert!(!storage(&a).same_as(&storage(&c)));
    assert_eq!(storage(&c).bytes(), Some(&[2u8; 32][..]));
}

/// What a memmap echo server holds: fds, shared mappings (memfds,
/// `/dev/shm` files and files in its memmap directory), resident memory
/// and files in that directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ServerState {
    fds: usize,
    mappings: usize,
    rss_kib: usize,
    files: usize,
}

impl ServerState {
    fn of(pid: u32, dir: &Path) -> Self {
        let prefix = format!("{}/", dir.display());
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("read maps");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
        let rss_kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .expect("VmRSS in /proc/PID/status");
        Self {
            fds: support::open_fds(pid),
            mappings: support::shared_mappings(pid)
                + maps.lines().filter(|line| line.contains(&prefix)).count(),
            rss_kib,
            files: files_in(dir).len(),
        }
    }

    /// `fds=F mappings=M rss_kib=R files=D`, as `memmap_soak.py` prints it.
    fn parse(text: &str) -> Self {
        let field = |name: &str| -> usize {
            text.split_whitespace()
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {text:?}"))
        };
        Self {
            fds: field("fds"),
            mappings: field("mappings"),
            rss_kib: field("rss_kib"),
            files: field("files"),
        }
    }
}

#[test]
fn a_long_torch_stream_leaves_the_memmap_echo_flat_and_idle_frees_the_rest() {
    let Some(python) = test_python("memmap::a_long_torch_stream_leaves_the_memmap_echo_flat")
    else {
        return;
    };
    const MESSAGES: usize = 2000;
    const HELD: usize = 64;
    let dir = tempfile::tempdir().unwrap();
    let authkey = Authkey::random().unwrap();
    let address = unique_address("memmap-soak");
    // Under the fd limit that used to drop a client after ~1,013 messages.
    let mut command = Command::new("sh");
    command
        .args(["-c", r#"ulimit -n 1024 && exec "$0" "$@""#])
        .arg(support::tensorshare_exe())
        .args(["echo", "--listen", &address.to_string()])
        .args(["--authkey", &authkey.to_hex(), "--strategy", "memmap"])
        .arg("--memmap-dir")
        .arg(dir.path())
        .args(["--unfetched-lifetime", "2", "--max-held-files"])
        .arg(HELD.to_string());
    let mut server = Server::start(command, address);
    let pid = server.pid();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    assert!(
        limits
            .lines()
            .any(|line| line.starts_with("Max open files") && line.contains(" 1024 ")),
        "{limits}"
    );
    let baseline = ServerState::of(pid, dir.path());

    let output = Command::new(&python)
        .arg(support::python_script("memmap_soak.py"))
        .args(["--address", &server.address.to_string()])
        .args(["--authkey", &authkey.to_hex()])
        .args(["--server-pid", &pid.to_string()])
        .arg("--dir")
        .arg(dir.path())
        .args(["--count", &MESSAGES.to_string(), "--nbytes", "65536"])
        .args(["--every", "250"])
        .output()
        .expect("run memmap_soak.py");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        panic!(
            "the torch client failed ({}):\n{stdout}\n{}\nserver stderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            server.stop_and_read_stderr()
        );
    }
    let samples: Vec<ServerState> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("sample "))
        .map(ServerState::parse)
        .collect();
    assert_eq!(samples.len(), MESSAGES / 250, "{stdout}");

    // Bounded by the retention limits, not by how many went through: the
    // 64 held files are leases (no fd, no mapping), and the storages the
    // client sent are not kept at all.
    let first = samples[0];
    for sample in &samples {
        assert!(
            sample.fds <= baseline.fds + 8,
            "{baseline:?} {sample:?}\n{stdout}"
        );
        assert!(
            sample.mappings <= baseline.mappings + 8,
            "{baseline:?} {sample:?}\n{stdout}"
        );
        assert!(sample.files <= HELD + 2, "{sample:?}\n{stdout}");
        assert!(
            sample.rss_kib <= first.rss_kib + 16 * 1024,
            "RSS grows with the messages: {first:?} then {sample:?}\n{stdout}"
        );
    }

    // The client has gone and nothing is sent: the held files expire on
    // the server's timer, and it is back where it started, but for the
    // inotify instance that counted the opens of the files it sent (one a
    // context, however many went through).
    let watch_fd = 1;
    let mut idle = ServerState::of(pid, dir.path());
    support::wait_until(std::time::Duration::from_secs(20), || {
        idle = ServerState::of(pid, dir.path());
        idle.files == 0 && idle.fds <= baseline.fds + watch_fd && idle.mappings <= baseline.mappings
    });
    assert_eq!(idle.files, 0, "{idle:?}\n{stdout}");
    assert!(idle.fds <= baseline.fds + watch_fd, "{baseline:?} {idle:?}");
    assert!(idle.mappings <= baseline.mappings, "{baseline:?} {idle:?}");
    assert!(
        idle.rss_kib <= baseline.rss_kib + 32 * 1024,
        "{baseline:?} {idle:?}\n{stdout}"
    );
    let status = server.signal_and_wait("TERM", std::time::Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}

#[test]
fn sent_files_are_kept_within_their_bounds_and_expire_while_idle() {
    let dir = tempfile::tempdir().unwrap();
    let authkey = Authkey::random().unwrap();
    // The bounds are counts: no file may expire by age while they are
    // checked, however slow the machine.
    let sharing = memmap_context(&authkey, dir.path())
        .with_max_held_memmap_files(3)
        .with_max_held_memmap_bytes(1 << 20);
    // Each tensor dies after its send: only the context's lease keeps its
    // file, and the oldest go first.
    let send = |byte: u8| {
        let sent = cases::contiguous(DType::UInt8, &[4096], byte, false);
        sharing.dumps(&Value::Tensor(sent)).unwrap()
    };
    let pickles: Vec<Vec<u8>> = (0..5).map(send).collect();
    assert_eq!(sharing.held_memmap_files(), 3);
    assert_eq!(files_in(dir.path()).len(), 3);
    let receiver = memmap_context(&authkey, dir.path());
    for old in &pickles[..2] {
        let err = refused(&receiver, old);
        assert!(err.contains("does not exist"), "{err}");
    }
    for kept in &pickles[2..] {
        receiver.loads(kept).expect("a held file maps");
    }

    // By bytes: 3 x 4 KiB over 10 KiB keeps the newest 2.
    let sharing = sharing.with_max_held_memmap_bytes(10 * 1024);
    assert_eq!(files_in(dir.path()).len(), 2);
    drop(sharing);
    assert!(
        files_in(dir.path()).is_empty(),
        "the context's end removes them"
    );

    // Idle: no send and no count, the timer alone lets go of them (long
    // enough to see all three first).
    let lifetime = std::time::Duration::from_secs(2);
    let sharing = memmap_context(&authkey, dir.path()).with_unfetched_lifetime(lifetime);
    for byte in 0..3 {
        let sent = cases::contiguous(DType::UInt8, &[4096], byte, false);
        sharing.dumps(&Value::Tensor(sent)).unwrap();
    }
    assert_eq!(files_in(dir.path()).len(), 3);
    support::eventually("held files expire while idle", || {
        files_in(dir.path()).is_empty()
    });
}

/// A receiver killed before it read, its sender living on: the file goes
/// within seconds of its storage's end here, not at the end of the 5
/// minutes a sender keeps a sent file for its receivers, and the sender
/// does not wait for its open.
#[test]
fn a_file_sent_to_a_receiver_killed_unread_goes_while_its_sender_lives() {
    let Some(python) = test_python("a_file_sent_to_a_receiver_killed_unread") else {
        return;
    };
    let dir = tempfile::tempdir().expect("a memmap directory");
    let sharing = memmap_context(&Authkey::random().expect("an authkey"), dir.path());
    let (mut unread, message) = UnreadMessage::send(&python, &sharing);
    assert_eq!(files_in(dir.path()).len(), 1, "the file sent");
    unread.kill_receiver();
    drop(message);
    let gone = support::wait_until(std::time::Duration::from_secs(3), || {
        files_in(dir.path()).is_empty()
    });
    assert!(
        gone,
        "left for a receiver that is gone: {:?}",
        files_in(dir.path())
    );
    let started = std::time::Instant::now();
    sharing
        .wait_until_fetched(std::time::Duration::from_secs(30))
        .expect("nothing left to wait for");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
}

/// As above, but the storage died here first, as a producer drops each
/// batch once sent: the file is pooled while its receiver lives, and goes
/// once the receiver has exited, while the producer streams on.
#[test]
fn a_file_pooled_before_its_receiver_was_killed_goes_while_its_sender_streams() {
    a_file_pooled_before_its_receiver_was_killed_goes(
        "a_file_pooled_before_its_receiver_was_killed_streaming",
        |sharing| drop(sharing.allocate(8192).expect("allocate")),
    );
}

/// As above, while the producer allocates nothing: its pool's own thread
/// lets go of the file.
#[test]
fn a_file_pooled_before_its_receiver_was_killed_goes_while_its_sender_idles() {
    a_file_pooled_before_its_receiver_was_killed_goes(
        "a_file_pooled_before_its_receiver_was_killed_idle",
        |_| {},
    );
}

/// Sends a file to a receiver that never opens it, lets its storage die
/// here (pooled), kills the receiver, and checks that the file is gone
/// within 3 s while the producer does `meanwhile` now and then.
fn a_file_pooled_before_its_receiver_was_killed_goes(
    test: &str,
    meanwhile: impl Fn(&SharingContext),
) {
    let Some(python) = test_python(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a memmap directory");
    let sharing = memmap_context(&Authkey::random().expect("an authkey"), dir.path());
    let (mut unread, message) = UnreadMessage::send(&python, &sharing);
    drop(message);
    let sent = files_in(dir.path());
    assert_eq!(sent.len(), 1, "the file sent, pooled");
    unread.kill_receiver();
    let gone = support::wait_until(std::time::Duration::from_secs(3), || {
        meanwhile(&sharing);
        !files_in(dir.path()).contains(&sent[0])
    });
    assert!(
        gone,
        "{} left for a receiver that is gone",
        sent[0].display()
    );
}
