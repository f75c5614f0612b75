//! A batch's tensors in one storage of the context's strategy.

use super::SharingContext;
use crate::model::BatchLayout;

impl SharingContext {
    /// A batch of tensors to be allocated as one storage of this context's
    /// strategy, each tensor a view at its own offset (a multiple of
    /// [`BATCH_ALIGNMENT`](crate::model::BATCH_ALIGNMENT) bytes).
    ///
    /// A message of separate tensors costs a torch receiver one fd fetched
    /// from this process's resource sharer (`file_descriptor`: a connection
    /// and an authkey handshake) or one segment registered with its
    /// shared-memory manager (`file_system`) per tensor. A batch's tensors
    /// cost one per message: the storage is pickled once and every tensor
    /// names it, so the receiver rebuilds one `UntypedStorage` and views
    /// it, as after torch's own `torch.stack(samples, out=batch)` and
    /// slicing. All the views keep the whole storage alive (see
    /// [`Batch`](crate::model::Batch)).
    ///
    /// The storage is allocated as [`allocate`](Self::allocate) allocates
    /// any storage of its size: under `file_descriptor` a batch's memfd
    /// comes back to this context once every tensorshare receiver has
    /// dropped every view of it, and the next batch of that size reuses
    /// it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{Authkey, Dict, SharingContext, Value};
    ///
    /// let sharing = SharingContext::new(Authkey::new(b"secret".to_vec()));
    /// let mut layout = sharing.batch();
    /// let images = layout.tensor::<u8>(&[8, 3, 64, 64])?;
    /// let labels = layout.tensor::<i64>(&[8])?;
    /// let mut writer = layout.allocate()?;
    /// writer.as_mut_slice(images)?.fill(255);
    /// for (i, label) in writer.as_mut_slice(labels)?.iter_mut().enumerate() {
    ///     *label = i as i64;
    /// }
    /// let batch = writer.freeze();
    /// let message = Value::from(
    ///     Dict::new()
    ///         .with("image", batch.tensor(images).clone())
    ///         .with("label", batch.tensor(labels).clone()),
    /// );
    ///
    /// // What any receiver rebuilds, here this process: two views of one
    /// // storage.
    /// let received = sharing.loads(&sharing.dumps(&message)?)?;
    /// let image = received.get("image").and_then(Value::as_tensor).unwrap();
    /// let label = received.get("label").and_then(Value::as_tensor).unwrap();
    /// assert!(image.storage().same_as(label.storage()));
    /// assert_eq!(label.as_slice::<i64>()?, [0, 1, 2, 3, 4, 5, 6, 7]);
    /// assert_eq!(label.storage_offset() * 8, 8 * 3 * 64 * 64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn batch(&self) -> BatchLayout<'_> {
        BatchLayout::new(self)
    }
}
