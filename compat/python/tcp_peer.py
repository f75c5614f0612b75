#!/usr/bin/env python3
"""The stock-PyTorch side of the TCP tests: nothing but
`multiprocessing.connection.Client`/`Listener` on a `(host, port)` address.

    tcp_peer.py serve --address HOST:PORT --authkey HEX
    tcp_peer.py drive --address HOST:PORT --authkey HEX

Run it with the pinned torch: `"$(scripts/python-env)" compat/python/tcp_peer.py ...`.
HOST:PORT is an IPv4 address or a name and a port, or `[v6addr]:PORT` for
`serve` alone: CPython's `Listener` takes `family="AF_INET6"`, but its
`Client` makes an AF_INET socket for every tuple, so a torch client reaches
IPv4 listeners only. Port 0 under `serve` takes a free one.

Over TCP a torch process sends tensors with `conn.send_bytes(pickle.dumps(obj))`:
`conn.send(obj)` pickles with multiprocessing's ForkingPickler, for which
torch registers its shared-memory reductions (a `DupFd` naming a Unix socket
on this host, or a /dev/shm segment), whatever
`torch.multiprocessing.set_sharing_strategy` says. Plain `pickle.dumps`
writes every storage's bytes inline. What arrives is read with `conn.recv()`.

serve   An echo server in stock torch: prints `listening HOST:PORT` (the
        bound port) once ready, and sends every message back with
        `send_bytes(pickle.dumps(...))` on its connection, a thread per
        connection, until EOF. A client with the wrong authkey is refused
        and the server keeps serving. SIGTERM or SIGINT stop it.

drive   A torch client of an echo server over TCP (`tensorshare echo
        --listen HOST:PORT`): every dtype, views, Parameters, containers and
        aliasing, each echoed and checked, echoes being copies; a wrong
        authkey refused; then `conn.send(tensor)`, torch's shared-memory
        form, which the server must refuse by closing the connection while
        it goes on serving others. Prints `ok CASE`, `FAIL CASE: reason` or
        `skip CASE: reason` per case and `N cases passed, M failed` last;
        exits 1 if a case failed.
"""

import argparse
import functools
import multiprocessing
import pickle
import sys
import warnings
from collections.abc import Callable, Iterator
from multiprocessing.connection import Client, Connection, Listener
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

# The cases and checks of the Unix-socket peer, beside this file.
from echo_peer import (
    EchoClient,
    Tally,
    accept_forever,
    case_wrong_authkey,
    describe,
    expect,
    expect_unanswered,
    log,
    matrix,
    storage_ptr,
    value_cases,
)


def tcp_address(text: str) -> tuple[str, int]:
    """`host:port` or `[v6addr]:port` as the `(host, port)` tuple
    multiprocessing takes."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def family_of(address: tuple[str, int]) -> str:
    """AF_INET6 for an IPv6 host, which only a Listener can be told."""
    return "AF_INET6" if ":" in address[0] else "AF_INET"


# ---------------------------------------------------------------- serve


def serve(address: tuple[str, int], authkey: bytes) -> None:
    with Listener(address, family=family_of(address), authkey=authkey) as listener:
        host, port = listener.address[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"listening {shown}:{port}", flush=True)
        accept_forever(listener, echo_connection)


def echo_connection(conn: Connection) -> None:
    with conn:
        while True:
            try:
                obj = conn.recv()
            except EOFError:
                return
            except Exception as exc:
                log(f"closing a connection whose message torch cannot rebuild: {describe(exc)}")
                return
            conn.send_bytes(pickle.dumps(obj))


# ---------------------------------------------------------------- drive


class TcpEchoClient(EchoClient):
    """The Unix-socket peer's client on a `(host, port)` address, sending
    with plain pickle."""

    def __init__(self, address: tuple[str, int], authkey: bytes) -> None:
        super().__init__("", authkey)
        self.tcp_address = address

    def connect(self, authkey: bytes | None = None) -> Connection:
        return Client(self.tcp_address, authkey=authkey or self.authkey)

    def dumps(self, obj: Any) -> bytes:
        return pickle.dumps(obj)


def case_alias(client: TcpEchoClient) -> None:
    """One tensor twice stays one. Two views of one storage arrive on two:
    plain pickle writes each view's storage apart (torch makes a new storage
    object per view while pickling, so pickle's memo never sees it twice),
    and `check_same` checks each view's bytes."""
    x = matrix()
    got = client.check_echo([x, x, x[0], x[1]])
    expect(got[0] is got[1], "one tensor sent twice came back as two tensors")


def case_copies(client: TcpEchoClient) -> None:
    sent = torch.arange(64, dtype=torch.float32).share_memory_()
    got = client.check_echo(sent)
    expect(storage_ptr(got) != storage_ptr(sent), "the echo over TCP is the sent memory")
    expect(not got.is_shared(), "the echo over TCP is in shared memory")


def case_shared_memory_refused(client: TcpEchoClient, strategy: str) -> None:
    """torch's own `conn.send(tensor)` over TCP: a handle the server must
    refuse, answering nothing, while it serves the next message."""
    torch.multiprocessing.set_sharing_strategy(strategy)
    with client.connect() as conn:
        expect_unanswered(conn, bytes(ForkingPickler.dumps(torch.arange(16, dtype=torch.int32))))
    client.reset()
    client.check_echo(torch.arange(10, dtype=torch.float64) * 1.5)


def drive_cases(client: TcpEchoClient) -> Iterator[tuple[str, Callable[[], None]]]:
    partial = functools.partial
    yield from value_cases(client)
    yield "alias", partial(case_alias, client)
    yield "copies", partial(case_copies, client)
    yield "wrong_authkey", partial(case_wrong_authkey, client)
    for strategy in ("file_descriptor", "file_system"):
        yield f"refused_{strategy}", partial(case_shared_memory_refused, client, strategy)


def drive(address: tuple[str, int], authkey: bytes) -> int:
    client = TcpEchoClient(address, authkey)
    tally = Tally()
    for name, case in drive_cases(client):
        tally.run(client, name, case)
    client.reset()
    print(f"{tally.passed} cases passed, {tally.failed} failed", flush=True)
    return 1 if tally.failed else 0


# ---------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Stock-PyTorch TCP peer of the tensorshare tests.")
    parser.add_argument("command", choices=["serve", "drive"])
    parser.add_argument("--address", required=True, type=tcp_address, help="HOST:PORT")
    parser.add_argument("--authkey", required=True, type=bytes.fromhex, help="hex")
    args = parser.parse_args(argv)
    # The resource sharer of a refused case authenticates with it.
    multiprocessing.current_process().authkey = args.authkey
    warnings.filterwarnings("ignore", message="ComplexHalf support is experimental")
    if args.command == "serve":
        serve(args.address, args.authkey)
        return 0
    return drive(args.address, args.authkey)


if __name__ == "__main__":
    sys.exit(main())
