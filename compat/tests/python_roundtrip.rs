//! Encoded pickles against CPython: `pickle.loads` must rebuild the same
//! graph (values, sharing and cycles), and pickling that again must give
//! the very same bytes wherever CPython's own object identities allow.
//!
//! Needs a Python interpreter in `TENSORSHARE_TEST_PYTHON` (plain CPython
//! 3.8+; no torch). Without it the tests print a notice and pass, unless
//! `TENSORSHARE_REQUIRE_INTEROP=1`, as `scripts/test` sets, makes that a
//! failure.

mod pickle_graphs;
#[path = "../../tests/support/test_python.rs"]
mod test_python;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tensorshare_compat::pickle::{
    Construction, EncodeOptions, Global, Node, NodeId, Object, Pickle, encode,
};

use pickle_graphs::{CANON_PY, build, canonical, cpython_would_write_the_same, steps};
use test_python::test_python;

/// Reads length-prefixed pickles from stdin; answers each with one JSON
/// line: the canonical form of what `pickle.loads` built, and whether
/// `pickle.dumps` of it at the same protocol gives the same bytes.
const WORKER_PY: &str = r#"
import json, pickle, sys

def main():
    stdin, stdout = sys.stdin.buffer, sys.stdout
    stdout.write(json.dumps({'implementation': sys.implementation.name,
                             'version': list(sys.version_info[:2])}) + '\n')
    stdout.flush()
    while True:
        head = stdin.read(8)
        if len(head) < 8:
            return
        data = stdin.read(int.from_bytes(head, 'little'))
        try:
            obj = pickle.loads(data)
            reply = {'canon': canon(obj), 'same': pickle.dumps(obj, data[1]) == data}
        except Exception as e:
            reply = {'error': repr(e)}
        stdout.write(json.dumps(reply) + '\n')
        stdout.flush()

sys.setrecursionlimit(100000)
main()
"#;

/// What Python made of one pickle.
#[derive(Debug)]
struct Reply {
    canon: String,
    same_bytes: bool,
}

/// One long-lived Python process serving every case.
struct PythonWorker {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Whether `pickle.dumps` is known to repeat our bytes: the encoder
    /// follows CPython 3.11 (the pinned venv's). Other versions differ in
    /// which objects are one object (3.9 keeps a single empty frozenset,
    /// 3.12 makes `__module__` strings anew), not in the format.
    dumps_like_ours: bool,
}

impl PythonWorker {
    /// The worker, or `None` (after a notice) when no Python is configured
    /// and interop is not required.
    fn start(test: &str) -> Option<Self> {
        let python = test_python(test)?;
        let script = format!("{CANON_PY}\n{WORKER_PY}");
        let mut child = Command::new(&python)
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{test}: cannot run TENSORSHARE_TEST_PYTHON={python:?}: {e}")
            });
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        let hello: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{test}: {python:?} did not start the worker: {e}"));
        let version = (hello["version"][0].as_u64(), hello["version"][1].as_u64());
        let dumps_like_ours =
            hello["implementation"] == "cpython" && version == (Some(3), Some(11));
        if !dumps_like_ours {
            let _ = writeln!(
                std::io::stderr(),
                "{test}: {hello}: checking what pickle.loads builds, but not that pickle.dumps \
                 repeats our bytes, which is only known to hold for CPython 3.11"
            );
        }
        Some(Self {
            child,
            stdin,
            stdout,
            dumps_like_ours,
        })
    }

    fn load(&mut self, pickle: &[u8]) -> Result<Reply, String> {
        let stdin = self.stdin.as_mut().expect("stdin open until drop");
        stdin
            .write_all(&(pickle.len() as u64).to_le_bytes())
            .and_then(|()| stdin.write_all(pickle))
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("writing to the Python worker: {e}"))?;
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| format!("reading from the Python worker: {e}"))?;
        if line.is_empty() {
            return Err("the Python worker exited; see its stderr above".to_owned());
        }
        let reply: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| format!("bad reply {line:?}: {e}"))?;
        if let Some(error) = reply["error"].as_str() {
            return Err(format!("pickle.loads failed: {error}"));
        }
        Ok(Reply {
            canon: reply["canon"].as_str().unwrap_or_default().to_owned(),
            same_bytes: reply["same"].as_bool().unwrap_or(false),
        })
    }
}

impl Drop for PythonWorker {
    fn drop(&mut self) {
        // Closing stdin ends the worker's loop.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// The pickle for a failure message, cut short past a few kilobytes.
fn escaped(bytes: &[u8]) -> String {
    const SHOWN: usize = 2000;
    let text = bytes[..bytes.len().min(SHOWN)].escape_ascii().to_string();
    if bytes.len() > SHOWN {
        format!("{text}... ({} bytes)", bytes.len())
    } else {
        text
    }
}

/// When CPython's own pickle of the loaded graph must equal ours.
#[derive(Clone, Copy)]
enum SameBytes {
    /// Whenever [`cpython_would_write_the_same`] says it can.
    WherePredictable,
    /// Always: the graph has no set whose order Python would change.
    Always,
}

/// Checks one graph at every protocol; `Err` says what differed.
fn check(worker: &mut PythonWorker, pickle: &Pickle, same_bytes: SameBytes) -> Result<(), String> {
    let expected = canonical(pickle);
    for protocol in 2..=5 {
        let bytes = encode(pickle, &EncodeOptions::new().with_protocol(protocol))
            .map_err(|e| format!("protocol {protocol}: encode: {e}"))?;
        let reply = worker
            .load(&bytes)
            .map_err(|e| format!("protocol {protocol}: {e}\npickle: {}", escaped(&bytes)))?;
        if reply.canon != expected {
            return Err(format!(
                "protocol {protocol}: Python rebuilt a different graph\n  rust:   {expected}\n  \
                 python: {}\npickle: {}",
                reply.canon,
                escaped(&bytes)
            ));
        }
        let same_expected = worker.dumps_like_ours
            && match same_bytes {
                SameBytes::WherePredictable => cpython_would_write_the_same(pickle, protocol),
                SameBytes::Always => true,
            };
        if same_expected && !reply.same_bytes {
            return Err(format!(
                "protocol {protocol}: pickle.dumps(pickle.loads(ours)) differs from ours\n\
                 pickle: {}",
                escaped(&bytes)
            ));
        }
    }
    Ok(())
}

#[test]
fn python_loads_random_graphs_and_dumps_them_back_identically() {
    let Some(worker) = PythonWorker::start("python_loads_random_graphs") else {
        return;
    };
    let worker = Mutex::new(worker);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256);
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let result = runner.run(&steps(), |steps| {
        let pickle = build(&steps);
        let mut worker = worker.lock().unwrap_or_else(|e| e.into_inner());
        check(&mut worker, &pickle, SameBytes::WherePredictable).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Builds arenas for the fixed cases.
#[derive(Default)]
struct Arena(Pickle);

impl Arena {
    fn add(&mut self, node: Node) -> NodeId {
        self.0.push(node)
    }
    fn strs(&mut self, count: usize, prefix: &str) -> Vec<NodeId> {
        (0..count)
            .map(|i| self.add(Node::Str(format!("{prefix}{i}"))))
            .collect()
    }
    fn ints(&mut self, count: i64) -> Vec<NodeId> {
        (0..count).map(|i| self.add(Node::Int(i))).collect()
    }
    fn reduce(&mut self, module: &str, name: &str) -> Object {
        let callable = self.add(Node::Global(Global::copied(module, name)));
        let args = self.add(Node::Tuple(vec![]));
        Object {
            callable,
            construction: Construction::Reduce { args },
            state: None,
            list_items: vec![],
            dict_items: vec![],
        }
    }
}

#[test]
fn python_agrees_on_large_containers_and_payloads() {
    // Batches of 1000 at their edges, frames, memo indices past 255 and
    // 65535, and payloads written outside frames: all must round-trip to
    // the same bytes.
    let Some(mut worker) = PythonWorker::start("python_agrees_on_large_containers") else {
        return;
    };
    let mut a = Arena::default();
    let mut items = Vec::new();
    for len in [999, 1000, 1001, 2000] {
        let values = a.strs(len, &format!("l{len}_"));
        items.push(a.add(Node::List(values)));
        let keys = a.strs(len, &format!("k{len}_"));
        let values = a.ints(len as i64);
        items.push(a.add(Node::Dict(keys.into_iter().zip(values).collect())));
        // Small non-negative ints iterate in insertion order in CPython.
        let members = a.ints(len as i64);
        items.push(a.add(Node::Set(members.clone())));
        items.push(a.add(Node::FrozenSet(members)));
        let mut ordered = a.reduce("collections", "OrderedDict");
        let keys = a.strs(len, &format!("o{len}_"));
        ordered.dict_items = keys.into_iter().zip(a.ints(len as i64)).collect();
        items.push(a.add(Node::Object(Box::new(ordered))));
        let mut deque = a.reduce("collections", "deque");
        deque.list_items = a.strs(len, &format!("d{len}_"));
        items.push(a.add(Node::Object(Box::new(deque))));
    }
    let many = a.strs(70_000, "m");
    items.push(a.add(Node::List(many)));
    items.push(a.add(Node::Bytes(vec![7; 70_000].into())));
    items.push(a.add(Node::ByteArray(vec![9; 100_000].into())));
    items.push(a.add(Node::Str("\u{e9}".repeat(40_000))));
    let tail = a.add(Node::Str("tail".to_owned()));
    items.push(tail);
    items.push(tail);
    let root = a.add(Node::List(items));
    a.0.set_root(root);
    if let Err(e) = check(&mut worker, &a.0, SameBytes::Always) {
        panic!("{e}");
    }
}
