#!/usr/bin/env python3
"""The PyTorch side of `tensorshare-bench --workload batches`: one training
loop fed DataLoader-shaped batches by torch's own DataLoader, by a torch
producer over a connection, or by a producer at the other end of one.

`tensorshare-bench` writes this file beside bench_peer.py (whose plumbing it
uses) and reads the one JSON object it prints on stdout; everything else it
says goes to stderr.

A batch is `{"image": images, "label": labels}`: `images` of shape
`[N, *sample]` (uint8 or float32), `labels` int64 `[N]`. Batch `i` of a run
stacks samples `(i * N + j) % (2 * N)` for `j` in `0..N`; sample `s` is an
image every element of which is `s % 251`, and the label `s`.

The training loop is the same whatever feeds it (`train`): for each batch it
converts the image to float32 and sums every element, as a first layer reads
every byte, sums the labels, and checks both sums against the batch's index. A run's clock starts
before the loop asks for its first batch (creating the DataLoader's iterator,
or asking the producer for the run) and stops after the last batch's check.

Feeds:

    dataloader --workers K     torch.utils.data.DataLoader over a dataset
        returning precomputed samples, K workers, persistent, default
        prefetch (2 per worker), its default collate: in a worker it stacks
        the samples into a tensor in shared memory, which the worker queue
        pickles under the default sharing strategy (file_descriptor).
    torch-producer             a spawned torch process collating the same
        samples into shared memory as the DataLoader's collate does, and
        sending each batch over a multiprocessing Pipe (`conn.send`).
    consume --address ADDR     a producer listening at ADDR (the Rust side).

With `--consumers N` the bench starts N consumers at once, each with its
own batches as DDP ranks take theirs: N `consume` processes connected to
one Rust producer, or N `dataloader` runs, each given `--start-at ADDR`:
it builds its DataLoader, connects to ADDR and waits there for the start
signal (one object), so that every DataLoader starts its runs together.

The protocol on a connection, the producer listening or not:

    producer -> consumer   {"batch": N, "sample": [C, H, W], "dtype": "uint8"
                            | "float32", "batches": B, "rounds": R, "window": W}
    then 1 + R times (a warm-up run, then the timed rounds):
    consumer -> producer   B
    producer -> consumer   B batches; the consumer acks each (its index) as
                           it receives it, before training on it, and the
                           producer keeps at most W batches unacked
    finally
    consumer -> producer   0

With W = 4 the producer is as far ahead as a DataLoader with 2 workers and
the default prefetch of 2: the DataLoader too sends a worker a new index as
each batch is received. Output: {"feed": ..., "seconds": [t1, ..., tR]}.
"""

import argparse
import json
import math
import multiprocessing.connection
import os
import sys
import time

import torch
import torch.multiprocessing
import torch.utils.data

import bench_peer

SAMPLE_MODULUS = 251
HEADER_KEYS = ("batch", "sample", "dtype", "batches", "rounds", "window")
DTYPES = {"uint8": torch.uint8, "float32": torch.float32}


# The batches


def sample_count(header):
    """How many distinct samples the batches are made of."""
    return 2 * header["batch"]


def make_samples(header):
    """The precomputed samples: (image, label) with label a 0-d int64 tensor."""
    dtype = DTYPES[header["dtype"]]
    return [
        (
            torch.full(header["sample"], s % SAMPLE_MODULUS, dtype=dtype),
            torch.tensor(s, dtype=torch.int64),
        )
        for s in range(sample_count(header))
    ]


def sample_ids(header, index):
    """The samples batch `index` stacks."""
    n = header["batch"]
    return [(index * n + j) % sample_count(header) for j in range(n)]


def collate_shared(tensors):
    """`torch.stack(tensors)` into a fresh tensor in shared memory, as the
    DataLoader's default collate does in a worker."""
    first = tensors[0]
    storage = first._typed_storage()._new_shared(sum(t.numel() for t in tensors))
    out = first.new(storage).resize_(len(tensors), *first.size())
    return torch.stack(tensors, 0, out=out)


class PrecomputedSamples(torch.utils.data.Dataset):
    """`batches * N` items cycling through the precomputed samples: only the
    transport is measured, not making the data."""

    def __init__(self, header):
        self.header = header
        self.samples = make_samples(header)

    def __len__(self):
        return self.header["batches"] * self.header["batch"]

    def __getitem__(self, item):
        image, label = self.samples[item % len(self.samples)]
        return {"image": image, "label": label}


# The training loop


def expected_sums(header, index):
    """The sums of batch `index`'s image elements and labels."""
    ids = sample_ids(header, index)
    per_sample = math.prod(header["sample"])
    return sum(s % SAMPLE_MODULUS for s in ids) * per_sample, sum(ids)


class Expected:
    """What the loop checks each batch against, worked out before the clock
    starts: the shapes, dtypes and sums (batches of the same parity hold
    the same samples)."""

    def __init__(self, header):
        self.image = (tuple([header["batch"], *header["sample"]]), DTYPES[header["dtype"]])
        self.label = ((header["batch"],), torch.int64)
        self.sums = [expected_sums(header, parity) for parity in (0, 1)]


def train_step(expected, batch, index):
    """Reads every element of the batch; raises BenchError unless it is
    batch `index`."""
    if not isinstance(batch, dict) or batch.keys() != {"image", "label"}:
        raise bench_peer.BenchError(f"batch {index}: received {type(batch).__name__}")
    image, label = batch["image"], batch["label"]
    if (image.shape, image.dtype) != expected.image:
        raise bench_peer.BenchError(f"batch {index}: image {image.dtype} {list(image.shape)}")
    if (label.shape, label.dtype) != expected.label:
        raise bench_peer.BenchError(f"batch {index}: label {label.dtype} {list(label.shape)}")
    # As a first layer reads it: in float32 (torch's own uint8 sum takes
    # 25 ms at 4.6 MiB, which would hide every transport behind it), summed
    # pairwise, close enough to tell the batches apart.
    image_sum, label_sum = float(image.float().sum()), int(label.sum())
    expected_image, expected_label = expected.sums[index % 2]
    if label_sum != expected_label or not math.isclose(image_sum, expected_image, rel_tol=1e-4):
        raise bench_peer.BenchError(
            f"batch {index}: sums {image_sum, label_sum}, expected {expected_image, expected_label}"
        )


def train(header, run):
    """The training loop over a warm-up run and the timed rounds; `run()`
    is an iterable of one run's batches. Returns each round's seconds and
    how many batches passed their check."""
    expected = Expected(header)
    seconds = []
    checked = 0
    for round_number in range(header["rounds"] + 1):
        start = time.perf_counter()
        count = 0
        for index, batch in enumerate(run()):
            train_step(expected, batch, index)
            del batch
            count += 1
            checked += 1
        elapsed = time.perf_counter() - start
        if count != header["batches"]:
            raise bench_peer.BenchError(f"a run gave {count} batches, expected {header['batches']}")
        if round_number > 0:
            seconds.append(elapsed)
    return seconds, checked


def connection_run(conn, header):
    """One run's batches from the producer at the other end of `conn`."""
    conn.send(header["batches"])
    for index in range(header["batches"]):
        batch = conn.recv()
        conn.send(index)
        yield batch


def train_from_connection(conn):
    header = receive_header(conn)
    seconds, checked = train(header, lambda: connection_run(conn, header))
    conn.send(0)
    return seconds, checked


def receive_header(conn):
    header = conn.recv()
    if not isinstance(header, dict) or set(header) != set(HEADER_KEYS):
        raise bench_peer.BenchError(f"bad header {header!r}")
    if header["dtype"] not in DTYPES:
        raise bench_peer.BenchError(f"bad header: dtype {header['dtype']!r}")
    return header


# The torch producer over a connection


def produce(conn, header):
    """Serves runs until the consumer asks for 0 batches."""
    samples = make_samples(header)
    conn.send(header)
    while (count := conn.recv()) != 0:
        kept = []
        for index in range(count):
            if len(kept) == header["window"]:
                conn.recv()
                kept.pop(0)
            ids = sample_ids(header, index)
            batch = {
                "image": collate_shared([samples[s][0] for s in ids]),
                "label": collate_shared([samples[s][1] for s in ids]),
            }
            conn.send(batch)
            kept.append(batch)
        for _ in kept:
            conn.recv()


def spawned_producer(conn, header):
    try:
        with conn:
            produce(conn, header)
    except bench_peer.RUN_ERRORS as error:
        bench_peer.fail(error)


# Subcommands


def header_from(args):
    return {
        "batch": args.batch,
        "sample": args.sample,
        "dtype": args.dtype,
        "batches": args.batches,
        "rounds": args.rounds,
        "window": args.window,
    }


def run_dataloader(args):
    header = header_from(args)
    loader = torch.utils.data.DataLoader(
        PrecomputedSamples(header),
        batch_size=header["batch"],
        num_workers=args.workers,
        persistent_workers=True,
    )
    if args.start_at is not None:
        wait_for_start(args.start_at)
    seconds, checked = train(header, lambda: loader)
    return {"feed": f"dataloader-{args.workers}", "seconds": seconds, "checked": checked}


def wait_for_start(address):
    """Connects to `address` (the authkey in the environment) and waits
    for the start signal."""
    authkey = bench_peer.adopt_authkey(bytes.fromhex(os.environ[bench_peer.AUTHKEY_ENV]))
    address, family = bench_peer.socket_address(address)
    with multiprocessing.connection.Client(address, family=family, authkey=authkey) as conn:
        conn.recv()


def run_torch_producer(args):
    header = header_from(args)
    context = torch.multiprocessing.get_context("spawn")
    consumer_end, producer_end = context.Pipe(duplex=True)
    producer = context.Process(target=spawned_producer, args=(producer_end, header), daemon=True)
    producer.start()
    producer_end.close()
    with consumer_end:
        seconds, checked = train_from_connection(consumer_end)
    producer.join()
    if producer.exitcode != 0:
        raise bench_peer.BenchError(f"producer process exited with code {producer.exitcode}")
    return {"feed": "torch-producer", "seconds": seconds, "checked": checked}


def run_consume(args):
    authkey = bench_peer.adopt_authkey(args.authkey)
    address, family = bench_peer.socket_address(args.address)
    with multiprocessing.connection.Client(address, family=family, authkey=authkey) as conn:
        seconds, checked = train_from_connection(conn)
    return {"feed": "connection", "seconds": seconds, "checked": checked}


def add_batch_arguments(parser):
    parser.add_argument("--batch", required=True, type=bench_peer.positive_int)
    parser.add_argument("--sample", required=True, type=bench_peer.positive_int, nargs=3)
    parser.add_argument("--dtype", required=True, choices=sorted(DTYPES))
    parser.add_argument("--batches", required=True, type=bench_peer.positive_int)
    parser.add_argument("--rounds", required=True, type=bench_peer.positive_int)
    parser.add_argument("--window", type=bench_peer.positive_int, default=4)


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    dataloader = commands.add_parser("dataloader", help="torch's DataLoader feeds the loop")
    add_batch_arguments(dataloader)
    dataloader.add_argument("--workers", required=True, type=bench_peer.positive_int)
    dataloader.add_argument(
        "--start-at",
        metavar="ADDR",
        help="wait for the start signal at ADDR (authkey in $TENSORSHARE_AUTHKEY)",
    )
    dataloader.set_defaults(run=run_dataloader)
    torch_producer = commands.add_parser("torch-producer", help="a torch producer over a Pipe")
    add_batch_arguments(torch_producer)
    torch_producer.set_defaults(run=run_torch_producer)
    consume = commands.add_parser("consume", help="the producer listening at --address")
    bench_peer.add_connection_arguments(consume)
    consume.set_defaults(run=run_consume)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    bench_peer.resolve_authkey(parser, args)
    try:
        result = args.run(args)
    except bench_peer.RUN_ERRORS as error:
        bench_peer.fail(error)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
