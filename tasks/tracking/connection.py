"""A stage's connection to the warm tracking server (``server.py``): a tracking child forked from a process that
has MLflow imported, in place of a cold child (``python -m tasks.tracking.child``).

``connect`` reaches the server's Unix socket, in a private folder (mode 0700, owned by this user), keyed by the
interpreter, the package folder and the tracking code's files, so an edited file or another checkout gets a server
of its own. When no server listens it starts one (``python -m tasks.tracking.server``, detached: its own session,
stdio on /dev/null) for the stages after this one, and the caller starts a cold child. It sends the stage's
stderr (a file descriptor, SCM_RIGHTS), environment and working folder; ``ForkedChild`` is the stage's side of
the connection, shaped as the ``subprocess.Popen`` of a cold child. ``CLOZELINE_TRACKING_SERVER=0`` turns the
server off; so does running off Linux (macOS frameworks are not safe to fork once loaded), a closed stderr, or a
socket path that would not fit a Unix socket (107 bytes).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ENABLED_ENV = "CLOZELINE_TRACKING_SERVER"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
#: The files whose code a forked child runs (the tracking package's, and what it imports of the project): a change
#: to any of them keys a new server.
KEY_FILES = (
    *sorted(f"tasks/tracking/{path.name}" for path in (PACKAGE_ROOT / "tasks" / "tracking").glob("*.py")),
    "tasks/common/nested.py",
)
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
    ``stdout``, ``poll``, ``wait``, ``send_signal``), so that ``sidecar.SidecarLog`` drives either."""

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
    subprocess.Popen(
        [sys.executable, "-m", "tasks.tracking.server", str(path)],
        cwd=PACKAGE_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
