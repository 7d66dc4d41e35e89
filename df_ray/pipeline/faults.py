"""What a worker that died was doing when it died.

Every df_ray actor process (engine replicas, stage actors) writes Python's fault handler
output to its own file under a per-job folder: when native code kills it with a signal
(SIGILL from an instruction the CPU lacks, SIGSEGV, SIGABRT from a failed C assertion), the
file holds the signal and the Python stack at that moment. The driver reads the files of
processes that died to name the cause in one line, and counts them in the run's summary.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

#: Where fault logs go (one folder per Ray job below it); override with DF_RAY_FAULT_DIR.
FAULT_DIR_ENV = "DF_RAY_FAULT_DIR"

_installed: Path | None = None
_lock = threading.Lock()
_files: list = []  # keep the open files alive for the fault handler

#: faulthandler's words for the signals it reports.
_FATAL = {
    "Illegal instruction": signal.SIGILL,
    "Segmentation fault": signal.SIGSEGV,
    "Aborted": signal.SIGABRT,
    "Bus error": signal.SIGBUS,
    "Floating-point exception": signal.SIGFPE,
    "Floating point exception": signal.SIGFPE,
}
_FATAL_RE = re.compile(r"Fatal Python error: (" + "|".join(map(re.escape, _FATAL)) + r")")
_FRAME_RE = re.compile(r'^\s+File "([^"]+)", line (\d+) in (\S+)')


def signal_text(signum: int) -> str:
    """``SIGILL (Illegal instruction)`` for 4."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    return f"{name} ({signal.strsignal(signum) or name})"


def exit_text(returncode: int) -> str:
    """A process's exit status in words (negative: the signal that killed it)."""
    if returncode < 0:
        return f"killed by {signal_text(-returncode)}"
    if returncode > 128 and returncode - 128 in signal.valid_signals():
        return f"killed by {signal_text(returncode - 128)} (exit {returncode})"
    return f"exited with status {returncode}"


def job_fault_dir(job_key: str | None = None) -> Path:
    """This Ray job's fault-log folder (the same path in the driver and in its workers)."""
    root = Path(os.environ.get(FAULT_DIR_ENV) or Path(tempfile.gettempdir()) / "df_ray-faults")
    if job_key is None:
        job_key = _current_job_key()
    return root / (job_key or "nojob")


def _current_job_key() -> str | None:
    """``<Ray session>-<job id>``: job ids restart at 01000000 in every local Ray session."""
    try:
        import ray

        if ray.is_initialized():
            node = ray._private.worker._global_node
            session = getattr(node, "session_name", None) or "session"
            return f"{session}-{ray.get_runtime_context().get_job_id()}"
    except Exception:
        return None
    return None


def install(label: str) -> Path | None:
    """Send this process's fatal-signal reports to ``<job fault dir>/<label>-<pid>.log``
    (once per process; a second call returns the first file)."""
    global _installed
    with _lock:
        if _installed is not None:
            return _installed
        try:
            d = job_fault_dir()
            d.mkdir(parents=True, exist_ok=True)
            path = d / f"{_safe(label)}-{os.getpid()}.log"
            f = open(path, "w")  # noqa: SIM115 - must stay open for the fault handler
        except OSError:
            return None
        f.write(f"# {label} pid {os.getpid()}\n")
        f.flush()
        _files.append(f)
        faulthandler.enable(file=f, all_threads=True)
        _installed = path
    return path


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:80]


@dataclass(frozen=True)
class Fault:
    """One process's fatal signal, as its fault log tells it."""

    label: str
    pid: int
    signal: int
    frames: tuple[str, ...]  # innermost first: "file.py:12 in fn"

    def describe(self, frames: int = 3) -> str:
        where = "; ".join(self.frames[:frames])
        return f"killed by {signal_text(self.signal)}" + (f" in {where}" if where else "")


def parse_fault_log(text: str, label: str = "", pid: int = 0) -> Fault | None:
    """The fault a fault log reports, or None when the process did not die of a signal."""
    m = _FATAL_RE.search(text)
    if m is None:
        return None
    rest = text[m.end():]
    cur = rest.find("Current thread")  # the crashing thread's stack (all threads are dumped)
    frames = []
    for line in rest[max(cur, 0):].splitlines()[1:]:
        fm = _FRAME_RE.match(line)
        if fm:
            frames.append(f"{os.path.basename(fm.group(1))}:{fm.group(2)} in {fm.group(3)}")
        elif frames or not line.strip() or line.startswith(("Thread", "Current")):
            break  # the stack ends at a blank line or the next thread
    return Fault(label, pid, int(_FATAL[m.group(1)]), tuple(frames))


def read_faults(directory: Path | None = None) -> list[Fault]:
    """Every fault reported under a job's fault folder (this node), oldest file first."""
    d = directory or job_fault_dir()
    out = []
    try:
        files = sorted(d.glob("*.log"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return out
    for p in files:
        fault = read_fault(p)
        if fault is not None:
            out.append(fault)
    return out


def read_fault(path: Path) -> Fault | None:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    stem = path.stem
    label, _, pid = stem.rpartition("-")
    return parse_fault_log(text, label, int(pid) if pid.isdigit() else 0)


def fault_of(label: str, pid: int, node_id: str | None = None, timeout_s: float = 10.0
             ) -> Fault | None:
    """The fault of the process ``pid`` that ran as ``label``: read here when its log is on
    this machine, else by a small task on its node (None when the node is gone too)."""
    path = job_fault_dir() / f"{_safe(label)}-{pid}.log"
    if path.exists():
        return read_fault(path)
    if node_id is None:
        return None
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ref = ray.remote(num_cpus=0)(_read_remote).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        ).remote(str(path))
        text = ray.get(ref, timeout=timeout_s)
    except Exception:
        return None
    return parse_fault_log(text, label, pid) if text else None


def _read_remote(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


#: How Ray's actor table names a stage actor's class (Ray Data's map worker of the stage).
STAGE_ACTOR_CLASS = "MapWorker(MapBatches(EvaluationStage))"


def stage_restarts() -> int:
    """How many times Ray restarted this job's stage actors so far (every life ended by a
    death, killed by a signal with or without a fault report: SIGKILL from the
    out-of-memory killer writes none); 0 when Ray cannot say. A stage actor ended by its
    pipeline (``ray.kill``) is not restarted, so it is not counted."""
    try:
        import ray
        from ray._private import state

        if not ray.is_initialized():
            return 0
        job = ray.JobID.from_hex(ray.get_runtime_context().get_job_id())
        table = state.actors(job_id=job)
    except Exception:
        return 0
    return sum(int(a.get("NumRestarts") or 0) for a in table.values()
               if a.get("ActorClassName") == STAGE_ACTOR_CLASS)


def unreported_stage_deaths(restarts: int, reported: int) -> list[str]:
    """One line per stage actor death Ray restarted it after (``restarts`` during the run)
    that no fault log explains (``reported`` stage faults were read from them)."""
    n = max(0, restarts - reported)
    return [f"a stage actor (death {i + 1} of {n}) died without a Python fault report "
            "(killed with SIGKILL, e.g. by the out-of-memory killer); Ray restarted it"
            for i in range(n)]
