//! Items of lists, dicts, sets and objects, in CPython's batches of 1000.
//!
//! CPython has four batching loops that differ at the edges (one item, a
//! multiple of 1000), and `pickle.dumps` output depends on which one runs.

use super::{BATCH_SIZE, Encoder, Task};
use crate::pickle::NodeId;
use crate::pickle::opcodes::MARK;

/// How the items of a container are batched, after CPython's four loops.
#[derive(Clone, Copy)]
pub(super) enum BatchStyle {
    /// `batch_list_exact`: one item alone uses the single-item opcode.
    ExactList,
    /// `batch_dict_exact`: as lists, plus an empty batch after a full last one.
    ExactDict,
    /// `save_set`: always marked, plus an empty batch after a full last one.
    Set,
    /// `batch_list`/`batch_dict` over an iterator (object items): a last
    /// batch of one item uses the single-item opcode.
    Iterator,
}

/// One batch of items: `MARK items multi_op`, or `item single_op`.
#[derive(Clone, Copy)]
pub(super) struct Chunk {
    start: usize,
    end: usize,
    marked: bool,
}

pub(super) fn plan_batches(len: usize, style: BatchStyle) -> Vec<Chunk> {
    let mut chunks: Vec<Chunk> = (0..len)
        .step_by(BATCH_SIZE)
        .map(|start| Chunk {
            start,
            end: len.min(start + BATCH_SIZE),
            marked: true,
        })
        .collect();
    match style {
        BatchStyle::ExactList => {
            if len == 1 {
                chunks[0].marked = false;
            }
        }
        BatchStyle::ExactDict | BatchStyle::Set => {
            if len == 1 && matches!(style, BatchStyle::ExactDict) {
                chunks[0].marked = false;
            } else if len > 0 && len.is_multiple_of(BATCH_SIZE) {
                chunks.push(Chunk {
                    start: len,
                    end: len,
                    marked: true,
                });
            }
        }
        BatchStyle::Iterator => {
            if let Some(last) = chunks.last_mut() {
                last.marked = last.end - last.start > 1;
            }
        }
    }
    chunks
}

/// The items of a container being batched.
#[derive(Clone, Copy)]
pub(super) enum Items<'a> {
    Values(&'a [NodeId]),
    Pairs(&'a [(NodeId, NodeId)]),
}

/// A container's items still to write.
pub(super) struct Batches<'a> {
    items: Items<'a>,
    chunks: Vec<Chunk>,
    next: usize,
    single_op: u8,
    multi_op: u8,
}

impl<'a> Encoder<'a> {
    pub(super) fn push_batches(
        &mut self,
        items: Items<'a>,
        style: BatchStyle,
        single_op: u8,
        multi_op: u8,
    ) {
        let len = match items {
            Items::Values(values) => values.len(),
            Items::Pairs(pairs) => pairs.len(),
        };
        let chunks = plan_batches(len, style);
        if !chunks.is_empty() {
            self.tasks.push(Task::Batches(Batches {
                items,
                chunks,
                next: 0,
                single_op,
                multi_op,
            }));
        }
    }

    pub(super) fn next_batch(&mut self, mut batches: Batches<'a>) {
        let Some(&chunk) = batches.chunks.get(batches.next) else {
            return;
        };
        batches.next += 1;
        let items = batches.items;
        let close = if chunk.marked {
            batches.multi_op
        } else {
            batches.single_op
        };
        if batches.next < batches.chunks.len() {
            self.tasks.push(Task::Batches(batches));
        }
        self.tasks.push(Task::Op(close));
        match items {
            Items::Values(values) => {
                if let Some(chunk_items) = values.get(chunk.start..chunk.end) {
                    self.push_saves(chunk_items);
                }
            }
            Items::Pairs(pairs) => {
                if let Some(chunk_pairs) = pairs.get(chunk.start..chunk.end) {
                    for &(key, value) in chunk_pairs.iter().rev() {
                        self.tasks.push(Task::Save(value));
                        self.tasks.push(Task::Save(key));
                    }
                }
            }
        }
        if chunk.marked {
            self.out.write(&[MARK]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_follow_cpython_loops() {
        let shape = |len, style| {
            plan_batches(len, style)
                .iter()
                .map(|c| (c.end - c.start, c.marked))
                .collect::<Vec<_>>()
        };
        assert_eq!(shape(0, BatchStyle::ExactList), []);
        assert_eq!(shape(1, BatchStyle::ExactList), [(1, false)]);
        assert_eq!(
            shape(1001, BatchStyle::ExactList),
            [(1000, true), (1, true)]
        );
        assert_eq!(shape(1, BatchStyle::ExactDict), [(1, false)]);
        assert_eq!(
            shape(1000, BatchStyle::ExactDict),
            [(1000, true), (0, true)]
        );
        assert_eq!(shape(1, BatchStyle::Set), [(1, true)]);
        assert_eq!(
            shape(2000, BatchStyle::Set),
            [(1000, true), (1000, true), (0, true)]
        );
        assert_eq!(shape(1000, BatchStyle::Iterator), [(1000, true)]);
        assert_eq!(
            shape(1001, BatchStyle::Iterator),
            [(1000, true), (1, false)]
        );
    }
}
