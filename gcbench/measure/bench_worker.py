"""The processes ``gcbench bench`` times its cases in, seen from the parent: one fresh process a case
(:func:`run_isolated`) or one worker that runs them one after another (:class:`SharedWorker`).

Both start ``python -m gcbench.measure.bench``, whose ``main`` times the case (:func:`gcbench.measure.bench.bench_case`)
and dies with its parent, so a killed ``gcbench bench`` leaves no benchmark running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from gcbench.core import liveness
from gcbench.core.errors import GcbenchError


class SharedWorker:
    """One worker process that runs bench cases one after another (``python -m gcbench.measure.bench --serve``): a
    case's arguments go in as one JSON line on its stdin, its record comes back as one JSON line on its stdout.  A
    worker that dies is started again for the next case (the case it died on is recorded as failed)."""

    def __init__(self, threads: int | None) -> None:
        self.threads = threads
        self.proc: subprocess.Popen[str] | None = None
        self.log: Any = None

    def _start(self) -> subprocess.Popen[str]:
        import tempfile

        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads or os.cpu_count()), liveness.PARENT_PID_ENV: str(os.getpid())}
        self.log = tempfile.TemporaryFile(mode="w+")  # its stderr: read back only when it dies, so a pipe never fills up
        self.proc = subprocess.Popen([sys.executable, "-m", "gcbench.measure.bench", "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
        return self.proc

    def run(self, args: dict[str, Any]) -> dict[str, Any]:
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(args) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except OSError:
            line = ""
        if not line:
            proc.wait()
            self.log.seek(0)
            tail = (self.log.read().strip().splitlines() or ["no output"])[-1]
            self.proc = None
            raise GcbenchError(f"benchmark worker died on {args['label']}: {tail}")
        reply = json.loads(line)
        if "worker_error" in reply:
            raise GcbenchError(reply["worker_error"])
        return dict(reply)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # end of input: the worker returns
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log is not None:
            self.log.close()



def run_isolated(args: dict[str, Any]) -> dict[str, Any]:
    # the child dies with this process (main() below): a killed `gcbench bench` leaves no benchmark running on
    env = {**os.environ, "OMP_NUM_THREADS": str(args["threads"] or os.cpu_count()), liveness.PARENT_PID_ENV: str(os.getpid())}
    cmd = [sys.executable, "-m", "gcbench.measure.bench", json.dumps(args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise GcbenchError(f"benchmark process for {args['label']} failed: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
