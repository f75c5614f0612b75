#!/usr/bin/env python3
"""The torch side of `tensorshare-bench --workload servers`: many torch
clients at once against one echo server, and torch's own server.

    bench_servers.py serve   --address ADDR --connections N
    bench_servers.py clients --address ADDR --processes P --threads T --requests R --bytes B

Run by the bench with the pinned torch; the authkey comes in
TENSORSHARE_AUTHKEY (hex), for the connections and every process's
resource sharer. ADDR is `@name`, an abstract socket.

serve    torch's server as torch code writes one: a `Listener`, a thread
         per connection sending back each message it receives
         (`conn.send(conn.recv())`, torch re-sharing the storages); exits
         once N connections have been served and closed.
clients  P processes (started with `spawn`), T threads each, a connection
         per thread: once every connection is up, each sends R requests
         `{"x": tensor of B bytes}` with `conn.send` (file_descriptor
         sharing) and checks each echo. Prints one JSON line:
         `{"requests": total, "seconds": from the first request to the
         last answer}`.
"""

import argparse
import json
import multiprocessing
import os
import sys
import threading
import time
from multiprocessing.connection import Client, Listener

import torch
import torch.multiprocessing


def address_of(text: str) -> str:
    return "\0" + text[1:] if text.startswith("@") else text


def join_job(authkey: bytes) -> None:
    multiprocessing.current_process().authkey = authkey
    torch.multiprocessing.set_sharing_strategy("file_descriptor")


def serve(address: str, authkey: bytes, connections: int) -> None:
    join_job(authkey)

    def echo(conn) -> None:
        with conn:
            while True:
                try:
                    message = conn.recv()
                except EOFError:
                    return
                conn.send(message)

    threads = []
    with Listener(address, authkey=authkey, backlog=connections) as listener:
        for _ in range(connections):
            thread = threading.Thread(target=echo, args=(listener.accept(),))
            thread.start()
            threads.append(thread)
    for thread in threads:
        thread.join()


def connect(address: str, authkey: bytes):
    deadline = time.monotonic() + 60
    while True:
        try:
            return Client(address, authkey=authkey)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def client_process(address, authkey, threads, requests, nbytes, barrier, results) -> None:
    join_job(authkey)
    connections = [connect(address, authkey) for _ in range(threads)]
    failures: list[str] = []
    done = []

    def run(index: int, conn) -> None:
        try:
            for request in range(requests):
                x = torch.full((nbytes // 4,), float(index * requests + request), dtype=torch.float32)
                x.share_memory_()
                conn.send({"x": x})
                echo = conn.recv()
                if not torch.equal(echo["x"], x):
                    failures.append(f"request {request}: the echo differs")
                    return
            done.append(time.time())
        except Exception as exc:  # noqa: BLE001 - reported, and the bench fails
            failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()

    barrier.wait()
    start = time.time()
    workers = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(connections)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    results.put((start, max(done, default=start), failures))


def clients(address, authkey, processes, threads, requests, nbytes) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(
            target=client_process,
            args=(address, authkey, threads, requests, nbytes, barrier, results),
        )
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    failures = [failure for _, _, fs in outcomes for failure in fs]
    if failures:
        sys.exit(f"{len(failures)} client(s) failed: {failures[:3]}")
    start = min(s for s, _, _ in outcomes)
    end = max(e for _, e, _ in outcomes)
    print(json.dumps({"requests": processes * threads * requests, "seconds": end - start}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["serve", "clients"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--bytes", type=int, default=4096)
    args = parser.parse_args()
    authkey = bytes.fromhex(os.environ["TENSORSHARE_AUTHKEY"])
    address = address_of(args.address)
    if args.mode == "serve":
        serve(address, authkey, args.connections)
    else:
        clients(address, authkey, args.processes, args.threads, args.requests, args.bytes)


if __name__ == "__main__":
    main()
