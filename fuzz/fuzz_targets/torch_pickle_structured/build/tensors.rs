//! The tensors of a message over its storages: `rebuild_tensor` in
//! `ForkingPickler` form, `_rebuild_tensor_v2`/`_v3` (and
//! `_rebuild_parameter`) in plain pickles and torch.save files, and the
//! tweaks that bend their calls.

use tensorshare::DType;
use tensorshare::model::TensorView;
use tensorshare_compat::pickle::{Construction, Node, NodeId};

use super::storages::BuiltStorage;
use super::{Builder, ExpectedTensor, REDUCTIONS, UTILS, dtype_at};
use crate::{Container, Num, Rebuild, StorageTweak, TensorSpec, TensorTweak, ViewSpec, WrapChoice};

impl Builder<'_> {
    pub(super) fn tensor(&mut self, storage: usize, spec: &TensorSpec) -> (NodeId, ExpectedTensor) {
        if !spec.tweaks.is_empty() {
            self.canonical = false;
        }
        let BuiltStorage {
            node: storage_node,
            typed,
            own,
            nbytes,
            ..
        } = self.storages[storage];
        let forking = matches!(self.input.container, Container::Forking);
        let (storage_arg, dtype) = if forking {
            self.forking_storage_arg(storage, spec)
        } else {
            // The storage's own dtype: through its class when it has a
            // legacy one (`_rebuild_tensor_v2`), else named
            // (`_rebuild_tensor_v3`).
            (storage_node, own)
        };
        let view = self.view(spec, dtype, nbytes);
        let node = if forking {
            self.rebuild_tensor(storage_arg, &view)
        } else {
            self.rebuild_tensor_v2(storage_arg, typed, &view)
        };
        let node = self.tweak_tensor(node, spec);
        let expected = ExpectedTensor {
            view,
            storage_nbytes: nbytes,
            data: self.storages[storage].data.clone(),
        };
        (node, expected)
    }

    /// The view's numbers: a view that fits its storage, or whatever the
    /// input says.
    fn view(&mut self, spec: &TensorSpec, dtype: DType, nbytes: usize) -> TensorView {
        let mut view = match &spec.view {
            ViewSpec::Fitting {
                offset,
                sizes,
                transpose,
                expand,
            } => {
                let ndim = sizes.len().min(4);
                let capacity = nbytes / dtype.element_size();
                let (offset, sizes) = if capacity == 0 {
                    (0, vec![0usize; ndim.max(1)])
                } else {
                    let offset = usize::from(*offset) % capacity;
                    let room = capacity - offset;
                    let mut product = 1usize;
                    let mut fitted = Vec::with_capacity(ndim);
                    for &size in &sizes[..ndim] {
                        let wanted = usize::from(size % 6);
                        // After a zero size, anything fits.
                        let size = room
                            .checked_div(product)
                            .map_or(wanted, |fits| wanted.min(fits));
                        product *= size;
                        fitted.push(size);
                    }
                    (offset, fitted)
                };
                let mut view = TensorView::contiguous(dtype, &sizes);
                view.storage_offset = offset as i64;
                if *transpose && sizes.len() >= 2 {
                    view.sizes.swap(0, 1);
                    view.strides.swap(0, 1);
                }
                if *expand && !view.strides.is_empty() {
                    view.strides[0] = 0;
                }
                view
            }
            ViewSpec::Free {
                offset,
                sizes,
                strides,
            } => {
                self.canonical = false;
                let dims = |values: &[Num]| values.iter().take(8).map(|n| n.0).collect();
                TensorView {
                    dtype,
                    storage_offset: offset.0,
                    sizes: dims(sizes),
                    strides: dims(strides),
                    requires_grad: false,
                    parameter: false,
                }
            }
        };
        view.requires_grad = spec.requires_grad;
        view.parameter = spec.parameter;
        view
    }

    /// `ForkingPickler`'s storage argument and the dtype the tensor takes:
    /// an untyped storage wrapped with the tensor's dtype, as torch 2.x
    /// does; a typed one as it is, with its own; or the wrapper a tweak
    /// asks for.
    fn forking_storage_arg(&mut self, storage: usize, spec: &TensorSpec) -> (NodeId, DType) {
        let BuiltStorage { node, typed, .. } = self.storages[storage];
        match (self.wrap_tweak(storage), typed) {
            (None, Some(dtype)) => (node, dtype),
            (None, None) => {
                let dtype = dtype_at(spec.dtype);
                (self.typed_storage(node, dtype), dtype)
            }
            (Some(wrap), _) => self.wrapped(node, wrap, spec),
        }
    }

    /// The last typed-wrapper tweak of the storage's spec, if any.
    fn wrap_tweak(&self, storage: usize) -> Option<WrapChoice> {
        let specs = &self.input.storages;
        specs.get(storage).and_then(|spec| {
            spec.tweaks.iter().rev().find_map(|t| match t {
                StorageTweak::Wrap(wrap) => Some(*wrap),
                _ => None,
            })
        })
    }

    /// A typed wrapper other than the one torch writes.
    fn wrapped(&mut self, storage: NodeId, wrap: WrapChoice, spec: &TensorSpec) -> (NodeId, DType) {
        match wrap {
            WrapChoice::None => (storage, dtype_at(spec.dtype)),
            WrapChoice::Typed(index) => {
                let dtype = dtype_at(index);
                (self.typed_storage(storage, dtype), dtype)
            }
            WrapChoice::Child(index) => {
                let dtype = dtype_at(index);
                let class = self.legacy_class_global(dtype);
                let node = self.call_global(
                    REDUCTIONS,
                    "rebuild_typed_storage_child",
                    vec![storage, class],
                );
                (node, dtype)
            }
        }
    }

    /// `rebuild_typed_storage(storage, torch.<dtype>)`.
    fn typed_storage(&mut self, storage: NodeId, dtype: DType) -> NodeId {
        let dtype = self.dtype_global(dtype);
        self.call_global(REDUCTIONS, "rebuild_typed_storage", vec![storage, dtype])
    }

    /// `rebuild_tensor(cls, storage, (storage_offset, torch.Size(sizes),
    /// strides, requires_grad))`, as torch's `reduce_tensor` writes it.
    fn rebuild_tensor(&mut self, storage: NodeId, view: &TensorView) -> NodeId {
        let cls = if view.parameter {
            self.outer.global("torch.nn.parameter", "Parameter")
        } else {
            self.outer.global("torch._tensor", "Tensor")
        };
        let offset = self.int(view.storage_offset);
        let dims = self.ints(&view.sizes);
        let size = self.call_global("torch", "Size", vec![dims]);
        let stride = self.ints(&view.strides);
        let requires_grad = self.outer.push(Node::Bool(view.requires_grad));
        let metadata = self.outer.tuple(vec![offset, size, stride, requires_grad]);
        self.call_global(REDUCTIONS, "rebuild_tensor", vec![cls, storage, metadata])
    }

    /// `_rebuild_tensor_v2(storage, storage_offset, sizes, strides,
    /// requires_grad, OrderedDict())`, or `_v3` with the dtype appended
    /// when the storage's class does not give it; a `Parameter` inside
    /// `_rebuild_parameter`, as `pickle.dumps` and torch.save write them.
    fn rebuild_tensor_v2(
        &mut self,
        storage: NodeId,
        typed: Option<DType>,
        view: &TensorView,
    ) -> NodeId {
        let offset = self.int(view.storage_offset);
        let size = self.ints(&view.sizes);
        let stride = self.ints(&view.strides);
        let requires_grad = self
            .outer
            .push(Node::Bool(view.requires_grad && !view.parameter));
        let hooks = self.ordered_dict(Vec::new());
        let mut args = vec![storage, offset, size, stride, requires_grad, hooks];
        let v3 = typed != Some(view.dtype);
        if v3 {
            args.push(self.dtype_global(view.dtype));
        }
        let name = if v3 {
            "_rebuild_tensor_v3"
        } else {
            "_rebuild_tensor_v2"
        };
        let node = self.call_global(UTILS, name, args);
        if view.parameter {
            self.rebuild_parameter(node, view.requires_grad)
        } else {
            node
        }
    }

    /// `_rebuild_parameter(tensor, requires_grad, OrderedDict())`.
    fn rebuild_parameter(&mut self, tensor: NodeId, requires_grad: bool) -> NodeId {
        let requires_grad = self.outer.push(Node::Bool(requires_grad));
        let hooks = self.ordered_dict(Vec::new());
        self.call_global(
            UTILS,
            "_rebuild_parameter",
            vec![tensor, requires_grad, hooks],
        )
    }

    /// Applies a tensor's tweaks to its rebuild call.
    fn tweak_tensor(&mut self, mut node: NodeId, spec: &TensorSpec) -> NodeId {
        for tweak in &spec.tweaks {
            let Node::Object(object) = self.outer.pickle_mut().get(node).unwrap().clone() else {
                return node;
            };
            let Construction::Reduce { args } = object.construction else {
                return node;
            };
            let Node::Tuple(mut items) = self.outer.pickle_mut().get(args).unwrap().clone() else {
                return node;
            };
            match tweak {
                TensorTweak::Rebuild(rebuild) => {
                    let (module, name) = rebuild.global();
                    let callable = self.outer.global(module, name);
                    node = self.outer.call(callable, items);
                    continue;
                }
                TensorTweak::DropArg(at) => {
                    if !items.is_empty() {
                        items.remove(usize::from(*at) % items.len());
                    }
                }
                TensorTweak::ExtraArg(value) => items.push(self.int(value.0)),
                TensorTweak::ReplaceArg { at, value } => {
                    if !items.is_empty() {
                        let at = usize::from(*at) % items.len();
                        items[at] = self.int(value.0);
                    }
                }
                TensorTweak::ArgAsList(at) => {
                    if !items.is_empty() {
                        let at = usize::from(*at) % items.len();
                        if let Node::Tuple(inner) =
                            self.outer.pickle_mut().get(items[at]).unwrap().clone()
                        {
                            items[at] = self.outer.push(Node::List(inner));
                        }
                    }
                }
                TensorTweak::Wrap(times) => {
                    // The tensor as the argument of further rebuilds.
                    for _ in 0..usize::from(*times % 4) {
                        node = self.rebuild_parameter(node, true);
                    }
                    continue;
                }
            }
            node = self.outer.call(object.callable, items);
        }
        node
    }
}

impl Rebuild {
    fn global(self) -> (&'static str, &'static str) {
        match self {
            Rebuild::RebuildTensor => (REDUCTIONS, "rebuild_tensor"),
            Rebuild::V1 => (UTILS, "_rebuild_tensor"),
            Rebuild::V2 => (UTILS, "_rebuild_tensor_v2"),
            Rebuild::V3 => (UTILS, "_rebuild_tensor_v3"),
            Rebuild::Parameter => (UTILS, "_rebuild_parameter"),
            Rebuild::ParameterWithState => (UTILS, "_rebuild_parameter_with_state"),
            Rebuild::Cuda => (REDUCTIONS, "rebuild_cuda_tensor"),
        }
    }
}
