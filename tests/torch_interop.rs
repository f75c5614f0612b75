//! Stock PyTorch on the other end, both ways: torch drives `tensorshare
//! echo`, Rust drives a torch echo server, and a torch multiprocessing
//! worker pool is fed by a Rust producer. Needs the pinned torch in
//! `TENSORSHARE_TEST_PYTHON`; `scripts/test` makes it a hard requirement.

mod support;

use std::process::Command;
use std::time::Duration;

use tensorshare::model::{Storage, TensorView};
use tensorshare::resource_sharer::SharerSocket;
use tensorshare::{Authkey, DType, SharingContext, StrategyKind, Tensor, Value};

use support::{Server, cases, open_fds, python_script, test_python};

#[test]
fn stock_torch_drives_tensorshare_echo() {
    let _counts = support::process_counts::making();
    let Some(python) = test_python("stock_torch_drives_tensorshare_echo") else {
        return;
    };
    let authkey = Authkey::random().unwrap();
    let mut server = Server::echo(&authkey, "file_descriptor");
    let fds_before = open_fds(server.pid());
    support::torch_drives(
        &python,
        &mut server,
        &authkey,
        &["--hostile", "--repeat", "3000"],
    );
    // The echo closes the connection of the torch process that left, and
    // what it registered for it, as it notices.
    let mut fds_after = 0;
    support::wait_until(std::time::Duration::from_secs(15), || {
        fds_after = open_fds(server.pid());
        fds_after <= fds_before + 4
    });
    assert!(
        fds_after <= fds_before + 4,
        "echo fds grew from {fds_before} to {fds_after}"
    );
}

#[test]
fn tensorshare_drives_a_stock_torch_echo() {
    let _counts = support::process_counts::counting();
    let Some(python) = test_python("tensorshare_drives_a_stock_torch_echo") else {
        return;
    };
    let authkey = Authkey::random().unwrap();
    let mut server = Server::torch_echo(&python, &authkey, "file_descriptor");
    let sharing = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::FileDescriptor);
    let mut connection = server.connect(&sharing);
    support::assert_echoes_intact(&mut server, &mut connection, "torch echo");

    // torch keeps what it received in its shared cache and sends the same
    // fd back: the storage returns as the very one sent.
    let sent = cases::contiguous(DType::Float32, &[64], 4, true);
    let (_echoed, storages) = cases::echo_times(&mut connection, &sent, 1);
    assert!(storages[0].same_as(sent.storage()));

    // One storage sent many times: no fds pile up on either side.
    let own_before = open_fds(std::process::id());
    let torch_before = open_fds(server.pid());
    for _ in 0..1000 {
        connection.send(&Value::Tensor(sent.clone())).unwrap();
        let echoed = connection.recv().unwrap();
        cases::check_echo(&Value::Tensor(sent.clone()), &echoed).unwrap();
    }
    assert!(open_fds(std::process::id()) <= own_before + 8);
    assert!(open_fds(server.pid()) <= torch_before + 8);
    assert_eq!(sharing.unfetched_shares(), 0);
    let stats = sharing.sharer_stats().expect("a sharer");
    assert!(
        stats.served >= 1000 && stats.released == 0,
        "torch ignores attached fds and fetches every one: {stats:?}"
    );
}

#[test]
fn a_torch_worker_pool_fed_by_a_rust_producer() {
    let _counts = support::process_counts::making();
    let Some(python) = test_python("a_torch_worker_pool_fed_by_a_rust_producer") else {
        return;
    };
    const ITEMS: usize = 40;
    let authkey = Authkey::random().unwrap();
    let sharing = SharingContext::new(authkey.clone());
    let listener = sharing.listen_in_private_dir().unwrap();
    let mut pool = Command::new(python)
        .arg(python_script("echo_peer.py"))
        .args(["pool", "--workers", "3"])
        .args([
            "--address",
            &listener.address().to_string(),
            "--authkey",
            &authkey.to_hex(),
        ])
        .spawn()
        .expect("start the torch pool");
    let mut connection = listener.accept().unwrap();
    connection
        .get_mut()
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut reader = connection.try_clone().unwrap();

    let inputs: Vec<Vec<f32>> = (0..ITEMS)
        .map(|i| (0..100 + i).map(|j| (i * 1000 + j) as f32).collect())
        .collect();
    let (results, pids) = std::thread::scope(|scope| {
        let receiving = scope.spawn(|| {
            let mut results = Vec::new();
            loop {
                let message = reader.recv().expect("a result from the pool");
                let items = message.as_sequence().expect("a tuple").to_vec();
                if let [Value::Str(done), Value::Int(pids)] = items.as_slice() {
                    assert_eq!(&**done, "done");
                    return (results, *pids);
                }
                results.push(items);
            }
        });
        for (index, values) in inputs.iter().enumerate() {
            let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let storage = tensorshare::model::Storage::from_vec(bytes);
            let tensor = tensorshare::Tensor::new(
                storage,
                tensorshare::model::TensorView::contiguous(DType::Float32, &[values.len()]),
            )
            .unwrap();
            let item = Value::Tuple(vec![Value::Int(index as i64), Value::Tensor(tensor)].into());
            connection.send(&item).unwrap();
        }
        connection.send(&Value::None).unwrap();
        receiving.join().expect("receiving thread")
    });
    // Both ends closed: the pool sees the producer leave.
    drop((connection, reader));
    assert!(pool.wait().unwrap().success(), "the torch pool failed");

    assert_eq!(results.len(), ITEMS);
    for (index, result) in results.iter().enumerate() {
        let [
            Value::Int(i),
            Value::Float(sum),
            Value::Tensor(doubled),
            Value::Int(_pid),
        ] = result.as_slice()
        else {
            panic!("malformed result {result:?}");
        };
        assert_eq!(*i, index as i64, "imap keeps order");
        let expected: f64 = inputs[index].iter().map(|&v| f64::from(v)).sum();
        assert_eq!(*sum, expected);
        let got: Vec<f32> = doubled.to_vec().expect("result bytes mapped here");
        let want: Vec<f32> = inputs[index].iter().map(|v| v * 2.0).collect();
        assert_eq!(got, want);
    }
    assert!(pids >= 1);
}

/// Reads a pickle from stdin, says in what form each `DupFd` names its
/// sharer, rebuilds it with `pickle.loads` and prints the tensor's sum.
const TORCH_LOADS: &str = r#"
import multiprocessing, pickle, pickletools, sys
import torch, torch.multiprocessing
multiprocessing.current_process().authkey = bytes.fromhex(sys.argv[1])
data = sys.stdin.buffer.read()
ops = list(pickletools.genops(data))
for i, (op, arg, _) in enumerate(ops):
    if op.name == "SHORT_BINUNICODE" and arg == "_id":
        address = ops[i + 2][1]
        print("ADDRESS", type(address).__name__, address, flush=True)
t = pickle.loads(data)
print("SUM", int(t.sum()), flush=True)
"#;

/// What stock torch prints for a `file_descriptor` pickle of a tensor from
/// `sharing`, whose 4096 bytes are all 1.
fn torch_loads(python: &str, sharing: &SharingContext, authkey: &Authkey) -> String {
    let mut writer = Storage::allocate(tensorshare::StrategyKind::FileDescriptor, 4096).unwrap();
    writer.as_bytes_mut().fill(1);
    let tensor = Tensor::new(
        writer.freeze(),
        TensorView::contiguous(DType::UInt8, &[4096]),
    )
    .unwrap();
    let pickle = sharing.dumps(&Value::Tensor(tensor)).unwrap();
    let key = authkey.to_hex();
    support::python_output_for(
        python,
        TORCH_LOADS,
        &[&key],
        &pickle,
        "torch loading the pickle",
    )
}

#[test]
fn stock_torch_fetches_from_a_sharer_in_the_abstract_namespace() {
    let _counts = support::process_counts::making();
    let Some(python) = test_python("stock_torch_fetches_from_a_sharer_in_the_abstract_namespace")
    else {
        return;
    };
    let authkey = Authkey::random().unwrap();
    let sharing = SharingContext::new(authkey.clone())
        .with_strategy(StrategyKind::FileDescriptor)
        .with_sharer_socket(SharerSocket::Abstract);
    let stdout = torch_loads(&python, &sharing, &authkey);
    // As CPython's own listener reports an abstract address: bytes.
    let prefix = format!(
        "ADDRESS bytes b'\\x00tensorshare-sharer-{}",
        std::process::id()
    );
    assert!(
        stdout.lines().any(|line| line.starts_with(&prefix)),
        "{stdout}"
    );
    assert!(stdout.contains("SUM 4096"), "{stdout}");
    support::wait_until(std::time::Duration::from_secs(5), || {
        sharing
            .sharer_stats()
            .is_some_and(|stats| stats.served == 1)
    });
    let stats = sharing.sharer_stats().expect("a sharer");
    assert_eq!((stats.served, stats.other_user), (1, 0), "{stats:?}");

    // A sharer told to listen on a path is fetched from by path, a str.
    let parent = tempfile::tempdir().unwrap();
    let sharing = SharingContext::new(authkey.clone())
        .with_strategy(StrategyKind::FileDescriptor)
        .with_sharer_socket(SharerSocket::PathIn(parent.path().into()));
    let stdout = torch_loads(&python, &sharing, &authkey);
    assert!(
        stdout.lines().any(|line| line.starts_with("ADDRESS str /")),
        "{stdout}"
    );
    assert!(stdout.contains("SUM 4096"), "{stdout}");
}

/// Every dtype torch names, by its own name, with its element size; and
/// torch's version.
const TORCH_DTYPES: &str = r#"
import json, torch
names = {str(v).removeprefix("torch.") for v in vars(torch).values() if isinstance(v, torch.dtype)}
sizes = {n: torch.empty(0, dtype=getattr(torch, n)).element_size() for n in sorted(names)}
print(json.dumps({"version": torch.__version__, "dtypes": sizes}))
"#;

/// The torch `compat/python/requirements.txt` pins.
const PINNED_TORCH: &str = "2.15.";

/// `DType::ALL` is the pinned torch's dtypes, no more and no fewer, each
/// with torch's element size: a dtype torch adds fails this until the
/// crate has it. An older torch (`scripts/interop-matrix`) names a subset.
/// (Each is echoed through every strategy by the echo tests, whose peer
/// walks the same names.)
#[test]
fn every_dtype_torch_names_is_a_dtype_here_with_its_size() {
    let Some(python) = test_python("every_dtype_torch_names_is_a_dtype_here_with_its_size") else {
        return;
    };
    let printed =
        support::python_output_for(&python, TORCH_DTYPES, &[], b"", "list torch's dtypes");
    #[derive(serde::Deserialize)]
    struct Printed {
        version: String,
        dtypes: std::collections::BTreeMap<String, usize>,
    }
    let Printed {
        version,
        dtypes: torch,
    } = serde_json::from_str(printed.trim()).expect("torch's version and dtypes");
    let mut ours: std::collections::BTreeMap<String, usize> = DType::ALL
        .into_iter()
        .map(|dtype| (dtype.name().to_owned(), dtype.element_size()))
        .collect();
    if !version.starts_with(PINNED_TORCH) {
        ours.retain(|name, _| torch.contains_key(name));
    }
    assert_eq!(
        ours, torch,
        "DType::ALL (left) against torch {version}'s dtypes (right)"
    );
    for name in torch.keys() {
        assert_eq!(DType::from_name(name).map(DType::name), Some(name.as_str()));
    }
}

/// Stock torch pickles a class of its own beside a tensor, writes the
/// pickle to stdout, and after a line on stdin says how many fds its
/// resource sharer still holds.
const TORCH_SENDS_AN_UNKNOWN_CLASS: &str = r#"
import sys, multiprocessing as mp, torch
from multiprocessing import resource_sharer
from multiprocessing.reduction import ForkingPickler
mp.current_process().authkey = bytes.fromhex(sys.argv[1])
class Unknown:
    pass
data = bytes(ForkingPickler.dumps([Unknown(), torch.ones(1024)]))
sys.stdout.buffer.write(len(data).to_bytes(8, "little") + data)
sys.stdout.flush()
sys.stdin.readline()
print("HELD", len(resource_sharer._resource_sharer._cache), flush=True)
"#;

/// torch registers a tensor's fd with its resource sharer, which keeps it
/// until fetched and has no deadline. A message refused for a class this
/// side does not allow still fetches it, so that torch lets go of it.
#[test]
fn a_refused_message_from_torch_gives_its_fd_back_to_torch() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;

    let _counts = support::process_counts::making();
    let Some(python) = test_python("a_refused_message_from_torch_gives_its_fd_back_to_torch")
    else {
        return;
    };
    let authkey = Authkey::random().unwrap();
    let child = Command::new(&python)
        .args(["-c", TORCH_SENDS_AN_UNKNOWN_CLASS, &authkey.to_hex()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start python");
    let mut torch = support::ChildGuard(child);
    let mut stdout = BufReader::new(torch.0.stdout.take().expect("its stdout"));
    let mut len = [0u8; 8];
    stdout.read_exact(&mut len).expect("the pickle's length");
    let mut pickle = vec![0u8; usize::try_from(u64::from_le_bytes(len)).expect("a length")];
    stdout.read_exact(&mut pickle).expect("the pickle");

    support::refusals::expect_refused(
        SharingContext::new(authkey).loads(&pickle),
        "__main__.Unknown",
    );
    let mut stdin = torch.0.stdin.take().expect("its stdin");
    stdin.write_all(b"\n").expect("tell torch to look");
    let mut held = String::new();
    stdout
        .read_line(&mut held)
        .expect("what torch's sharer holds");
    assert_eq!(
        held.trim(),
        "HELD 0",
        "torch still holds the refused message's fd"
    );
}
