"""A warm tracking server: it forks each stage's MLflow tracking child from a process that has MLflow imported.

Every stage holds its MLflow run in a child process (``tasks/common/tracking_sidecar.py``). A cold child spends
about 3 s on imports before it can open the run (``import mlflow`` 1.4 s, its SQLAlchemy store 1.3 s, measured on
2 cores), and the stage waits for it at its end. On a scheduled night over a few new documents that wait is most
of a stage's time. So the first stage that finds no server starts one (``python -m tasks.common.tracking_server``,
detached: its own session, stdio on /dev/null) and uses a cold child itself; the stages after it connect.

- The server imports MLflow and its SQLAlchemy store, opens no store, and listens on a Unix socket in a private
  folder (mode 0700, owned by this user; nothing listens on the network). The socket's name is keyed by the
  interpreter, the package folder and the tracking code's files, so an edited file or another checkout gets a
  server of its own. Stages that start at once may each start a server: the first to lock ``<socket>.lock``
  stays, the others leave before importing MLflow.
- Each connection gets a fork (about 10 ms) that runs the cold child's loop (``tracking_sidecar.serve_calls``)
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
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENABLED_ENV, IDLE_ENV = "CLOZELINE_TRACKING_SERVER", "CLOZELINE_TRACKING_SERVER_IDLE_S"
DEFAULT_IDLE_S = 120.0
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
#: The files whose code a forked child runs: a change to any of them keys a new server.
KEY_FILES = ("tasks/tracking.py", "tasks/common/tracking_sidecar.py", "tasks/common/tracking_server.py",
             "tasks/common/nested.py")  # fmt: skip
#: torchrun's variables stay with the stage: the server is not one of its ranks.
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
#: A Unix socket's path holds at most 107 bytes; the server binds ``<path>.<pid>`` first (pids have <= 7 digits).
MAX_PATH_BYTES = 107 - 8


def socket_path() -> Path | None:
    """The server's socket for this interpreter, checkout and tracking code; None when the private folder
    cannot be made or is not this user's alone (mode 0700), or when the path is too long for a socket."""
    key = [sys.executable, str(PACKAGE_ROOT)]
    for name in KEY_FILES:
        with contextlib.suppress(OSError):
            stat = (PACKAGE_ROOT / name).stat()
            key.append(f"{name}:{stat.st_mtime_ns}:{stat.st_size}")
    folder = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()) / f"clozeline-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        stat = folder.stat()
    except OSError:
        return None
    if stat.st_uid != os.getuid() or stat.st_mode & 0o077:
        return None
    path = folder / f"tracking-{hashlib.sha256(chr(0).join(key).encode()).hexdigest()[:16]}.sock"
    return path if len(os.fsencode(path)) <= MAX_PATH_BYTES else None


class ForkedChild:
    """The stage's side of a connection, shaped as the ``subprocess.Popen`` of a cold child (``stdin``,
    ``stdout``, ``poll``, ``wait``, ``send_signal``), so that ``SidecarLog`` drives either."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.stdin = _Writer(sock)
        self.stdout = sock.makefile("r", encoding="utf-8")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once ``wait`` read it (a dead fork shows as a closed socket at the next call)."""
        return self.returncode

    def wait(self) -> int:
        """Read to the end of the connection; returns the fork's exit code (1 when it ended without one)."""
        if self.returncode is None:
            code = 1
            with contextlib.suppress(OSError, ValueError):
                for line in self.stdout:
                    code = json.loads(line).get("exit", code)
            self.returncode = code
            for stream in (self.stdout, self.stdin, self._sock):  # the socket's fd goes with its last file
                with contextlib.suppress(OSError):
                    stream.close()
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Nothing: the fork is not in the stage's process group, and it ignores SIGINT and SIGTERM anyway."""


class _Writer:
    """A text writer on the socket whose ``close`` shuts the write side, so the fork reads EOF as from a pipe."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock, self._file = sock, sock.makefile("w", encoding="utf-8")

    def write(self, text: str) -> int:
        return self._file.write(text)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if self._file.closed:
            return
        try:
            self._file.flush()
        finally:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_WR)
                self._file.close()


def connect() -> ForkedChild | None:
    """A tracking child forked by the warm server, or None (off, or no server yet: one is started for the
    stages after this one, and the caller starts a cold child)."""
    if os.environ.get(ENABLED_ENV, "1") == "0" or sys.platform != "linux":  # fork after imports: Linux only
        return None
    path = socket_path()
    if path is None or not stderr_open():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError as err:
        sock.close()
        if isinstance(err, (FileNotFoundError, ConnectionRefusedError)):
            _start(path, stale=isinstance(err, ConnectionRefusedError))
        return None
    try:
        socket.send_fds(sock, [b"\n"], [2])  # the stage's stderr, as a cold child inherits it
        sock.sendall(json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}).encode() + b"\n")
    except OSError:  # the server went away: this stage gets a cold child
        sock.close()
        return None
    return ForkedChild(sock)


def stderr_open() -> bool:
    """Whether fd 2 is open: when it is not, the socket would take fd 2 and be passed to the fork as its stderr."""
    try:
        os.fstat(2)
    except OSError:
        return False
    return True


def _start(path: Path, stale: bool) -> None:
    """Start a detached server on ``path``; ``stale``: a socket file nobody listens on (a killed server's) is
    there, and is removed first."""
    if stale:
        with contextlib.suppress(OSError):
            path.unlink()
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    subprocess.Popen([sys.executable, "-m", "tasks.common.tracking_server", str(path)], cwd=PACKAGE_ROOT, env=env,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)  # fmt: skip


# ------------------------------------------------------------------------------------------ the server process


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

    import tasks.common.tracking_sidecar  # noqa: F401

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


_LOCK = None  # the server's lock file, held open while it serves


def _fork(conn: socket.socket, listener: socket.socket) -> None:
    if os.fork():
        conn.close()
        return
    code = 1
    try:
        listener.close()
        _LOCK.close()  # a fork serving a long stage must not keep a new server from starting
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # MLflow may run and wait for subprocesses
        conn.setblocking(True)
        code = _child(conn)
    finally:
        os._exit(code)


def _child(conn: socket.socket) -> int:
    """One stage's tracking child: the stage's stderr, environment and folder, then the cold child's loop."""
    from tasks.common.tracking_sidecar import serve_calls

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
