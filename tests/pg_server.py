"""A throwaway PostgreSQL server for the tests: its own cluster under a temporary
directory, listening on 127.0.0.1 only, with settings that trade durability for speed.

PostgreSQL refuses to run as root. As root (CI, the developers' machines) every server
command runs as the ``postgres`` user through ``runuser``, in a directory that user owns;
otherwise the commands run directly.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

USER = "vesti"
# The server's own account when the tests run as root (Debian's package creates it).
SERVICE_ACCOUNT = "postgres"
# Durability off (a test's database lives for one test), and room for the suite's
# concurrent crawls and pools.
SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "listen_addresses": "127.0.0.1",
}
_START_ATTEMPTS = 3  # another process may take the free port before the server binds it
_LOG_TAIL = 3000


class PostgresServerError(RuntimeError):
    """The server could not be set up or started; the message ends with its log's tail."""


class PostgresServer:
    """One PostgreSQL cluster under ``base`` (a directory this object may fill), its
    superuser ``vesti`` trusted without a password on 127.0.0.1::

        server = PostgresServer(tmp_dir).start()
        url = server.create_database("mine")  # postgresql://vesti@127.0.0.1:PORT/mine
        server.stop()

    As root, the ``postgres`` user must reach ``base``; when it cannot (pytest's own
    temporary directories are 0700 root), the cluster goes to a private directory under
    the system's temporary directory instead, removed by :meth:`stop`.
    """

    def __init__(self, base: Path, bin_dir: Path | None = None) -> None:
        found = bin_dir or self.find_bin_dir()
        if found is None:
            raise PostgresServerError("no PostgreSQL server binaries (initdb, pg_ctl) found")
        self.bin_dir: Path = found
        self.base: Path = Path(base)
        self.root: Path = self.base  # where the cluster, its log and its socket are
        self.port: int | None = None
        self._as_root = os.geteuid() == 0
        self._private_root = False

    # -- finding the binaries -------------------------------------------------------

    @classmethod
    def find_bin_dir(cls) -> Path | None:
        """The folder of the server binaries: ``pg_config --bindir`` when pg_config is on
        PATH, else the newest ``/usr/lib/postgresql/*/bin`` (Debian), else the folder of
        ``initdb`` on PATH; ``None`` when there is none."""
        candidates: list[Path] = []
        pg_config = shutil.which("pg_config")
        if pg_config:
            result = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=False
            )
            if result.returncode == 0 and result.stdout.strip():
                candidates.append(Path(result.stdout.strip()))

        def version(path: Path) -> tuple[int, ...]:
            return tuple(int(part) for part in re.findall(r"\d+", path.parent.name))

        candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
        initdb = shutil.which("initdb")
        if initdb:
            candidates.append(Path(initdb).resolve().parent)
        # pg_config comes with libpq's headers too, whose bindir may lack the server.
        for candidate in candidates:
            if all(os.access(candidate / name, os.X_OK) for name in ("initdb", "pg_ctl")):
                return candidate
        return None

    @classmethod
    def unavailable(cls) -> str | None:
        """Why a server cannot run on this machine, or ``None`` when it can."""
        if cls.find_bin_dir() is None:
            return "PostgreSQL server binaries (initdb, pg_ctl) not found"
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(SERVICE_ACCOUNT)
            except KeyError:
                return f"running as root and there is no {SERVICE_ACCOUNT!r} user to run it"
            if shutil.which("runuser") is None:
                return "running as root and runuser (util-linux) is missing"
        return None

    # -- life cycle -----------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "log"

    def start(self) -> PostgresServer:
        """Create the cluster and start the server on a free loopback port; return once
        it accepts connections. Raises :class:`PostgresServerError` with the log's tail."""
        try:
            self._prepare_root()
            self._initdb()
            self._start_server()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_server(self) -> None:
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = _free_port()
            options = [f"-p {port}", f"-k {shlex.quote(str(self.root))}"]
            options += [f"-c {name}={value}" for name, value in SERVER_SETTINGS.items()]
            result = self._run(
                "pg_ctl",
                *("-D", str(self.data_dir), "-l", str(self.log_file)),
                *("-w", "-t", "60", "-o", " ".join(options), "start"),
            )
            if result.returncode == 0:
                self.port = port
                return
            log = self._log_tail()
            if attempt == _START_ATTEMPTS or "could not bind" not in log:
                raise PostgresServerError(
                    f"PostgreSQL did not start (pg_ctl exited {result.returncode}):\n"
                    f"{result.stdout}{result.stderr}\n--- {self.log_file} (tail) ---\n{log}"
                )

    def stop(self) -> None:
        """Stop the server at once (no checkpoint: its data is thrown away) and remove a
        private directory it made. Safe to call twice, or after a failed start."""
        if self.data_dir.joinpath("postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        self.port = None
        if self._private_root:
            shutil.rmtree(self.root, ignore_errors=True)
            self._private_root = False
            self.root = self.base

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- databases ------------------------------------------------------------------

    def url(self, dbname: str) -> str:
        """The URL of database ``dbname`` on this server."""
        if self.port is None:
            raise PostgresServerError("the server is not running")
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """Create the empty database ``name`` and return its URL."""
        import psycopg  # here, so that the suite loads without psycopg installed
        from psycopg import sql

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name``, ending the sessions still connected to it."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    # -- helpers --------------------------------------------------------------------

    def _prepare_root(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if not self._as_root:
            return
        account = pwd.getpwnam(SERVICE_ACCOUNT)
        os.chown(self.base, account.pw_uid, account.pw_gid)
        self.base.chmod(0o755)
        reachable = subprocess.run(
            ["runuser", "-u", SERVICE_ACCOUNT, "--", "test", "-w", str(self.base)],
            capture_output=True,
            check=False,
        )
        if reachable.returncode != 0:
            self.root = Path(tempfile.mkdtemp(prefix="pytest-postgres-"))
            self._private_root = True
            os.chown(self.root, account.pw_uid, account.pw_gid)
            self.root.chmod(0o755)

    def _initdb(self) -> None:
        common = ["-D", str(self.data_dir), "-A", "trust", "-U", USER, "-E", "UTF8", "--no-sync"]
        result = self._run("initdb", *common, "--locale=C.UTF-8")
        if result.returncode != 0:
            # No C.UTF-8 locale on this machine: plain C sorts bytewise the same way.
            shutil.rmtree(self.data_dir, ignore_errors=True)
            retry = self._run("initdb", *common, "--locale=C")
            if retry.returncode != 0:
                raise PostgresServerError(
                    f"initdb failed ({retry.returncode}):\n{result.stdout}{result.stderr}\n"
                    f"--- with --locale=C ---\n{retry.stdout}{retry.stderr}"
                )

    def _run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin_dir / program), *args]
        if self._as_root:
            command = ["runuser", "-u", SERVICE_ACCOUNT, "--", *command]
        # PG* variables (PGDATA, PGPORT, ...) of the caller must not steer the server.
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            cwd=self.root,
            timeout=120,
            check=False,
        )

    def _log_tail(self) -> str:
        try:
            return self.log_file.read_text(encoding="utf-8", errors="replace")[-_LOG_TAIL:]
        except OSError as error:
            return f"(no log: {error})"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
