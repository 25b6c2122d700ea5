"""``serve``'s hourly work — ingest up to the last complete hour, then the rightsizing
recommendations and quota usage — in a process of its own, one per hour.

The API process only starts it and waits (costsvc/cli.py ``_scheduler``). What an ingest
allocates (a block's summaries, label sets, millions of short-lived samples) is returned to the
system when the child exits, so the API process's memory does not take the ingest's high-water
mark and keep it (``bench/serve_ingest.py``: its RSS after 24 hours against after 1); the child,
a process that only ingests, runs with the garbage collector paused as ``gpu-costsvc ingest``
does (costsvc/ingest/run.py ``collections_paused``); and an ingest that crashes or is killed
for memory takes no API down with it.

The child is *spawned* (a fresh interpreter: the API process has threads, and a fork copies
whatever lock one of them holds). It is given the settings and the scheduler's clock reading,
``now``: the hours it ingests and the window it advises on end where the scheduler said, not
where the child's start-up happened to finish. Stopping ``serve`` stops a running child
(SIGTERM, then SIGKILL): an hour is written in one transaction, so none is left half-written,
and the hour is taken again by the next run.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from datetime import datetime

from costsvc.commands.common import PROG, database_failure
from costsvc.kit.settings import Settings

log = logging.getLogger(PROG)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
STOP_GRACE = 10.0  # seconds a stopped child has to exit on SIGTERM before SIGKILL
INGEST_FAILED, ADVICE_FAILED = 1, 2  # the child's exit code: bits of what went wrong


def run_hour(settings: Settings, now: datetime, stop: threading.Event) -> int | None:
    """One hour's work in a spawned child (module docstring), waited for; its exit code
    (0: done; :data:`INGEST_FAILED` / :data:`ADVICE_FAILED` bits; negative: killed by that
    signal), or None when ``stop`` was set first and the child was stopped."""
    child = multiprocessing.get_context("spawn").Process(
        target=hour_of_work, args=(settings, now), name="gpu-costsvc-hourly", daemon=True
    )
    child.start()
    while child.is_alive():
        if stop.wait(0.5):
            child.terminate()
            child.join(STOP_GRACE)
            if child.is_alive():
                child.kill()
                child.join()
            log.info("hourly run (pid %s) stopped with serve", child.pid)
            return None
    code = child.exitcode
    assert code is not None
    if code:
        log.error("hourly run (pid %s) exited with %d", child.pid, code)
    else:
        log.info("hourly run (pid %s) done", child.pid)
    return code


def hour_of_work(settings: Settings, now: datetime) -> None:
    """The child's work: the ingest, then the recommendations (each tried even if the other
    failed: they read different things); exits with :data:`INGEST_FAILED` /
    :data:`ADVICE_FAILED` set for what failed (each logged here, in the child)."""
    from costsvc.commands.ingest import advise, ingest_command
    from costsvc.kit.times import iso_z

    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    code = 0
    try:
        if ingest_command(settings, None, None, _quiet, paused=True, now=now):
            code |= INGEST_FAILED
    except Exception as exc:  # e.g. the database is down: the next hour tries again
        code |= INGEST_FAILED
        if (line := database_failure(settings, exc)) is not None:
            log.error("ingest stopped: %s; the next run tries again", line)
        else:
            log.exception("ingest failed: %s", exc)
    try:
        advise(settings, end=iso_z(now))
    except Exception as exc:
        code |= ADVICE_FAILED
        log.exception("recommendations failed: %s", exc)
    raise SystemExit(code)


def _quiet(what: str, i: int, n: int, hour: datetime) -> None:
    """No progress line: a service's log is not a terminal (the ingest prints its summary)."""
