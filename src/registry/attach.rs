//! The shared storages a received message names, attached once the message
//! is rebuilt.
//!
//! torch's rebuilders (`rebuild_storage_fd`, `rebuild_storage_filename`,
//! `StorageBase.from_file`) name memory in another process. The registry
//! only reads those names: a rebuild that receives gives each a storage
//! that stands for it ([`Storage::remote`]) and lists it, in the order the
//! rebuild met it, for the sharing layer to attach after the rebuild
//! (fetching an fd from the sender's resource sharer, mapping a segment or
//! a file, sharing one mapping between messages); attaching makes each
//! stand for the storage it names, wherever the rebuilt value holds it. A
//! rebuild that only describes (`Registry::loads`, `inspect`) lists
//! nothing. The `DupFd`s a message names are read here too, for the fds
//! that arrived with it to be paired with their keys.

use tensorshare_compat::pickle::{Global, Node, Pickle};

use super::DUP_FD;
use crate::model::{DupFdRef, Storage};

/// A storage a received message names, to be attached.
#[derive(Debug)]
pub(crate) struct NamedStorage {
    /// The rebuilder that named it, for the error when it cannot be
    /// attached.
    pub(crate) callee: Global,
    /// What the rebuilt value holds: its residence is the handle read from
    /// the pickle, and its size what the message says.
    pub(crate) storage: Storage,
}

/// Every `DupFd` in `pickle`, in arena order: the nodes the `DupFd`
/// rebuilder reads, read off the pickle as they stand (`DupFd.__new__`
/// with the state `{'_id': (address, key)}`), for a receiver that pairs
/// the fds that arrived with the message with all its keys, whether or not
/// its rebuild gets that far. A node of another shape is none; its rebuild
/// says why.
pub(crate) fn dup_fd_ids(pickle: &Pickle) -> Vec<DupFdRef> {
    let node = |id| pickle.get(id);
    pickle
        .iter()
        .filter_map(|(_, here)| {
            let Node::Object(object) = here else {
                return None;
            };
            match node(object.callable)? {
                Node::Global(g) if (&*g.module, &*g.name) == DUP_FD => {}
                _ => return None,
            }
            let Node::Dict(state) = node(object.state?)? else {
                return None;
            };
            let [(name, id)] = &state[..] else {
                return None;
            };
            match node(*name)? {
                Node::Str(name) if name.as_str() == "_id" => {}
                _ => return None,
            }
            let Node::Tuple(id) = node(*id)? else {
                return None;
            };
            let [address, key] = &id[..] else {
                return None;
            };
            let address = match node(*address)? {
                Node::Str(path) => path.as_str().as_bytes().to_vec(),
                Node::Bytes(name) => name.to_vec(),
                _ => return None,
            };
            match node(*key)? {
                Node::Int(key) => Some(DupFdRef { address, key: *key }),
                _ => None,
            }
        })
        .collect()
}
