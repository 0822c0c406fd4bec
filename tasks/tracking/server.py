"""A warm tracking server: it forks each stage's MLflow tracking child from a process that has MLflow imported.

Every stage holds its MLflow run in a child process (``tasks/tracking/sidecar.py``). A cold child spends
about 3 s on imports before it can open the run (``import mlflow`` 1.4 s, its SQLAlchemy store 1.3 s, measured on
2 cores), and the stage waits for it at its end. On a scheduled night over a few new documents that wait is most
of a stage's time. So the first stage that finds no server starts one (``python -m tasks.tracking.server``,
detached: its own session, stdio on /dev/null) and uses a cold child itself; the stages after it connect
(``connection.py``: the stage's side, which names the socket and starts a server).

- The server imports MLflow and its SQLAlchemy store, opens no store, and listens on a Unix socket in a private
  folder (mode 0700, owned by this user; nothing listens on the network). The socket's name is keyed by the
  interpreter, the package folder and the tracking code's files, so an edited file or another checkout gets a
  server of its own. Stages that start at once may each start a server: the first to lock ``<socket>.lock``
  stays, the others leave before importing MLflow.
- Each connection gets a fork (about 10 ms) that runs the cold child's loop (``child.serve_calls``)
  with the stage's environment and working folder (sent as the first JSON line) and the stage's stderr (passed
  as a file descriptor, SCM_RIGHTS). The wire is JSON lines both ways, as with a cold child: nothing is
  pickled. The fork's last line is its exit code.
- The server exits after ``CLOZELINE_TRACKING_SERVER_IDLE_S`` seconds (default 120) without a connection: it
  removes its socket first, then serves what already queued. ``CLOZELINE_TRACKING_SERVER=0`` turns it off, and
  every stage starts a cold child; so does every stage off Linux (macOS frameworks are not safe to fork once
  loaded), a stage whose stderr is closed, and one whose socket path would not fit a Unix socket (107 bytes).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import IO

from tasks.tracking.child import serve_calls

IDLE_ENV = "CLOZELINE_TRACKING_SERVER_IDLE_S"
DEFAULT_IDLE_S = 120.0


def serve_forever(path: Path, idle_s: float) -> int:
    """Accept connections on ``path`` until ``idle_s`` seconds pass without one; fork a child for each.
    Returns 0, also when another server holds ``path`` or its lock (stages that start at once each start one:
    all but one leave before importing MLflow)."""
    global _LOCK
    _LOCK = open(path.with_suffix(".lock"), "w")  # noqa: SIM115 - held for the server's life
    try:
        fcntl.flock(_LOCK, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0
    import mlflow
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401

    listener = _listen(path)
    if listener is None:
        return 0
    listener.settimeout(idle_s)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the forks
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            break
        _fork(conn, listener)
    with contextlib.suppress(OSError):
        path.unlink()  # no new connection can reach the socket now: serve the ones already queued, then exit
    _drain(listener)
    return 0


def _listen(path: Path) -> socket.socket | None:
    """A socket listening on ``path``, or None when another server's socket is there. It is bound under a
    staging name and linked into place once listening, so a client never meets a socket that refuses; a link
    never replaces a file."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staged = path.with_name(f"{path.name}.{os.getpid()}")
    listener.bind(str(staged))
    listener.listen(64)
    try:
        os.link(staged, path)
    except FileExistsError:
        listener.close()
        return None
    finally:
        staged.unlink()
    return listener


def _drain(listener: socket.socket) -> None:
    """Serve the connections already queued on ``listener``, then close it: twice, a moment apart, for a
    connect that had found the path just before it went."""
    listener.setblocking(False)
    for _ in range(2):
        with contextlib.suppress(BlockingIOError):
            while True:
                _fork(listener.accept()[0], listener)
        time.sleep(0.05)
    listener.close()


_LOCK: IO[str] | None = None  # the server's lock file, held open while it serves


def _fork(conn: socket.socket, listener: socket.socket) -> None:
    if os.fork():
        conn.close()
        return
    code = 1
    try:
        listener.close()
        if _LOCK is not None:  # a fork serving a long stage must not keep a new server from starting
            _LOCK.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # MLflow may run and wait for subprocesses
        conn.setblocking(True)
        code = _child(conn)
    finally:
        os._exit(code)


def _child(conn: socket.socket) -> int:
    """One stage's tracking child: the stage's stderr, environment and folder, then the cold child's loop."""
    _, fds, _, _ = socket.recv_fds(conn, 1, 1)
    reader, writer = conn.makefile("r", encoding="utf-8"), conn.makefile("w", encoding="utf-8")
    hello = json.loads(reader.readline())
    for fd in fds:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    os.environ.clear()
    os.environ.update(hello["env"])
    os.chdir(hello["cwd"])
    code = serve_calls((json.loads(line) for line in reader), writer)
    with contextlib.suppress(OSError):
        writer.write(json.dumps({"exit": code}) + "\n")
        writer.flush()
    return code


if __name__ == "__main__":
    sys.exit(serve_forever(Path(sys.argv[1]), float(os.environ.get(IDLE_ENV, DEFAULT_IDLE_S))))
