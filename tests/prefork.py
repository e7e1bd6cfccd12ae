"""``python -m scrapy ...`` and ``python -m vesti_scrapy ...`` for the tests, started as
forks of a process that has already imported Scrapy and the other third-party modules.

Each crawl of the end-to-end tests is a process of its own, as a user's is, and most of
such a short crawl's CPU time is the interpreter importing Scrapy, Twisted, aiohttp,
pydantic and the parsers before the first request: about a second, a few hundred times
per run of the suite. A preloader (one per pytest process, started at its first command)
pays it once; each command then runs in a fork of it, through ``runpy`` as ``-m`` runs a
module, with the command's own arguments, working directory, environment and standard
streams. Our own modules are never preloaded: every command imports them afresh, in its
environment, as a fresh interpreter would (``vesti_scrapy.settings`` reads ``VESTI_*`` at
import).

:func:`run` stands in for ``subprocess.run`` for these commands (other commands go to
``subprocess.run``, as do commands whose environment changes ``PYTHON*`` variables). The
tests that kill a crawl or read its ``/proc`` entries start a fresh interpreter with
``subprocess.Popen``: a fork shows the preloader's environment in ``/proc/PID/environ``,
not its own.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Third-party modules every command imports before its work (with what these import, and
# Scrapy's commands and default components: :func:`_scrapy_modules`). None installs a
# Twisted reactor or creates an asyncio event loop at import.
PRELOAD = (
    "scrapy.cmdline",
    "twisted.internet.asyncioreactor",
    "scrapy_deltafetch.middleware",
    "itemadapter",
    "click",
    "yaml",
    "dateutil.parser",
    "feedparser",
    "trafilatura",
    "pebble",
)
MODULES = ("scrapy", "vesti_scrapy")


def serve(listening: socket.socket) -> None:
    """The preloader: one supervisor process per request, forked when it comes. It ends
    when its parent does (its standard input, a pipe from the parent, closes)."""
    for name in (*PRELOAD, *_scrapy_modules()):
        importlib.import_module(name)
    assert "twisted.internet.reactor" not in sys.modules, "a preloaded module installed a reactor"
    while True:
        ready, _, _ = select.select([listening, sys.stdin], [], [])
        if sys.stdin in ready:
            return
        connection, _ = listening.accept()
        if os.fork() == 0:
            listening.close()
            _supervise(connection)
        connection.close()
        while True:  # reap the supervisors that are done
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break


def _scrapy_modules() -> list[str]:
    """Scrapy's commands (``scrapy`` imports all of them to find the one it runs) and the
    modules of its default components (``*_BASE``, ``SCHEDULER``, ...; a crawl imports
    each, even those it switches off, to find it switched off)."""
    from scrapy.settings import default_settings
    from scrapy.utils.misc import walk_modules_iter

    paths: list[str] = []
    for name in dir(default_settings):
        value = getattr(default_settings, name)
        if name.endswith("_BASE") and isinstance(value, dict):
            paths += [path for path in [*value, *value.values()] if isinstance(path, str)]
        elif isinstance(value, str):
            paths.append(value)
    modules = {path.rsplit(".", 1)[0] for path in paths if path.startswith("scrapy.")}
    components = [module for module in modules if importlib.util.find_spec(module)]
    return [module.__name__ for module in walk_modules_iter("scrapy.commands")] + sorted(components)


def _supervise(connection: socket.socket) -> None:
    """Fork the command, tell the test its pid, wait for it, tell its exit code. The
    supervisor never returns into the preloader's loop; the command does, on its way out
    (:func:`_command`)."""
    pid = -1
    try:
        message, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
        while not message.endswith(b"\n"):
            message += connection.recv(1 << 16)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            connection.close()
            _command(request, fds)
        for fd in fds:
            os.close(fd)
        connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        reply = {"returncode": os.waitstatus_to_exitcode(status)}
        connection.sendall(json.dumps(reply).encode() + b"\n")
    except BrokenPipeError:
        pass  # the test gave up on the command (its timeout) and killed it
    except BaseException:
        if pid == 0:
            raise
        import traceback

        traceback.print_exc()
    os._exit(0)


def _command(request: dict[str, Any], fds: list[int]) -> None:
    """Become ``python -m MODULE ARGS`` in the request's directory and environment."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path.insert(0, str(Path.cwd()))  # as -m puts it first
    sys.argv = [request["module"], *request["args"]]
    code: Any = 0
    try:
        import runpy

        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    # Up through the preloader's frames (the supervisor's handler passes it on) to the
    # interpreter's own exit: the atexit handlers run (logging's, multiprocessing's), as
    # at the end of a command in a fresh interpreter.
    raise SystemExit(code)


class Preloader:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._path = ""

    def _address(self) -> str:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                folder = tempfile.mkdtemp(prefix="vesti-prefork-")
                atexit.register(shutil.rmtree, folder, ignore_errors=True)
                self._path = str(Path(folder) / "socket")
                listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                listening.bind(self._path)
                listening.listen(64)
                self._process = subprocess.Popen(
                    [sys.executable, __file__, str(listening.fileno())],
                    stdin=subprocess.PIPE,
                    pass_fds=[listening.fileno()],
                    cwd=Path(__file__).parent.parent,
                )
                listening.close()
            return self._path

    def run(
        self,
        module: str,
        args: list[str],
        *,
        cwd: str | Path,
        env: dict[str, str] | None,
        timeout: float | None,
        input: str | None = None,
    ) -> tuple[int, str, str]:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe()
        request = {
            "module": module,
            "args": args,
            "cwd": str(cwd),
            "env": dict(os.environ if env is None else env),
        }
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self._address())
            socket.send_fds(
                connection, [json.dumps(request).encode() + b"\n"], [in_r, out_w, err_w]
            )
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        replies = connection.makefile("rb")
        pid = json.loads(replies.readline())["pid"]
        stdout: list[bytes] = []
        stderr: list[bytes] = []
        readers = [
            threading.Thread(target=_drain, args=(out_r, stdout), daemon=True),
            threading.Thread(target=_drain, args=(err_r, stderr), daemon=True),
        ]
        for reader in readers:
            reader.start()
        with os.fdopen(in_w, "wb") as stdin:
            if input:
                stdin.write(input.encode())
        connection.settimeout(timeout)
        try:
            returncode = json.loads(replies.readline())["returncode"]
        except TimeoutError:
            os.kill(pid, 9)
            raise subprocess.TimeoutExpired([module, *args], timeout or 0) from None
        finally:
            connection.close()
        for reader in readers:
            reader.join()
        return returncode, b"".join(stdout).decode(), b"".join(stderr).decode()


def _drain(fd: int, into: list[bytes]) -> None:
    with os.fdopen(fd, "rb") as stream:
        while chunk := stream.read1(1 << 16):
            into.append(chunk)


_preloader = Preloader()


def run(
    command: list[str],
    *,
    cwd: str | Path,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    check: bool = False,
    input: str | None = None,
    capture_output: bool = True,
    text: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(command, capture_output=True, text=True, ...)``, forked from the
    preloader when ``command`` is ``[sys.executable, "-m", MODULE, ...]`` for one of
    :data:`MODULES`."""
    if not (capture_output and text):
        raise ValueError("prefork.run captures the output as text, as the tests read it")
    if (
        command[:2] != [sys.executable, "-m"]
        or command[2] not in MODULES
        or _interpreter_settings(env or os.environ) != _interpreter_settings(os.environ)
    ):
        return subprocess.run(
            command, cwd=cwd, env=env, timeout=timeout, check=check, input=input,
            capture_output=True, text=True,
        )  # fmt: skip
    returncode, stdout, stderr = _preloader.run(
        command[2], command[3:], cwd=cwd, env=env, timeout=timeout, input=input
    )
    result = subprocess.CompletedProcess(command, returncode, stdout, stderr)
    if check:
        result.check_returncode()
    return result


def _interpreter_settings(env: Mapping[str, str]) -> dict[str, str]:
    """What the interpreter reads at its start (PYTHONPATH and the like): a command whose
    environment changes them needs an interpreter of its own."""
    return {name: value for name, value in env.items() if name.startswith("PYTHON")}


if __name__ == "__main__":
    sys.path.pop(0)  # this folder: the commands see the working directory, as -m does
    serve(socket.socket(fileno=int(sys.argv[1])))
