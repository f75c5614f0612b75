//! Decoding with every unknown global named, not only the first.

use std::cell::RefCell;

use rustc_hash::FxHashSet;
use tensorshare_compat::pickle::{Global, GlobalFilter};

use super::{RebuildError, RefusedGlobal, Registry};

/// A [`GlobalFilter`] for one decode that lets every global through and
/// remembers those outside the registry's allowlist, so that a refusal can
/// name all of them. The decoder calls nothing, so admitting a name is
/// safe; whether the pickle may be rebuilt is decided by
/// [`finish`](Self::finish) before the walker sees it.
pub(crate) struct GlobalAudit<'a> {
    registry: &'a Registry,
    unknown: RefCell<UnknownNames>,
}

#[derive(Default)]
struct UnknownNames {
    /// In order of first appearance, each where it first appears.
    globals: Vec<RefusedGlobal>,
    seen: FxHashSet<Global>,
}

impl<'a> GlobalAudit<'a> {
    pub(crate) fn new(registry: &'a Registry) -> Self {
        Self {
            registry,
            unknown: RefCell::default(),
        }
    }

    /// Refuses the decoded pickle when it named a global outside the
    /// allowlist and the registry refuses unknown globals.
    ///
    /// # Errors
    ///
    /// [`RebuildError::NotAllowed`] naming every such global.
    pub(crate) fn finish(self) -> Result<(), RebuildError> {
        let unknown = self.unknown.into_inner().globals;
        if unknown.is_empty() || self.registry.admits_unknown() {
            return Ok(());
        }
        Err(RebuildError::NotAllowed(unknown))
    }
}

impl GlobalFilter for GlobalAudit<'_> {
    fn allows(&self, _module: &str, _name: &str) -> bool {
        true
    }

    fn admit(&self, module: &str, name: &str) -> Option<Global> {
        self.admit_at(module, name, 0)
    }

    fn admit_at(&self, module: &str, name: &str, offset: usize) -> Option<Global> {
        if let Some(global) = GlobalFilter::admit(self.registry, module, name) {
            return Some(global);
        }
        let global = Global::copied(module, name);
        let mut unknown = self.unknown.borrow_mut();
        if unknown.seen.insert(global.clone()) {
            unknown.globals.push(RefusedGlobal {
                global: global.clone(),
                offset: Some(offset),
            });
        }
        Some(global)
    }
}
