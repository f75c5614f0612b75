"""Stock torch receiving the batches of a Rust producer that exits (or is
killed) while its messages wait: every batch it sent must still rebuild.

    python exiting_producer_receiver.py [--runs R] [--image N,C,H,W] [--hold K]
        [--pause-after N [--until-exit | --until-said LINE] [--pause S]]
        [--each S] [--kill-after N] [--read-after-exit S] -- PRODUCER...

PRODUCER is the command of `tests/peers/exiting_producer.rs`; it gets this
process's authkey in TENSORSHARE_AUTHKEY. The receiver reads each batch
(`conn.recv()`, which rebuilds it through torch's reductions), checks every
element (of an image of the shape `--image` gives, the producer's default
8,3,64,64 unless told), and drops it, or, with `--hold K`, keeps the last K
alive as a training loop's prefetch does. `--pause-after N` stops reading after batch N: until
the producer has exited (`--until-exit`) or said LINE on its stdout
(`--until-said`, e.g. `sent 60`: it has sent everything and waits for its
receiver), then S seconds more (`--pause S`); `--each S` sleeps after every
batch; `--kill-after N` sends the
producer SIGKILL as soon as it says it sent batch N, and receives after;
`--read-after-exit S` reads nothing until the producer has exited and S
seconds more have passed.
`--runs R` does all of it R times in a row, a new producer each time.

Prints one JSON line a run: {"received": N, "ended": "none"|"eof",
"producer": RC, "pid": PID, "said": [its last word]}. Exits 1 with the run,
the failing batch and torch's error when a batch does not rebuild or holds
other values.
"""
import argparse
import collections
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Client

import torch
import torch.multiprocessing  # noqa: F401  registers torch's reductions

parser = argparse.ArgumentParser()
parser.add_argument("--pause-after", type=int, default=-1)
parser.add_argument("--until-exit", action="store_true")
parser.add_argument("--until-said")
parser.add_argument("--pause", type=float, default=0.0)
parser.add_argument("--each", type=float, default=0.0)
parser.add_argument("--kill-after", type=int, default=-1)
parser.add_argument("--read-after-exit", type=float, default=-1.0)
parser.add_argument("--runs", type=int, default=1)
parser.add_argument("--image", default="8,3,64,64")
parser.add_argument("--hold", type=int, default=0)
parser.add_argument("producer", nargs="+")
args = parser.parse_args()

authkey = multiprocessing.current_process().authkey
shape = tuple(int(size) for size in args.image.split(","))


def check(index, batch):
    image, label = batch["image"], batch["label"]
    n = shape[0]
    assert image.dtype == torch.uint8 and image.shape == shape, image.shape
    expected = torch.arange(index * n, index * n + n, dtype=torch.int64)
    assert torch.equal(label, expected), (label, expected)
    shades = (expected % 251).to(torch.uint8).view(n, 1, 1, 1).expand(shape)
    assert torch.equal(image, shades), f"batch {index}: images hold other values"


def run_once(run):
    producer = subprocess.Popen(
        args.producer,
        env={**os.environ, "TENSORSHARE_AUTHKEY": authkey.hex()},
        stdout=subprocess.PIPE,
        text=True,
    )
    first = producer.stdout.readline()
    if not first.startswith("listening "):
        sys.exit(f"run {run}: the producer exited with status {producer.wait()} before listening")
    address = first.removeprefix("listening ").rstrip("\n")

    received = 0
    held = collections.deque(maxlen=args.hold) if args.hold else None
    ended = None
    with Client(address, authkey=authkey) as conn:
        if args.kill_after >= 0:
            for line in producer.stdout:
                if line.strip() == f"sent {args.kill_after}":
                    break
            producer.send_signal(signal.SIGKILL)
            producer.wait()
        if args.read_after_exit >= 0:
            producer.wait()
            time.sleep(args.read_after_exit)
        while True:
            try:
                batch = conn.recv()
            except EOFError:
                ended = "eof"
                break
            except Exception as error:  # noqa: BLE001  torch's error is the finding
                sys.exit(f"run {run}: batch {received} did not rebuild: {type(error).__name__}: {error}")
            if batch is None:
                ended = "none"
                break
            check(received, batch)
            if held is not None:
                held.append(batch)
            del batch
            received += 1
            if received == args.pause_after:
                if args.until_exit:
                    producer.wait()
                elif args.until_said is not None:
                    for line in producer.stdout:
                        if line.strip() == args.until_said:
                            break
                    else:
                        sys.exit(f"run {run}: the producer ended without saying {args.until_said!r}")
                time.sleep(args.pause)
            if args.each:
                time.sleep(args.each)

    del held
    rest = producer.stdout.read()
    status = producer.wait()
    outcome = {"received": received, "ended": ended, "producer": status}
    outcome.update(pid=producer.pid, said=rest.split()[-1:])
    print(json.dumps(outcome), flush=True)


for run in range(args.runs):
    run_once(run)
