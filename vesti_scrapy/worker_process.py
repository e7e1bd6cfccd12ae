"""Set-up of each worker process of the CPU pool (it runs there, so it imports only the
standard library)."""

from __future__ import annotations

import os
import select
import threading
import time


def die_with_crawl(crawl_pid: int) -> None:
    """End this worker as soon as the crawl process is gone. The crawl stops its workers
    when it closes, and kills one stuck past the job timeout; a crawl killed outright does
    neither, and the fork server that started the workers outlives it while they do."""
    threading.Thread(target=_watch, args=(crawl_pid,), name="crawl-watch", daemon=True).start()


def _watch(crawl_pid: int) -> None:
    try:
        pidfd = os.pidfd_open(crawl_pid)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # not Linux 5.3+: ask once a second
        while _alive(crawl_pid):
            time.sleep(1)
    else:
        select.select([pidfd], [], [])  # readable once the process has exited
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
