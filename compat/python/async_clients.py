#!/usr/bin/env python3
"""Stock-PyTorch clients of an echo server that serves them all from one
async runtime (`tensorshare::tokio`).

    async_clients.py clients --address ADDR --authkey HEX --clients N --messages M
    async_clients.py vanish  --address ADDR --authkey HEX
    async_clients.py exits   --address ADDR --authkey HEX
    async_clients.py slow    --address ADDR --authkey HEX --mib K --release PATH

Run it with the pinned torch. ADDR is an AF_UNIX path, or `@name` for an
abstract socket; HEX is the authkey of the job, which the server shares.

clients  N threads, each on a connection of its own, send M tensors with
         `conn.send` (torch's file_descriptor sharing), each echo checked
         against what was sent; then one connection with a wrong authkey,
         which must be refused. Prints `ok N clients, M messages each`;
         exits 1 on any mismatch.
vanish   Authenticates, writes the header of a 1 MiB message and 10 bytes
         of it, then exits at once without closing anything.
exits    Sends a tensor as `conn.send` does (file_descriptor) with its
         resource sharer already stopped, as a sender that exits right
         after sending leaves it, then exits: the server cannot fetch the
         fd, and must go on to see the connection close.
slow     Sends a K MiB tensor, prints `sent`, and reads its echo only once
         PATH exists (at most 5 minutes later); exits 1 when it differs
         from what was sent.
"""

import argparse
import os
import sys
import threading
import time
from multiprocessing import resource_sharer
from multiprocessing.connection import Client, AuthenticationError
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing

from echo_peer import join_torch_job, unix_address


def client(address: str, authkey: bytes, index: int, messages: int, failures: list) -> None:
    try:
        with Client(address, authkey=authkey) as conn:
            for message in range(messages):
                sent = torch.arange(256, dtype=torch.float32) * (index + 1) + message
                sent.share_memory_()
                conn.send(sent)
                got = conn.recv()
                if not torch.equal(got, sent):
                    failures.append(f"client {index} message {message}: {got} != {sent}")
                    return
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails
        failures.append(f"client {index}: {type(exc).__name__}: {exc}")


def clients(address: str, authkey: bytes, count: int, messages: int) -> None:
    failures: list[str] = []
    threads = [
        threading.Thread(target=client, args=(address, authkey, index, messages, failures))
        for index in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        Client(address, authkey=b"not the job's key").close()
        failures.append("a client with the wrong authkey was accepted")
    except AuthenticationError:
        pass
    if failures:
        for failure in failures:
            print(f"FAIL {failure}", flush=True)
        sys.exit(1)
    print(f"ok {count} clients, {messages} messages each", flush=True)


def vanish(address: str, authkey: bytes) -> None:
    conn = Client(address, authkey=authkey)
    # A 1 MiB message announced, 10 bytes of it sent.
    os.write(conn.fileno(), (1 << 20).to_bytes(4, "big") + b"x" * 10)
    os._exit(0)


def exits(address: str, authkey: bytes) -> None:
    conn = Client(address, authkey=authkey)
    message = bytes(ForkingPickler.dumps(torch.arange(16, dtype=torch.float32)))
    # What a sender that exits at once leaves behind: nobody to fetch from.
    resource_sharer.stop()
    conn.send_bytes(message)
    os._exit(0)


def slow(address: str, authkey: bytes, mib: int, release: str) -> None:
    with Client(address, authkey=authkey) as conn:
        sent = torch.full((mib << 18,), 1.5, dtype=torch.float32)
        conn.send(sent)
        print("sent", flush=True)
        deadline = time.monotonic() + 300
        while not os.path.exists(release):
            if time.monotonic() > deadline:
                print("FAIL never released", file=sys.stderr, flush=True)
                sys.exit(1)
            time.sleep(0.05)
        got = conn.recv()
        if not torch.equal(got, sent):
            print("FAIL the slow reader's echo differs", file=sys.stderr, flush=True)
            sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["clients", "vanish", "exits", "slow"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--authkey", required=True)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--release", default="")
    args = parser.parse_args()
    authkey = bytes.fromhex(args.authkey)
    join_torch_job(authkey, "file_descriptor")
    address = unix_address(args.address)
    if args.mode == "clients":
        clients(address, authkey, args.clients, args.messages)
    elif args.mode == "vanish":
        vanish(address, authkey)
    elif args.mode == "exits":
        exits(address, authkey)
    else:
        slow(address, authkey, args.mib, args.release)


if __name__ == "__main__":
    main()
