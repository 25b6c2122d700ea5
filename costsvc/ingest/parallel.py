"""A multi-hour ingest in worker processes (``COSTSVC_INGEST_WORKERS``, PostgreSQL only).

An hour's work is CPU-bound Python: one process uses one core however long the backfill. Here
the hours are cut into contiguous chunks (in the order given, so that the blocks of consecutive
hours of ``RunReader.plan`` stay whole), each ingested by
:func:`~costsvc.ingest.serial.ingest_hours` in a process of its own, made with the ``spawn``
start method (the parent has threads and an engine that a fork would copy half-alive). A
worker builds its own engine from the parent's URL and its own reader from
:meth:`~costsvc.ingest.prom.PrometheusReader.spec`, and reports each hour's start and outcome
over a pipe.

The watermark: workers leave it alone (a later chunk would carry it past hours an earlier one
has not done yet). The parent moves it to the last hour of the longest prefix, in the planned
order, of hours done or recorded failed (:func:`settled_prefix`), as reports come in.

A worker that dies (killed, crashed): every hour of its chunk it did not report is recorded as
a failed run (the run it had started included), so ``pending_hours`` retries it, and the
other chunks go on. An interrupt of the parent kills the workers, records the runs they had
started as failed, and is raised. The stop when the source looks down
(:data:`~costsvc.ingest.run.SOURCE_DOWN_AFTER` failures in a row) is per chunk: a chunk that
stops so leaves its untried hours unreported and unrecorded — pending, like a serial run's —
while the other chunks go on (each may stop the same way).
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection, wait
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from costsvc.db import runs
from costsvc.db.engine import make_engine
from costsvc.ingest.prom import PrometheusReader, ReaderSpec
from costsvc.ingest.serial import Report, ingest_hours, pod_days_flushed
from costsvc.rules.cost_model import CostModel

log = logging.getLogger(__name__)
STOP_WAIT = 10.0  # seconds a worker has to record its hour's run failed when stopped


@dataclass(frozen=True)
class Chunk:
    """What a worker needs (picklable: it crosses to a spawned process)."""

    url: str  # the database, password included
    reader: ReaderSpec
    model: CostModel
    cluster: str
    hours: list[datetime]
    source: str


def chunks(hours: list[datetime], workers: int) -> list[list[datetime]]:
    """``hours`` cut into at most ``workers`` contiguous chunks of near-equal length."""
    n = min(workers, len(hours))
    size, extra = divmod(len(hours), n) if n else (0, 0)
    out, at = [], 0
    for i in range(n):
        end = at + size + (1 if i < extra else 0)
        out.append(hours[at:end])
        at = end
    return out


def settled_prefix(hours: list[datetime], settled: set[datetime]) -> datetime | None:
    """The last hour of the longest prefix of ``hours`` whose every hour is settled (done or
    recorded failed); None when the first is not."""
    last = None
    for hour in hours:
        if hour not in settled:
            break
        last = hour
    return last


def ingest_parallel(
    engine: Engine,
    prom: PrometheusReader,
    model: CostModel,
    cluster: str,
    hours: list[datetime],
    progress: Callable[[datetime, str | None], None] | None,
    source: str,
    workers: int,
) -> Report:
    """:func:`~costsvc.ingest.run.ingest` of ``hours`` in ``workers`` processes, each running
    the serial loop (:func:`~costsvc.ingest.serial.ingest_hours`) over its chunk."""
    report = Report()
    model_id = runs.record_cost_model(engine, model)
    url = engine.url.render_as_string(hide_password=False)
    pool = _Workers(engine, cluster, hours, progress, report, model_id)
    try:
        for part in chunks(hours, workers):
            pool.start(Chunk(url, prom.spec(), model, cluster, part, source))
        pool.listen()
    except BaseException as exc:  # an interrupt: the workers stop, their runs are failed
        pool.stop(exc)
        raise
    pod_days_flushed(engine)  # (a day two chunks shared, a worker that died: any left)
    order = {hour: n for n, hour in enumerate(hours)}  # the report in the planned order
    report.done.sort(key=order.__getitem__)
    report.failed = dict(sorted(report.failed.items(), key=lambda kv: order[kv[0]]))
    return report


class _Workers:
    """The parent's side of a parallel ingest: the worker processes, what each has not
    reported yet, and the hours settled (``report``), the watermark moved over them."""

    def __init__(
        self,
        engine: Engine,
        cluster: str,
        hours: list[datetime],
        progress: Callable[[datetime, str | None], None] | None,
        report: Report,
        model_id: int,
    ) -> None:
        self.engine = engine
        self.cluster = cluster
        self.hours = hours
        self.progress = progress
        self.report = report
        self.model_id = model_id
        self.ctx = multiprocessing.get_context("spawn")
        self.settled: set[datetime] = set()
        self.mark: datetime | None = None
        self.left: dict[int, list[datetime]] = {}  # per chunk: the hours it has not reported
        self.started: dict[int, int] = {}  # per chunk: the run of the hour it is on
        self.ended: set[int] = set()
        self.procs: list[multiprocessing.process.BaseProcess] = []
        self.pipes: dict[Connection, int] = {}

    def start(self, task: Chunk) -> None:
        """A worker process for ``task``, reporting over a pipe of its own."""
        i = len(self.procs)
        receive, send = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=work, args=(task, send), name=f"costsvc-ingest-{i}")
        proc.daemon = True  # never outlives the parent
        proc.start()
        send.close()  # the worker's end: EOF here once it exits
        self.procs.append(proc)
        self.pipes[receive] = i
        self.left[i] = list(task.hours)

    def listen(self) -> None:
        """The workers' reports as they come, until every worker has exited."""
        pipes, started = self.pipes, self.started
        while pipes:
            for conn in wait(list(pipes)):
                assert isinstance(conn, Connection)
                i = pipes[conn]
                try:
                    kind, hour, value = conn.recv()
                except EOFError:  # the worker exited: whatever it did not report is failed
                    del pipes[conn]
                    conn.close()
                    self.procs[i].join()
                    if i not in self.ended:
                        self._died(i, self.procs[i].exitcode)
                    continue
                if kind == "started":
                    started[i] = value
                elif kind == "hour":
                    started.pop(i, None)
                    self.left[i].remove(hour)
                    self._settle(hour, value)
                else:  # "end": the hours it did not report were not tried (source down)
                    self.ended.add(i)
                    reads = self.report.reads
                    for name, n in vars(value).items():  # the worker's reads, counted
                        setattr(reads, name, getattr(reads, name) + n)

    def _settle(self, hour: datetime, error: str | None) -> None:
        """An hour done (``error`` None) or failed; the watermark moved to the last hour of
        the longest prefix settled."""
        if error is None:
            self.report.done.append(hour)
        else:
            self.report.failed[hour] = error
        self.settled.add(hour)
        upto = settled_prefix(self.hours, self.settled)
        if upto is not None and upto != self.mark:
            try:
                runs.move_watermark(self.engine, self.cluster, upto)
                self.mark = upto
            except OperationalError as exc:  # tried again at the next hour settled; behind
                log.warning("watermark not moved: %s", exc)  # is safe: hours ingested again
        if self.progress is not None:
            self.progress(hour, error)

    def _died(self, i: int, code: int | None) -> None:
        """Every hour worker ``i`` did not report recorded as a failed run."""
        why = f"the ingest worker process died (exit code {code}); will retry"
        for n, hour in enumerate(self.left[i]):  # the first is the hour it was on, if begun
            run_id = self.started.pop(i, None) if n == 0 else None
            if run_id is None:
                run_id = runs.start_run(self.engine, self.cluster, hour, "ingest", self.model_id)
            # done: written, then died before saying so
            status = runs.fail_unfinished(self.engine, run_id, why)
            self._settle(hour, None if status == "done" else why)
        self.left[i] = []

    def stop(self, exc: BaseException) -> None:
        """The workers stopped (SIGTERM: each records its hour's run failed, :func:`work`;
        killed where it does not in time), and the runs they had started failed with ``exc``."""
        for child in self.procs:
            child.terminate()
        for child in self.procs:
            child.join(STOP_WAIT)
            if child.is_alive():
                child.kill()
                child.join()
        started = self.started
        for conn, i in self.pipes.items():  # what they said before they stopped
            for kind, _hour, value in _drain(conn):
                if kind == "started":
                    started[i] = value
                elif kind == "hour":
                    started.pop(i, None)
            conn.close()
        try:
            for run_id in started.values():
                runs.fail_unfinished(self.engine, run_id, f"{type(exc).__name__}: {exc}")
        except OperationalError as again:  # the database is the trouble: the runs stay
            log.warning("could not record the stopped runs: %s", again)  # running, then stale


def _drain(conn: Connection) -> list[tuple[str, datetime | None, Any]]:
    """The messages left in a stopped worker's pipe."""
    out = []
    try:
        while conn.poll():
            out.append(conn.recv())
    except (EOFError, OSError):
        pass
    return out


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def work(chunk: Chunk, conn: Connection) -> None:
    """A worker process: ``chunk``'s hours, each reported to the parent over ``conn``. Its
    parent's SIGTERM is raised as SystemExit: the hour's run is recorded failed
    (:func:`~costsvc.ingest.serial.ingest_hours`)."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the parent's to handle
    gc.disable()  # a process that only ingests: collections paused (run.collections_paused)
    engine = make_engine(chunk.url)
    prom = PrometheusReader.from_spec(chunk.reader)
    try:
        done = ingest_hours(
            engine,
            prom,
            chunk.model,
            chunk.cluster,
            chunk.hours,
            lambda hour, error: conn.send(("hour", hour, error)),
            chunk.source,
            watermark=False,
            started=lambda hour, run_id: conn.send(("started", hour, run_id)),
        )
        conn.send(("end", None, done.reads))
    finally:
        prom.close()
        engine.dispose()
        conn.close()
