//! `tensorshare.rebuild_storage(strategy, handle, nbytes)`, the one form of
//! every strategy torch has none for (`CONTRIBUTING.md`): read without
//! attaching, it describes the storage by its strategy and handle; a
//! context attaches it only through the named strategy's form, which for
//! each of the four refuses it, as it does an unknown strategy or a
//! malformed call, naming what is wrong.

use tensorshare::model::{Residence, StorageKind};
use tensorshare::registry::Registry;
use tensorshare::{Authkey, SharingContext, StrategyKind, Value};
use tensorshare_compat::pickle::{EncodeOptions, Node, PickleBuilder, encode};

/// `tensorshare.rebuild_storage(strategy, (7, 9), nbytes)`, with `nbytes`
/// as given.
fn form(strategy: &str, nbytes: i64) -> Vec<u8> {
    let mut out = PickleBuilder::default();
    let rebuild = out.global("tensorshare", "rebuild_storage");
    let name = out.push(Node::Str(strategy.into()));
    let fields = [7, 9].map(|field| out.push(Node::Int(field))).to_vec();
    let handle = out.tuple(fields);
    let nbytes = out.push(Node::Int(nbytes));
    let call = out.call(rebuild, vec![name, handle, nbytes]);
    let pickle = out.finish(call);
    encode(&pickle, &EncodeOptions::new()).expect("encode")
}

fn refused(pickle: &[u8]) -> String {
    let sharing = SharingContext::new(Authkey::random().expect("a key"));
    match sharing.loads(pickle) {
        Ok(value) => panic!("attached: {value:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn read_without_attaching_it_describes_the_storage_by_its_strategy_and_handle() {
    let value = Registry::default()
        .loads(&form("memmap", 16))
        .expect("the form is allowed");
    let Value::Storage(storage) = value else {
        panic!("not a storage: {value:?}");
    };
    assert_eq!(storage.nbytes(), 16);
    assert_eq!(storage.kind(), StorageKind::Strategy(StrategyKind::Memmap));
    let Residence::Handle(handle) = storage.residence() else {
        panic!("not described by its handle: {:?}", storage.residence());
    };
    assert_eq!(handle.strategy, StrategyKind::Memmap);
    let Value::Tuple(fields) = &handle.handle else {
        panic!("the handle as written: {:?}", handle.handle);
    };
    assert!(
        matches!(&fields[..], [Value::Int(7), Value::Int(9)]),
        "{fields:?}"
    );
}

#[test]
fn each_strategy_torch_has_a_form_for_refuses_it() {
    for kind in [
        StrategyKind::FileDescriptor,
        StrategyKind::FileSystem,
        StrategyKind::Bytes,
        StrategyKind::Memmap,
    ] {
        let message = refused(&form(kind.name(), 16));
        assert!(
            message.starts_with("cannot rebuild: tensorshare.rebuild_storage: "),
            "{message}"
        );
        assert!(
            message.contains(&format!(
                "invalid handle: {kind} cannot attach a storage named by \
                 tensorshare.rebuild_storage('{kind}', ...), which is not its form"
            )),
            "{message}"
        );
    }
}

#[test]
fn an_unknown_strategy_or_a_malformed_call_is_refused_naming_what_is_wrong() {
    let unknown = refused(&form("hugepage", 16));
    assert!(
        unknown.contains("unknown sharing strategy \"hugepage\": use one of file_descriptor"),
        "{unknown}"
    );
    let negative = refused(&form("memmap", -1));
    assert!(negative.contains("negative nbytes -1"), "{negative}");

    let mut out = PickleBuilder::default();
    let rebuild = out.global("tensorshare", "rebuild_storage");
    let name = out.push(Node::Str("memmap".into()));
    let call = out.call(rebuild, vec![name]);
    let pickle = encode(&out.finish(call), &EncodeOptions::new()).expect("encode");
    let short = refused(&pickle);
    assert!(
        short.contains("(strategy: str, handle, nbytes: int)"),
        "{short}"
    );
}

#[test]
fn a_refusal_names_the_form_without_printing_a_peers_handle() {
    let mut out = PickleBuilder::default();
    let rebuild = out.global("tensorshare", "rebuild_storage");
    let name = out.push(Node::Str("memmap".into()));
    let fields = (0..50_000)
        .map(|field| out.push(Node::Int(field)))
        .collect();
    let handle = out.tuple(fields);
    let nbytes = out.push(Node::Int(16));
    let call = out.call(rebuild, vec![name, handle, nbytes]);
    let pickle = encode(&out.finish(call), &EncodeOptions::new()).expect("encode");
    let message = refused(&pickle);
    let head: String = message.chars().take(400).collect();
    assert!(message.len() < 400, "{} bytes: {head}", message.len());
    assert!(message.contains("memmap cannot attach"), "{message}");
}
