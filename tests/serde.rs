//! Rust structs as the dicts torch code expects, over real connections:
//! `#[derive(Serialize, Deserialize)]` structs with tensor fields sent
//! between two sharing contexts under every strategy, and to and from
//! stock torch, which checks the dict's keys and dtypes.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tensorshare::model::TensorView;
use tensorshare::{
    Authkey, Connection, DType, Error, SharingContext, StrategyKind, Tensor, Value, from_value,
    to_value,
};

use support::test_python;

#[derive(Serialize, Deserialize, Debug)]
struct Batch {
    image: Tensor,
    label: Tensor,
    epoch: u32,
    names: Vec<String>,
}

/// A tensor of `dtype` and `sizes` holding `bytes`, written straight into
/// the memory `sharing` sends from.
fn shared_tensor(sharing: &SharingContext, dtype: DType, sizes: &[usize], bytes: &[u8]) -> Tensor {
    let mut writer = sharing.allocate(bytes.len()).expect("allocate");
    writer.as_bytes_mut().copy_from_slice(bytes);
    Tensor::new(writer.freeze(), TensorView::contiguous(dtype, sizes)).expect("view")
}

fn batch(sharing: &SharingContext) -> Batch {
    let image: Vec<u8> = (0..6u8).flat_map(|i| f32::from(i).to_le_bytes()).collect();
    let label: Vec<u8> = [3i64, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
    Batch {
        image: shared_tensor(sharing, DType::Float32, &[2, 3], &image),
        label: shared_tensor(sharing, DType::Int64, &[2], &label),
        epoch: 7,
        names: vec!["cat".into(), "dog".into()],
    }
}

fn f32s(tensor: &Tensor) -> Vec<f32> {
    let bytes = tensor.to_contiguous_bytes().expect("bytes at hand");
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn i64s(tensor: &Tensor) -> Vec<i64> {
    let bytes = tensor.to_contiguous_bytes().expect("bytes at hand");
    bytes
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn keys(value: &Value) -> Vec<&str> {
    let Value::Dict(pairs) = value else {
        panic!("not a dict: {value:?}")
    };
    pairs
        .iter()
        .map(|(key, _)| key.as_str().expect("a str key"))
        .collect()
}

/// Sends `batch` as a dict over `out`, and reads what arrives at `inbound`
/// back into a `Batch`: the whole path, errors through the facade's.
fn send_batch(
    batch: &Batch,
    out: &mut Connection,
    inbound: &mut Connection,
) -> Result<(Value, Batch), Error> {
    out.send(&to_value(batch)?)?;
    let value = inbound.recv()?;
    let batch = from_value(&value)?;
    Ok((value, batch))
}

#[test]
fn a_batch_struct_crosses_a_connection_as_a_dict_under_every_strategy() {
    support::build_manager_executable();
    let memmap_dir = tempfile::tempdir().expect("memmap dir");
    for kind in [
        StrategyKind::FileDescriptor,
        StrategyKind::FileSystem,
        StrategyKind::Bytes,
        StrategyKind::Memmap,
    ] {
        let authkey = Authkey::random().expect("authkey");
        let context = || {
            SharingContext::new(authkey.clone())
                .with_strategy(kind)
                .with_memmap_dir(memmap_dir.path())
                .expect("memmap dir")
        };
        let (left, right) = (context(), context());
        let (mut left_end, mut right_end) = support::connection_pair(&left, &right);

        let sent = batch(&left);
        let (value, arrived) = send_batch(&sent, &mut left_end, &mut right_end)
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(
            keys(&value),
            ["image", "label", "epoch", "names"],
            "{kind:?}"
        );
        assert_eq!(arrived.image.dtype(), DType::Float32);
        assert_eq!(arrived.image.sizes(), [2, 3]);
        assert_eq!(f32s(&arrived.image), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(arrived.label.dtype(), DType::Int64);
        assert_eq!(i64s(&arrived.label), [3, 7]);
        assert_eq!((arrived.epoch, &arrived.names[..]), (7, &sent.names[..]));

        // And back: under the strategies that share memory, the very
        // storages that were sent.
        let (_, returned) = send_batch(&arrived, &mut right_end, &mut left_end)
            .unwrap_or_else(|e| panic!("{kind:?} back: {e}"));
        assert_eq!(f32s(&returned.image), f32s(&sent.image));
        if kind != StrategyKind::Bytes {
            assert!(
                returned.image.storage().same_as(sent.image.storage()),
                "{kind:?}: the image came back on its own storage"
            );
        }
    }
}

#[test]
fn a_message_that_does_not_fit_the_struct_fails_naming_the_key() {
    #[derive(Deserialize, Debug)]
    #[expect(dead_code, reason = "only read to fail")]
    struct Mistyped {
        image: Tensor,
        label: i64,
    }
    #[derive(Deserialize, Debug)]
    #[expect(dead_code, reason = "only read to fail")]
    struct Lacking {
        image: Tensor,
        mask: Tensor,
    }
    let authkey = Authkey::random().expect("authkey");
    let (left, right) = (
        SharingContext::new(authkey.clone()),
        SharingContext::new(authkey),
    );
    let (mut out, mut inbound) = support::connection_pair(&left, &right);
    out.send(&to_value(&batch(&left)).unwrap()).unwrap();
    let value = inbound.recv().unwrap();

    let error = Error::from(from_value::<Mistyped>(&value).unwrap_err());
    assert!(matches!(error, Error::Serde(_)));
    assert_eq!(error.to_string(), "label: expected i64, found Tensor");
    assert_eq!(
        from_value::<Lacking>(&value).unwrap_err().to_string(),
        "missing key 'mask' in dict for struct Lacking"
    );
}

/// Stock torch on the other end: receives the batch dict, checks its keys
/// and dtypes, and answers with a dict of its own.
const TORCH_PEER: &str = r#"
import multiprocessing as mp, sys
import torch, torch.multiprocessing
from multiprocessing.connection import Client

address, key = sys.argv[1], bytes.fromhex(sys.argv[2])
mp.current_process().authkey = key
if address.startswith("@"):
    address = "\0" + address[1:]
conn = Client(address, family="AF_UNIX", authkey=key)

batch = conn.recv()
assert type(batch) is dict, type(batch)
assert list(batch) == ["image", "label", "epoch", "names"], list(batch)
image, label = batch["image"], batch["label"]
assert type(image) is torch.Tensor, type(image)
assert image.dtype == torch.float32 and tuple(image.shape) == (2, 3), image
assert image.flatten().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], image
assert label.dtype == torch.int64 and label.tolist() == [3, 7], label
assert type(batch["epoch"]) is int and batch["epoch"] == 7, batch["epoch"]
assert batch["names"] == ["cat", "dog"], batch["names"]

conn.send({
    "logits": image.sum(dim=1),
    "predicted": label * 10,
    "loss": 0.25,
    "epoch": batch["epoch"] + 1,
    "names": tuple(batch["names"]) + ("bird",),
    "seen_by": "torch " + torch.__version__,
})
# Keep the reply's tensors alive until the Rust side has them.
assert conn.recv() is None
print("OK", flush=True)
"#;

#[derive(Deserialize, Debug)]
struct Reply {
    logits: Tensor,
    predicted: Tensor,
    loss: f64,
    epoch: u32,
    names: Vec<String>,
}

#[test]
fn stock_torch_receives_the_dict_and_answers_with_one() {
    let Some(python) = test_python("stock_torch_receives_the_dict_and_answers_with_one") else {
        return;
    };
    let authkey = Authkey::random().expect("authkey");
    let sharing = SharingContext::new(authkey.clone());
    let listener = sharing.listen_in_private_dir().expect("listen");
    let mut torch = Command::new(&python)
        .args([
            "-c",
            TORCH_PEER,
            &listener.address().to_string(),
            &authkey.to_hex(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start torch");
    let mut connection = listener.accept().expect("torch connects");
    connection
        .get_mut()
        .set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");

    connection
        .send(&to_value(&batch(&sharing)).expect("to_value"))
        .expect("send the batch");
    let value = match connection.recv() {
        Ok(value) => value,
        Err(e) => {
            drop(connection);
            let _ = torch.kill();
            let output = torch.wait_with_output().expect("torch exits");
            panic!(
                "no reply from torch ({e}):\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    };
    let reply: Reply = from_value(&value).expect("the reply fits");
    assert_eq!(reply.logits.dtype(), DType::Float32);
    assert_eq!(f32s(&reply.logits), [3.0, 12.0]);
    assert_eq!(reply.predicted.dtype(), DType::Int64);
    assert_eq!(i64s(&reply.predicted), [30, 70]);
    assert_eq!((reply.loss, reply.epoch), (0.25, 8));
    assert_eq!(reply.names, ["cat", "dog", "bird"]);

    // What does not fit is named, with what torch sent instead.
    #[derive(Deserialize, Debug)]
    #[expect(dead_code, reason = "only read to fail")]
    struct Mistaken {
        loss: Tensor,
    }
    assert_eq!(
        from_value::<Mistaken>(&value).unwrap_err().to_string(),
        "loss: expected a Tensor, found float 0.25"
    );

    connection.send(&Value::None).expect("done");
    let output = torch.wait_with_output().expect("torch exits");
    let stdout = support::expect_success(&output, "the torch peer");
    assert_eq!(stdout.trim(), "OK");
}
