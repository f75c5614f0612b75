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
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

import torch

# The cases and checks of the Unix-socket peer, beside this file.
from echo_peer import (
    ANSWER_TIMEOUT,
    DTYPES,
    OPTIONAL_DTYPES,
    CaseFailure,
    Tally,
    container_messages,
    describe,
    dtype_tensor,
    expect,
    log,
    matrix,
    optional_dtype_tensor,
    parameter_messages,
    check_same,
    storage_ptr,
    view_messages,
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
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Listener(address, family=family_of(address), authkey=authkey) as listener:
        host, port = listener.address[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"listening {shown}:{port}", flush=True)
        while True:
            try:
                conn = listener.accept()
            except (multiprocessing.AuthenticationError, OSError) as exc:
                log(f"refused a client: {describe(exc)}")
                continue
            threading.Thread(target=echo_connection, args=(conn,), daemon=True).start()


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


class TcpEchoClient:
    """The connection cases share, reopened after a case that failed."""

    def __init__(self, address: tuple[str, int], authkey: bytes) -> None:
        self.address = address
        self.authkey = authkey
        self._conn: Connection | None = None

    def connect(self, authkey: bytes | None = None) -> Connection:
        return Client(self.address, authkey=authkey or self.authkey)

    def echo(self, obj: Any) -> Any:
        if self._conn is None:
            self._conn = self.connect()
        self._conn.send_bytes(pickle.dumps(obj))
        if not self._conn.poll(ANSWER_TIMEOUT):
            raise CaseFailure(f"no echo within {ANSWER_TIMEOUT:.0f} s")
        return self._conn.recv()

    def check_echo(self, sent: Any) -> Any:
        got = self.echo(sent)
        check_same(sent, got)
        return got

    def reset(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def case_echo(client: TcpEchoClient, message: Any) -> None:
    client.check_echo(message)


def case_dtype(client: TcpEchoClient, name: str, seed: int, optional: bool) -> None:
    client.check_echo(optional_dtype_tensor(name, seed) if optional else dtype_tensor(name, seed))


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


def case_wrong_authkey(client: TcpEchoClient) -> None:
    wrong = bytes(b ^ 0xFF for b in client.authkey)
    try:
        client.connect(authkey=wrong).close()
    except multiprocessing.AuthenticationError:
        client.reset()
        client.check_echo(torch.arange(10, dtype=torch.float64) * 1.5)
    else:
        raise CaseFailure("a client with the wrong authkey was let in")


def case_shared_memory_refused(client: TcpEchoClient, strategy: str) -> None:
    """torch's own `conn.send(tensor)` over TCP: a handle the server must
    refuse by closing the connection; a fresh connection is served."""
    torch.multiprocessing.set_sharing_strategy(strategy)
    with client.connect() as conn:
        conn.send(torch.arange(16, dtype=torch.int32))
        try:
            answered = conn.poll(ANSWER_TIMEOUT) and conn.recv()
        except (EOFError, OSError):
            answered = None
        expect(answered is None, f"the server answered a {strategy} handle: {answered!r}")
    client.reset()
    client.check_echo(torch.arange(10, dtype=torch.float64) * 1.5)


def drive_cases(client: TcpEchoClient) -> Iterator[tuple[str, Callable[[], None]]]:
    partial = functools.partial
    dtypes = [(name, False) for name in DTYPES] + [(name, True) for name in OPTIONAL_DTYPES]
    for seed, (name, optional) in enumerate(dtypes):
        yield f"dtype_{name}", partial(case_dtype, client, name, seed, optional)
    messages = {**view_messages(), **parameter_messages(), **container_messages()}
    for name, message in messages.items():
        yield name, partial(case_echo, client, message)
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
