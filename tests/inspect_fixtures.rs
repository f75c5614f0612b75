//! `tensorshare inspect --json` against the golden fixtures that real torch
//! wrote (compat/fixtures): every tensor's metadata and first elements must
//! be what torch reported when it wrote the file, and every hostile fixture
//! must be refused with the expected reason.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use tensorshare::DType;

fn fixtures_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("compat/fixtures")
}

/// Every `*.expected.json` below `dir`, paired with the file it describes.
fn expectations(dir: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            // `X.fd.expected.json` describes `X.fd.pkl` or `X.fd.pt`.
            if let Some(stem) = name.strip_suffix(".expected.json") {
                let data = ["pkl", "pt"]
                    .iter()
                    .map(|ext| path.with_file_name(format!("{stem}.{ext}")))
                    .find(|candidate| candidate.exists())
                    .unwrap_or_else(|| panic!("{} describes a missing file", path.display()));
                found.push((data, path));
            }
        }
    }
    found.sort();
    found
}

/// `inspect --json --all-fields`: every field of every tensor, as torch's
/// description of it has them.
fn inspect(path: &Path) -> std::process::Output {
    Command::new(support::tensorshare_exe())
        .args(["inspect", "--json", "--all-fields"])
        .arg(path)
        .output()
        .expect("run tensorshare inspect")
}

fn read_json(path: &Path) -> Json {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The keys torch reports, in the form the fixture generator records them.
///
/// torch 1.x sends every reference to a storage as its own `DupFd`, and its
/// receiver finds them to be one storage only after fetching the fds (by
/// inode). `inspect` fetches nothing, so for those files storage identity is
/// not comparable; everything else is.
fn comparable(tensor: &Json, data: &Path, with_location: bool) -> Json {
    let mut t = tensor.clone();
    let object = t.as_object_mut().unwrap();
    object.remove("type");
    // torch records each element exactly; the report shows it at its
    // dtype's precision (a float32 0.1 as 0.1, not 0.10000000149011612).
    let dtype = object["dtype"].as_str().and_then(DType::from_name);
    if let (Some(dtype), Some(head)) = (dtype, object.get_mut("head")) {
        at_dtype_precision(head, dtype);
    }
    let identity_needs_fetch =
        data.to_string_lossy().contains("torch-1.") && data.to_string_lossy().ends_with(".fd.pkl");
    if let Some(storage) = object.get_mut("storage").and_then(Json::as_object_mut) {
        storage.retain(|k, _| {
            matches!(k.as_str(), "id" | "kind" | "nbytes") || (with_location && k == "location")
        });
        if identity_needs_fetch {
            storage.remove("id");
        }
    }
    t
}

/// Every finite float in `json` as the shortest decimal that reads back
/// as the same element of `dtype`.
fn at_dtype_precision(json: &mut Json, dtype: DType) {
    match json {
        Json::Array(items) => items
            .iter_mut()
            .for_each(|item| at_dtype_precision(item, dtype)),
        Json::Number(n) if n.is_f64() => {
            let shortest = dtype.shortest_decimal(n.as_f64().unwrap());
            *json = serde_json::json!(shortest.parse::<f64>().unwrap());
        }
        _ => {}
    }
}

#[test]
fn inspect_reports_what_torch_reported() {
    let root = fixtures_root();
    let cases: Vec<_> = expectations(&root)
        .into_iter()
        .filter(|(data, _)| !data.starts_with(root.join("hostile")))
        .collect();
    assert!(
        cases.len() >= 50,
        "expected the golden fixtures under {}, found {}",
        root.display(),
        cases.len()
    );
    let mut failures = Vec::new();
    for (data, expected_path) in &cases {
        let expected = read_json(expected_path);
        let output = inspect(data);
        if !output.status.success() {
            failures.push(format!(
                "{}: {}",
                data.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
            continue;
        }
        let actual: Json = serde_json::from_slice(&output.stdout).unwrap();
        if actual["format"] != expected["format"] {
            failures.push(format!(
                "{}: format {} != {}",
                data.display(),
                actual["format"],
                expected["format"]
            ));
        }
        // Files saved on a GPU record where each storage was saved.
        let with_location = expected.get("location").is_some();
        let actual_tensors: Vec<Json> = actual["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| comparable(t, data, with_location))
            .collect();
        // torch's list has every occurrence; the report each distinct
        // tensor once, by first appearance.
        let mut seen_ids = std::collections::HashSet::new();
        let expected_tensors: Vec<Json> = expected["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| seen_ids.insert(t["id"].clone()))
            .map(|t| comparable(t, data, with_location))
            .collect();
        if actual_tensors != expected_tensors {
            failures.push(format!(
                "{}:\n  torch:       {}\n  tensorshare: {}",
                data.display(),
                Json::Array(expected_tensors),
                Json::Array(actual_tensors)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    eprintln!("{} fixtures match torch", cases.len());
}

#[test]
fn inspect_refuses_hostile_inputs_with_a_reason() {
    let hostile = fixtures_root().join("hostile");
    let cases = expectations(&hostile);
    assert!(
        cases.len() >= 6,
        "expected hostile fixtures under {}",
        hostile.display()
    );
    for (data, expected_path) in cases {
        let expected = read_json(&expected_path);
        let needle = expected["error_contains"].as_str().unwrap().to_lowercase();
        let output = inspect(&data);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{}: expected a refusal, got {stderr}",
            data.display()
        );
        assert!(
            output.stdout.is_empty(),
            "{}: printed output for a refused input",
            data.display()
        );
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{}: reason must be one line: {stderr}",
            data.display()
        );
        assert!(
            stderr.to_lowercase().contains(&needle),
            "{}: reason should mention '{needle}': {stderr}",
            data.display()
        );
    }
}

/// Our errors and clap's usage errors start alike, and a cause shows once.
#[test]
fn every_error_starts_with_error_and_names_its_cause_once() {
    let missing = fixtures_root().join("no-such-file.pt");
    let ours = inspect(&missing);
    let usage = Command::new(support::tensorshare_exe())
        .args(["inspect", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(ours.status.code(), Some(1));
    assert_eq!(usage.status.code(), Some(2));
    for output in [&ours, &usage] {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
    }
    let stderr = String::from_utf8_lossy(&ours.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no-such-file.pt"), "{stderr}");
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}
