//! `tensorshare inspect --json` describes each tensor once, leaving out
//! fields at their usual values unless asked for them (`--all-fields`),
//! shows as many elements as `--head` says, and stays a few times the size
//! of the file's pickle however many tensors it holds.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::{Value as Json, json};
use tensorshare::{Dict, StrategyKind, Tensor, Value, torch_save};

use support::expect_success;

fn inspect(args: &[&str], path: &Path) -> Json {
    let output = Command::new(support::tensorshare_exe())
        .arg("inspect")
        .args(args)
        .arg(path)
        .output()
        .expect("run tensorshare inspect");
    let stdout = expect_success(&output, "tensorshare inspect");
    serde_json::from_str(&stdout).expect("inspect --json prints JSON")
}

/// A contiguous 2x3 tensor, its transpose, a view two elements in, and a
/// parameter that requires grad.
fn views() -> Value {
    let weight = Tensor::from_slice(
        &StrategyKind::Bytes,
        &[0.5f32, 1.0, 1.5, 2.0, 2.5, 3.0],
        &[2, 3],
    )
    .unwrap();
    let with = |change: &dyn Fn(&mut tensorshare::model::TensorView)| {
        let mut view = weight.view();
        change(&mut view);
        Tensor::new(weight.storage().clone(), view).unwrap()
    };
    let transposed = with(&|view| {
        view.sizes = vec![3, 2];
        view.strides = vec![1, 3];
    });
    let tail = with(&|view| {
        view.storage_offset = 2;
        view.sizes = vec![4];
        view.strides = vec![1];
    });
    let parameter = with(&|view| {
        view.requires_grad = true;
        view.parameter = true;
    });
    Dict::new()
        .with("weight", weight.clone())
        .with("transposed", transposed)
        .with("tail", tail)
        .with("parameter", parameter)
        .with("again", weight)
        .into()
}

#[test]
fn json_describes_each_tensor_once_leaving_out_usual_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("views.pt");
    torch_save::save(&views(), &path).unwrap();

    let report = inspect(&["--json"], &path);
    let refs: Vec<&Json> = report["object"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| &pair[1])
        .collect();
    let expected_refs: Vec<Json> = [0, 1, 2, 3, 0]
        .iter()
        .map(|id| json!({"type": "tensor", "ref": id}))
        .collect();
    assert_eq!(refs, expected_refs.iter().collect::<Vec<_>>());
    let tensors = report["tensors"].as_array().unwrap();
    let storage = json!({"id": 0, "kind": "bytes", "nbytes": 24, "location": "cpu"});
    assert_eq!(
        tensors,
        &[
            json!({"id": 0, "dtype": "float32", "shape": [2, 3], "storage": storage,
                   "head": [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]}),
            json!({"id": 1, "dtype": "float32", "shape": [3, 2], "stride": [1, 3],
                   "storage": storage, "head": [0.5, 2.0, 1.0, 2.5, 1.5, 3.0]}),
            json!({"id": 2, "dtype": "float32", "shape": [4], "storage_offset": 2,
                   "storage": storage, "head": [1.5, 2.0, 2.5, 3.0]}),
            json!({"id": 3, "dtype": "float32", "shape": [2, 3], "requires_grad": true,
                   "parameter": true, "storage": storage,
                   "head": [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]}),
        ]
    );

    let report = inspect(&["--json", "--all-fields", "--head", "2"], &path);
    let tensors = report["tensors"].as_array().unwrap();
    assert_eq!(
        tensors[0],
        json!({"id": 0, "dtype": "float32", "shape": [2, 3], "stride": [3, 1],
               "storage_offset": 0, "requires_grad": false, "parameter": false,
               "storage": storage, "head": [0.5, 1.0]})
    );
    for tensor in tensors {
        let fields = tensor.as_object().unwrap();
        for field in ["stride", "storage_offset", "requires_grad", "parameter"] {
            assert!(fields.contains_key(field), "no {field} in {tensor}");
        }
        assert_eq!(tensor["head"].as_array().unwrap().len(), 2, "{tensor}");
    }

    let report = inspect(&["--json", "--head", "0"], &path);
    let tensors = report["tensors"].as_array().unwrap();
    assert!(tensors.iter().all(|t| t.get("head").is_none()), "{report}");
}

/// The size of the `data.pkl` record of the zip `file`, from its local
/// header (stored, as every torch.save zip is).
fn pickle_size(file: &[u8]) -> usize {
    let u16_at = |at: usize| usize::from(u16::from_le_bytes([file[at], file[at + 1]]));
    let header = file
        .windows(4)
        .enumerate()
        .filter(|(_, magic)| *magic == b"PK\x03\x04")
        .map(|(at, _)| at)
        .find(|&at| {
            let name = file.get(at + 30..at + 30 + u16_at(at + 26));
            name.is_some_and(|name| name.ends_with(b"/data.pkl"))
        })
        .expect("a data.pkl record");
    let size: [u8; 4] = file[header + 18..header + 22].try_into().unwrap();
    u32::from_le_bytes(size) as usize
}

#[test]
fn json_of_many_small_tensors_is_a_few_times_its_pickle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("optimizer.pt");
    let mut state = Dict::new();
    for i in 0..20_000 {
        let data: Vec<f32> = (0..16).map(|j| (i * 16 + j) as f32 / 7.0).collect();
        let tensor = Tensor::from_slice(&StrategyKind::Bytes, &data, &[16]).unwrap();
        state = state.with(format!("state.{i}.exp_avg"), tensor);
    }
    torch_save::save(&state.into(), &path).unwrap();
    let pickle = pickle_size(&std::fs::read(&path).unwrap());

    let output = Command::new(support::tensorshare_exe())
        .args(["inspect", "--json"])
        .arg(&path)
        .output()
        .expect("run tensorshare inspect");
    let json = expect_success(&output, "tensorshare inspect --json");
    // Each tensor's entry is about its head's eight floats; the pickle
    // names its key, storage and view in about 80 bytes.
    assert!(
        json.len() < 4 * pickle,
        "{} bytes of JSON for a pickle of {pickle}",
        json.len()
    );
    let report: Json = serde_json::from_str(&json).unwrap();
    assert_eq!(report["tensors"].as_array().unwrap().len(), 20_000);
}
