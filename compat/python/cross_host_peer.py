#!/usr/bin/env python3
"""The stock-PyTorch side of the tests across hosts: torch on one host,
tensorshare on another, over `multiprocessing.connection` on TCP.

    cross_host_peer.py serve      --address HOST:PORT --authkey HEX [--reply-shared STRATEGY]
    cross_host_peer.py drive      --address HOST:PORT --authkey HEX
    cross_host_peer.py large      --address HOST:PORT --authkey HEX
    cross_host_peer.py send-large --address HOST:PORT --authkey HEX --nbytes N
    cross_host_peer.py send-shared --address HOST:PORT --authkey HEX --strategy STRATEGY

Run it with the pinned torch. A listener's first line on stdout is its
address, and all it says later goes to stderr: its starter may stop
reading stdout after that line. HOST:PORT is an IPv4 address or name and a
port (CPython's `multiprocessing.connection` makes an `AF_INET` socket for
every `(host, port)`); a listener given port 0 binds a free one. HEX is the
authkey. Shared memory does not cross hosts, so every tensor goes as
`pickle.dumps(tensor)` writes it (the storage's bytes inline), except under
--reply-shared and send-shared, which send what torch's `ForkingPickler`
writes on purpose, to be refused.

serve        A listener that prints `listening HOST:PORT` once ready and sends
             every message back, each connection on a thread of its own,
             until EOF. It logs a refused client (wrong authkey) on stderr
             and keeps serving. --reply-shared sends every echo as a handle
             to shared memory under torch's STRATEGY (file_descriptor or
             file_system) instead.
drive        echo_peer.py's drive cases (every dtype, views, Parameter,
             containers, aliases, copies, repeats, a wrong authkey) against
             an echo server on another host, pickled plainly. Prints `ok
             CASE`, `FAIL CASE: reason` or `skip CASE: reason`, then `N cases
             passed, M failed`; exits 1 if a case failed.
large        A listener for one client and one message: a uint8 tensor with
             the pattern of `large_tensor`, which it checks, adds 1 to every
             byte of in place, and sends back. Prints `listening HOST:PORT`,
             then on stderr `received NBYTES in SECS s`, `checked`, `sent in
             SECS s`.
send-large   A listener that, once its one client is in, sends one
             NBYTES-byte tensor (saying `sending`, then `sent`, on stderr):
             the sender of a message the link is cut under.
send-shared  A client that sends one tensor shared by torch's STRATEGY, then
             prints `closed` once the server hung up (or `answered` if it
             sent anything back).
"""

import argparse
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from multiprocessing.connection import Client, Connection, Listener
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import echo_peer  # noqa: E402  (the drive cases, from beside this script)

# The chunk of the large message's pattern: its first 8 bytes are the
# chunk's index (int64, little endian), the rest byte i is i % 256.
LARGE_CHUNK = 1 << 20
ANSWER_TIMEOUT = 60.0  # seconds `send-shared` waits for the server's answer or its hanging up


def log(message: str) -> None:
    print(f"cross_host_peer: {message}", file=sys.stderr, flush=True)


def tcp_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def shown(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


def plain_send(conn: Connection, obj: Any) -> None:
    conn.send_bytes(pickle.dumps(obj))


def plain_recv(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


def listen(address: tuple[str, int], authkey: bytes) -> Listener:
    listener = Listener(address, family="AF_INET", authkey=authkey)
    print(f"listening {shown(listener.address)}", flush=True)
    return listener


# ---------------------------------------------------------------- serve


def serve(address: tuple[str, int], authkey: bytes, reply_shared: str | None) -> None:
    if reply_shared:
        multiprocessing.current_process().authkey = authkey
        torch.multiprocessing.set_sharing_strategy(reply_shared)
    with listen(address, authkey) as listener:
        while True:
            try:
                conn = listener.accept()
            except (multiprocessing.AuthenticationError, EOFError, ConnectionError) as exc:
                log(f"refused a client: {echo_peer.describe(exc)}")
                continue
            threading.Thread(
                target=echo_connection, args=(conn, reply_shared), daemon=True
            ).start()


def echo_connection(conn: Connection, reply_shared: str | None) -> None:
    with conn:
        while True:
            try:
                message = conn.recv_bytes()
            except (EOFError, ConnectionError):
                return
            value = pickle.loads(message)
            if reply_shared:
                conn.send_bytes(bytes(ForkingPickler.dumps(value)))
            else:
                plain_send(conn, value)


# ---------------------------------------------------------------- drive


class PlainEchoClient(echo_peer.EchoClient):
    """echo_peer's client over TCP, pickling plainly: what crosses hosts."""

    def __init__(self, address: tuple[str, int], authkey: bytes) -> None:
        super().__init__("", authkey)
        self.address = address

    def connect(self, authkey: bytes | None = None) -> Connection:
        return Client(self.address, family="AF_INET", authkey=authkey or self.authkey)

    def echo(self, obj: Any) -> Any:
        if self._conn is None:
            self._conn = self.connect()
        plain_send(self._conn, obj)
        if not self._conn.poll(echo_peer.ANSWER_TIMEOUT):
            raise echo_peer.CaseFailure(f"no echo within {echo_peer.ANSWER_TIMEOUT:.0f} s")
        return plain_recv(self._conn)


def drive(address: tuple[str, int], authkey: bytes) -> int:
    # Every echo is a copy, carried inline.
    echo_peer.ECHO_COPIES = True
    client = PlainEchoClient(address, authkey)
    tally = echo_peer.Tally()
    for name, case in echo_peer.drive_cases(client, repeat=20):
        tally.run(client, name, case)
    client.reset()
    print(f"{tally.passed} cases passed, {tally.failed} failed", flush=True)
    return 1 if tally.failed else 0


# ---------------------------------------------------------------- large


def check_large(t: torch.Tensor, bump: int) -> None:
    """Fails unless `t` holds the large pattern with `bump` added to every byte."""
    echo_peer.expect(t.dtype == torch.uint8 and t.dim() == 1, f"{t.dtype} {tuple(t.shape)}")
    echo_peer.expect(t.numel() % LARGE_CHUNK == 0, f"{t.numel()} bytes: not whole chunks")
    chunks = t.view(-1, LARGE_CHUNK)
    template = (torch.arange(LARGE_CHUNK, dtype=torch.int64) % 256 + bump).to(torch.uint8)
    # A few hundred chunks at a time: the comparison's booleans are as
    # large as what they compare.
    for start in range(0, chunks.shape[0], 256):
        block = chunks[start : start + 256]
        index = (torch.arange(start, start + block.shape[0], dtype=torch.int64)
                 .view(torch.uint8).view(-1, 8) + bump).to(torch.uint8)
        echo_peer.expect(torch.equal(block[:, :8], index), f"chunk index wrong near {start}")
        echo_peer.expect(
            bool((block[:, 8:] == template[8:]).all()), f"chunk bytes wrong near {start}"
        )


def large_tensor(nbytes: int) -> torch.Tensor:
    """The large pattern (see LARGE_CHUNK) in `nbytes` bytes, whole chunks."""
    t = torch.arange(256, dtype=torch.uint8).repeat(nbytes // 256)
    t.view(-1, LARGE_CHUNK).view(torch.int64)[:, 0] = torch.arange(nbytes // LARGE_CHUNK)
    return t


def large(address: tuple[str, int], authkey: bytes) -> None:
    with listen(address, authkey) as listener, listener.accept() as conn:
        start = time.monotonic()
        message = conn.recv_bytes()
        received = time.monotonic() - start
        t = pickle.loads(message)
        del message
        log(f"received {t.numel()} bytes in {received:.2f} s")
        check_large(t, 0)
        log("checked")
        t.add_(1)
        # One copy of the tensor at a time: its pickle replaces it.
        message = pickle.dumps(t)
        del t
        start = time.monotonic()
        conn.send_bytes(message)
        log(f"sent in {time.monotonic() - start:.2f} s")
        del message
        # Until the receiver has it all and hangs up.
        try:
            conn.recv_bytes()
        except EOFError:
            pass


# ---------------------------------------------------------------- send-large, send-shared


def send_large(address: tuple[str, int], authkey: bytes, nbytes: int) -> None:
    message = pickle.dumps(torch.ones(nbytes, dtype=torch.uint8))
    with listen(address, authkey) as listener, listener.accept() as conn:
        log("sending")
        conn.send_bytes(message)
        log("sent")
        time.sleep(3600)


def send_shared(address: tuple[str, int], authkey: bytes, strategy: str) -> None:
    multiprocessing.current_process().authkey = authkey
    torch.multiprocessing.set_sharing_strategy(strategy)
    with Client(address, family="AF_INET", authkey=authkey) as conn:
        conn.send_bytes(bytes(ForkingPickler.dumps(torch.arange(16, dtype=torch.float32))))
        if not conn.poll(ANSWER_TIMEOUT):
            print(f"no answer within {ANSWER_TIMEOUT:.0f} s", flush=True)
            return
        try:
            conn.recv_bytes()
        except (EOFError, ConnectionError):
            print("closed", flush=True)
        else:
            print("answered", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "command", choices=["serve", "drive", "large", "send-large", "send-shared"]
    )
    parser.add_argument("--address", type=tcp_address, required=True)
    parser.add_argument("--authkey", type=bytes.fromhex, required=True)
    parser.add_argument("--reply-shared", choices=echo_peer.TORCH_STRATEGIES)
    parser.add_argument("--strategy", choices=echo_peer.TORCH_STRATEGIES, default="file_descriptor")
    parser.add_argument("--nbytes", type=int, default=256 << 20)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.command == "serve":
        serve(args.address, args.authkey, args.reply_shared)
    elif args.command == "drive":
        return drive(args.address, args.authkey)
    elif args.command == "large":
        large(args.address, args.authkey)
    elif args.command == "send-large":
        send_large(args.address, args.authkey, args.nbytes)
    else:
        send_shared(args.address, args.authkey, args.strategy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
