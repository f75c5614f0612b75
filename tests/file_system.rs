//! The `file_system` strategy end to end: `tensorshare echo --strategy
//! file_system` driven from Rust and from stock torch, torch's reference
//! counts kept exactly, nothing left in `/dev/shm`, a full `/dev/shm`
//! refused up front, and another user's segment never touched.

mod support;

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use tensorshare::model::{Custom, Global, Storage};
use tensorshare::registry::Reduction;
use tensorshare::{Authkey, DType, SharingContext, StrategyKind, Tensor, Value};
use tensorshare_strategies::file_system::{FileSystemSegment, HEADER_BYTES, SegmentName};
use tensorshare_strategies::services::shm_manager;
use tensorshare_strategies::{AllocateError, Segment, UnixUser};

use support::refusals::{expect_refused, unknown_global};
use support::{
    Server, UnreadMessage, cases, eventually, open_fds, segments_of, shared_mappings, test_python,
};

fn fs_context(authkey: &Authkey) -> SharingContext {
    support::build_manager_executable();
    SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileSystem)
}

fn fs_segment(storage: &Storage) -> &FileSystemSegment {
    storage
        .local_segment::<FileSystemSegment>()
        .expect("a file_system segment mapped here")
}

#[test]
fn every_case_comes_back_intact() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().unwrap();
    let mut server = Server::echo(&authkey, "file_system");
    let sharing = fs_context(&authkey);
    let mut connection = server.connect(&sharing);
    support::assert_echoes_intact(&mut server, &mut connection, "file_system echo");
}

#[test]
fn an_echoed_segment_is_the_one_sent_and_counts_return_to_one() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().unwrap();
    let server = Server::echo(&authkey, "file_system");
    let sharing = fs_context(&authkey);
    let mut connection = server.connect(&sharing);

    // A heap storage moves into one segment, however often it is sent.
    let sent = cases::contiguous(DType::Float32, &[1024], 1, false);
    let (echoed, storages) = cases::echo_times(&mut connection, &sent, 3);
    assert!(storages.windows(2).all(|w| w[0].same_as(&w[1])));
    let segment = fs_segment(&storages[0]);
    assert_eq!(storages[0].bytes(), sent.storage().bytes());
    let path = Path::new("/dev/shm").join(segment.name().file_name());
    assert!(path.exists(), "{path:?}");

    // Every message's count was taken back by its receiver, and the echo
    // server let go of its mapping: this process's is the only count left.
    eventually("the segment's count back at 1", || segment.refcount() == 1);
    // The heap storage keeps its copy in shared memory while it lives.
    drop((echoed, storages));
    assert!(path.exists());
    drop(sent);
    eventually("the last holder unlinks the segment", || !path.exists());
}

#[test]
fn thousands_of_messages_leave_nothing_behind() {
    let _alone = support::process_counts::counting();
    // What earlier tests left to be unlinked later (a killed torch peer's
    // counts go with this process's manager) is not this test's.
    let me = std::process::id();
    let earlier: HashSet<String> = segments_of(me).into_iter().collect();
    let made_here = || {
        let mut made = segments_of(me);
        made.retain(|name| !earlier.contains(name));
        made
    };
    let authkey = Authkey::random().unwrap();
    let server = Server::echo(&authkey, "file_system");
    let sharing = fs_context(&authkey);
    let mut connection = server.connect(&sharing);
    let same = Value::Tensor(cases::contiguous(DType::Float32, &[256], 3, false));
    let mut round = |n: usize| cases::echo_alternating(&mut connection, &same, n, false);
    round(100);
    let server_segments = || segments_of(server.pid()).len();
    let (fds, maps) = (open_fds(server.pid()), shared_mappings(server.pid()));
    let own_maps = shared_mappings(me);
    round(2000);
    // Only the storage sent again and again lives on, on this side.
    eventually("fresh segments unlinked", || made_here().len() <= 2);
    eventually("the server's copies unlinked", || server_segments() == 0);
    assert!(open_fds(server.pid()) <= fds + 4, "echo fds grew");
    assert!(
        shared_mappings(server.pid()) <= maps + 4,
        "echo mappings grew"
    );
    assert!(shared_mappings(me) <= own_maps + 4, "client mappings grew");
    drop(same);
    eventually("every segment of this process unlinked", || {
        made_here().is_empty()
    });
}

#[test]
fn a_full_dev_shm_is_an_error_naming_it_and_leaves_nothing() {
    // Alone: a segment another test has made but not sized yet is empty.
    let _alone = support::process_counts::counting();
    let stats = nix::sys::statvfs::statvfs("/dev/shm").expect("statvfs /dev/shm");
    let size = stats.blocks() * stats.fragment_size();
    let too_big = usize::try_from(size).unwrap() + (1 << 20);
    support::build_manager_executable();
    let err = Storage::allocate(StrategyKind::FileSystem, too_big).unwrap_err();
    assert!(
        matches!(err, AllocateError::SharedMemoryFull { ref mount, .. } if mount == "/dev/shm"),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("/dev/shm"), "{message}");
    assert!(message.contains("tensorshare gc"), "{message}");
    // Segments other tests keep are all of at least a header's size and far
    // smaller than /dev/shm.
    let leftovers: Vec<String> = segments_of(std::process::id())
        .into_iter()
        .filter(|name| {
            let len = std::fs::metadata(Path::new("/dev/shm").join(name)).map_or(1, |m| m.len());
            len == 0 || len >= size
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn hostile_segment_references_are_refused_and_the_server_keeps_serving() {
    let _counts = support::process_counts::making();
    let authkey = Authkey::random().unwrap();
    let mut server = Server::echo(&authkey, "file_system");
    let sharing = fs_context(&authkey);
    // A real segment, announced larger than it is; a name with a path in
    // it; a name that does not exist.
    let real = cases::contiguous(DType::UInt8, &[16], 9, false);
    let mut connection = server.connect(&sharing);
    connection.send(&Value::Tensor(real.clone())).unwrap();
    let echoed = connection.recv().unwrap();
    let segment = fs_segment(echoed.as_tensor().unwrap().storage());
    let manager = segment.manager().as_bytes().to_vec();
    let name = segment.name().as_str().as_bytes().to_vec();
    for (what, name, nbytes) in [
        ("oversized", name.clone(), 4096),
        ("path", b"/torch_1_2/../../etc/passwd".to_vec(), 16),
        ("missing", b"/torch_1_2_3".to_vec(), 16),
    ] {
        let pickle = cases::filename_tensor_pickle(&manager, &name, nbytes);
        server.expect_refused(&authkey, &pickle, what);
    }
    let failures = cases::echo_failures(&mut server.connect(&sharing));
    assert!(failures.is_empty(), "{failures:#?}");
    let stderr = server.stop_and_read_stderr();
    for expected in ["announces 4096", "it names a path", "does not exist"] {
        assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
    }
}

/// A segment in `/dev/shm` as torch's libshm leaves it after creating it
/// (mode 0600, a 64-byte header whose first four bytes hold the count, 1,
/// then the data), given to the user `uid`. Removed on drop.
struct OtherUsersSegment {
    name: SegmentName,
    path: PathBuf,
}

impl OtherUsersSegment {
    fn create(uid: u32, data: &[u8]) -> OtherUsersSegment {
        let name = SegmentName::fresh();
        let path = Path::new("/dev/shm").join(name.file_name());
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .expect("create a segment in /dev/shm");
        let segment = OtherUsersSegment { name, path };
        let mut bytes = vec![0u8; HEADER_BYTES];
        bytes[..4].copy_from_slice(&1i32.to_ne_bytes());
        bytes.extend_from_slice(data);
        file.write_all(&bytes).expect("write the segment");
        std::os::unix::fs::fchown(&file, Some(uid), Some(uid)).expect("give the segment away");
        segment
    }

    /// Header and data as they are in the file now; panics if it is gone.
    fn contents(&self) -> Vec<u8> {
        std::fs::read(&self.path).expect("the segment is still linked")
    }
}

impl Drop for OtherUsersSegment {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn another_users_segment_is_refused_by_echo_under_file_system_and_file_descriptor() {
    let _counts = support::process_counts::making();
    if !nix::unistd::geteuid().is_root() {
        // Through the handle, not eprintln!, so that test capture does not hide it.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: another_users_segment_is_refused_by_echo_under_file_system_and_file_descriptor \
             needs root to give a segment to another user"
        );
        return;
    }
    const NOBODY: u32 = 65534;
    let data: Vec<u8> = (0..4096).map(|i| (i * 13 % 251) as u8).collect();
    let theirs = OtherUsersSegment::create(NOBODY, &data);
    let before = theirs.contents();
    let inode = std::fs::metadata(&theirs.path).unwrap().ino();
    // What a forger would name: a live manager of the server's user.
    support::build_manager_executable();
    let manager = shm_manager::own_manager().expect("this process's manager");
    let pickle = cases::filename_tensor_pickle(
        manager.handle().as_bytes(),
        theirs.name.as_str().as_bytes(),
        data.len(),
    );
    let owner = UnixUser::of(NOBODY);
    for (strategy, kind) in [
        ("file_system", StrategyKind::FileSystem),
        ("file_descriptor", StrategyKind::FileDescriptor),
    ] {
        let authkey = Authkey::random().unwrap();
        let mut server = Server::echo(&authkey, strategy);
        server.expect_refused(&authkey, &pickle, strategy);
        // Other clients are still served.
        let sharing = SharingContext::new(authkey.clone()).with_strategy(kind);
        let failures = cases::echo_failures(&mut server.connect(&sharing));
        assert!(failures.is_empty(), "{strategy}: {failures:#?}");
        let stderr = server.stop_and_read_stderr();
        let why = format!("shared-memory segment {} belongs to {owner}", theirs.name);
        assert!(stderr.contains(&why), "{strategy}: {why:?} not in {stderr}");
        assert!(stderr.contains("a message not echoed"), "{stderr}");

        // Still linked, the same file, bytes and count as torch left them.
        let after = std::fs::metadata(&theirs.path)
            .unwrap_or_else(|e| panic!("{strategy}: the segment was unlinked ({e})"));
        assert_eq!((after.ino(), after.uid()), (inode, NOBODY), "{strategy}");
        assert_eq!(
            theirs.contents(),
            before,
            "{strategy}: bytes or count changed"
        );
    }
}

#[test]
fn stock_torch_drives_tensorshare_echo() {
    let _counts = support::process_counts::making();
    let Some(python) = test_python("file_system::stock_torch_drives_tensorshare_echo") else {
        return;
    };
    let authkey = Authkey::random().unwrap();
    let mut server = Server::echo(&authkey, "file_system");
    support::torch_drives(
        &python,
        &mut server,
        &authkey,
        &["--strategy", "file_system", "--hostile", "--repeat", "1000"],
    );
    eventually("the server's segments unlinked", || {
        segments_of(server.pid()).is_empty()
    });
}

#[test]
fn tensorshare_drives_a_stock_torch_echo() {
    let _counts = support::process_counts::making();
    let Some(python) = test_python("file_system::tensorshare_drives_a_stock_torch_echo") else {
        return;
    };
    let authkey = Authkey::random().unwrap();
    let mut server = Server::torch_echo(&python, &authkey, "file_system");
    let sharing = fs_context(&authkey);
    let mut connection = server.connect(&sharing);
    support::assert_echoes_intact(&mut server, &mut connection, "torch echo");
    // torch finds our segment in its cache by name and sends it back.
    let sent = cases::contiguous(DType::Float32, &[64], 4, false);
    let (_echoed, storages) = cases::echo_times(&mut connection, &sent, 2);
    assert!(storages[1].same_as(&storages[0]));
    assert_eq!(storages[0].bytes(), sent.storage().bytes());
    assert_eq!(fs_segment(&storages[0]).len(), sent.storage().nbytes());
}

/// A receiver killed before it read, its sender living on: the segment
/// goes within seconds of its storage's end here, not when the sender
/// exits or at the end of the manager's 5-minute in-flight wait. (A
/// storage that died here before its receiver did is pooled, and leaves
/// the pool at its 10 s lifetime.)
#[test]
fn a_segment_sent_to_a_receiver_killed_unread_goes_while_its_sender_lives() {
    let Some(python) = test_python("a_segment_sent_to_a_receiver_killed_unread") else {
        return;
    };
    let sharing = fs_context(&Authkey::random().expect("an authkey"));
    let (mut unread, message) = UnreadMessage::send(&python, &sharing);
    let pid = std::process::id();
    assert_eq!(segments_of(pid).len(), 1, "the segment sent");
    unread.kill_receiver();
    // The storage dies here: its count, stranded by the dead receiver's
    // unread message, is let go of, and the manager unlinks it.
    drop(message);
    let gone = support::wait_until(std::time::Duration::from_secs(3), || {
        segments_of(pid).is_empty()
    });
    assert!(
        gone,
        "left for a receiver that is gone: {:?}",
        segments_of(pid)
    );
    drop((unread, sharing));
}

/// As above, but the storage died here first, as a producer drops each
/// batch once sent: the segment is pooled while its receiver lives, and
/// goes once the receiver has exited, while the producer streams on.
#[test]
fn a_segment_pooled_before_its_receiver_was_killed_goes_while_its_sender_streams() {
    a_segment_pooled_before_its_receiver_was_killed_goes(
        "a_segment_pooled_before_its_receiver_was_killed_streaming",
        |sharing| drop(sharing.allocate(8192).expect("allocate")),
    );
}

/// As above, while the producer allocates nothing: its pool's own thread
/// lets go of the segment.
#[test]
fn a_segment_pooled_before_its_receiver_was_killed_goes_while_its_sender_idles() {
    a_segment_pooled_before_its_receiver_was_killed_goes(
        "a_segment_pooled_before_its_receiver_was_killed_idle",
        |_| {},
    );
}

/// Sends a segment to a receiver that never reads it, lets its storage die
/// here (pooled), kills the receiver, and checks that the segment is gone
/// within 3 s while the producer does `meanwhile` now and then.
fn a_segment_pooled_before_its_receiver_was_killed_goes(
    test: &str,
    meanwhile: impl Fn(&SharingContext),
) {
    let Some(python) = test_python(test) else {
        return;
    };
    let sharing = fs_context(&Authkey::random().expect("an authkey"));
    let (mut unread, message) = UnreadMessage::send(&python, &sharing);
    drop(message);
    let pid = std::process::id();
    let sent = segments_of(pid);
    assert_eq!(sent.len(), 1, "the segment sent, pooled");
    unread.kill_receiver();
    let gone = support::wait_until(std::time::Duration::from_secs(3), || {
        meanwhile(&sharing);
        !segments_of(pid).contains(&sent[0])
    });
    assert!(gone, "{} left for a receiver that is gone", sent[0]);
    drop((unread, sharing));
}

/// A message refused partway through its rebuild still takes back the
/// count its sender added for the segment it named before the refusal, as
/// attaching it would have: the segment is not held for nobody once the
/// receiver has said no.
#[test]
fn a_message_refused_after_naming_a_segment_takes_back_its_count() {
    let authkey = Authkey::new(b"refused after a segment".to_vec());
    let (registry, unknown) = unknown_global();
    let sender = fs_context(&authkey).with_registry(registry);
    let tensor = Tensor::from_slice(&sender, &[7u8; 256], &[256]).expect("a tensor");
    let count = || fs_segment(tensor.storage()).refcount();
    let before = count();
    let pickle = sender
        .dumps(&Value::from(vec![Value::Tensor(tensor.clone()), unknown]))
        .expect("dumps");
    assert_eq!(count(), before + 1, "the message counts the segment");

    // Allowed, so the pickle decodes, and refused by its rebuilder, after
    // the walk has named the segment.
    let mut refusing = tensorshare::Registry::default();
    refusing.register_rebuilder(
        "__main__",
        "Unknown",
        |call: tensorshare::registry::Call<'_>| Err(call.invalid("refused on purpose")),
    );
    let receiver = SharingContext::new(authkey).with_registry(refusing);
    expect_refused(receiver.loads(&pickle), "refused on purpose");
    assert_eq!(count(), before, "the message's count was not taken back");
}

/// A storage that cannot be attached fails its message, and the storages
/// named after it in the same message are attached all the same and let
/// go of: their counts are taken back, not held for a message nobody got.
#[test]
fn a_message_failing_to_attach_takes_back_the_counts_named_after_the_failure() {
    let authkey = Authkey::new(b"attach fails before a segment".to_vec());
    let sharing = fs_context(&authkey);
    let tensor = Tensor::from_slice(&sharing, &[7u8; 256], &[256]).expect("a tensor");
    let count = || fs_segment(tensor.storage()).refcount();
    let manager = fs_segment(tensor.storage()).manager().as_bytes().to_vec();
    // A segment of the same manager that does not exist, named first.
    let mut registry = tensorshare::Registry::default();
    registry.register_reducer::<()>(move |()| Reduction::Call {
        callee: Global::new(
            "torch.multiprocessing.reductions",
            "rebuild_storage_filename",
        ),
        args: vec![
            Value::Global(Global::new("torch.storage", "UntypedStorage")),
            Value::Bytes(manager.clone().into()),
            Value::Bytes(b"/torch_1_2_3".to_vec().into()),
            Value::Int(16),
        ],
    });
    let sender = sharing.clone().with_registry(registry);
    let before = count();
    let missing = Value::Custom(Custom::new(Global::new("__main__", "Missing"), ()));
    let pickle = sender
        .dumps(&Value::from(vec![missing, Value::Tensor(tensor.clone())]))
        .expect("dumps");
    assert_eq!(count(), before + 1, "the message counts the segment");

    let receiver = SharingContext::new(authkey);
    expect_refused(receiver.loads(&pickle), "does not exist");
    assert_eq!(count(), before, "the message's count was not taken back");
}

/// A storage pickled as an embedded `torch.save` archive (torch's
/// `_load_from_bytes`) whose object names a shared segment is attached
/// with the message, as torch's receiver attaches it: it reads the
/// segment's bytes, and letting go of it takes back its count.
#[test]
fn a_segment_named_inside_an_embedded_archive_is_attached_with_the_message() {
    use tensorshare_compat::pickle::{Limits, Node, PickleBuilder, decode_all};
    use tensorshare_compat::torch_save::{TorchSaveFormat, write_to_vec};

    let authkey = Authkey::new(b"a segment inside an archive".to_vec());
    let sharing = fs_context(&authkey);
    let tensor = Tensor::from_slice(&sharing, &[7u8; 256], &[256]).expect("a tensor");
    let count = || fs_segment(tensor.storage()).refcount();
    let before = count();
    // The archive's object is the storage as the sender pickles it, which
    // counts the segment once for its receiver.
    let storage = sharing
        .dumps(&Value::Storage(tensor.storage().clone()))
        .expect("dumps the storage");
    assert_eq!(
        count(),
        before + 1,
        "the storage's pickle counts the segment"
    );
    let object = decode_all(
        &storage,
        &tensorshare::Registry::default(),
        &Limits::default(),
    )
    .expect("decode the storage's pickle");
    let payload =
        write_to_vec(TorchSaveFormat::Legacy, &object.pickle, &[]).expect("an embedded archive");
    let mut out = PickleBuilder::default();
    let load_from_bytes = out.global("torch.storage", "_load_from_bytes");
    let payload = out.push(Node::Bytes(payload.into()));
    let embedded = out.call(load_from_bytes, vec![payload]);
    let message = support::cases::tensor_over(out, embedded, 256);

    let received = SharingContext::new(authkey)
        .loads(&message)
        .expect("a tensor over an embedded archive");
    let bytes = received
        .as_tensor()
        .expect("a tensor")
        .as_slice::<u8>()
        .expect("the segment's bytes, attached")
        .to_vec();
    assert_eq!(bytes, [7u8; 256]);
    drop(received);
    assert_eq!(count(), before, "the archive's count was not taken back");
}

/// A message refused for a global its receiver does not allow still takes
/// back the count its sender added for each segment it names, before the
/// refused global and after it: a stock torch receiver keeps them until it
/// exits.
#[test]
fn a_message_refused_for_a_global_takes_back_its_counts() {
    let authkey = Authkey::new(b"refused for a global".to_vec());
    let (registry, unknown) = unknown_global();
    let sender = fs_context(&authkey).with_registry(registry);
    let first = Tensor::from_slice(&sender, &[1u8; 256], &[256]).expect("a tensor");
    let second = Tensor::from_slice(&sender, &[2u8; 256], &[256]).expect("a tensor");
    let counts = || [&first, &second].map(|tensor| fs_segment(tensor.storage()).refcount());
    let before = counts();
    let pickle = sender
        .dumps(&Value::from(vec![
            Value::Tensor(first.clone()),
            unknown,
            Value::Tensor(second.clone()),
        ]))
        .expect("dumps");
    assert_eq!(
        counts(),
        before.map(|n| n + 1),
        "the message counts each segment"
    );

    expect_refused(
        SharingContext::new(authkey).loads(&pickle),
        "__main__.Unknown",
    );
    assert_eq!(counts(), before, "the message's counts were not taken back");
}
