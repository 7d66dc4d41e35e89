"""What the tests build over and over, in one place: samples and fixture files, configs,
scripted backbones and their responders, a method run through the in-process driver, a
pipeline run on the session's local Ray, ``df-ray`` subprocesses, and a private Ray head.

Fixtures that use these (``ray_local``, ``run_method``) are in ``tests/conftest.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from df_ray.config import RunConfig
from df_ray.engines.base import ChatRequest
from df_ray.engines.scripted import ScriptedEngine, last_user_content, whitespace_tokens
from df_ray.evaluation import Driver, Member, PlannedCall, build_context
from df_ray.methods import get_method
from df_ray.methods.base import Call, Outcome, SampleState
from df_ray.methods.prompt_templates import (
    DEBATE_HEADER,
    MOA_AGGREGATE,
    RECONCILE_INTRO,
    RECONCILE_JSON_FORMAT,
    RECONCILE_REVIEW,
    VERDICT_CORRECT,
)
from df_ray.methods.self_refine_fewshot import INSTRUCTION as REFINE_INSTRUCTION
from df_ray.tasks.base import Sample
from jobs.perf.sim_cluster import free_ports, pids_matching

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
VENV_BIN = Path(sys.executable).parent

# ============================================================================ samples

AGENTS = ("a1", "a2", "a3")
#: Agents a1..a3 (a4 when a test asks for four) run on models m1..m3 (m4), the coordinator
#: on mc.
MODELS = {"a1": "m1", "a2": "m2", "a3": "m3", "a4": "m4", "coord": "mc"}
AGENT_OF = {m: a for a, m in MODELS.items()}

QUESTION = ("Which number is the sum of two and two?\n(A) 3\n(B) 4\n(C) 5\n(D) 6")
LETTERS = "ABCD"


def make_sample(sid: str = "q1", question: str = QUESTION, gold: str = "B") -> Sample:
    """One four-option MMLU-Pro sample, its id in the question (so each gets its own calls)."""
    return Sample(id=sid, task="mmlu_pro", question=f"[{sid}] {question}", gold=gold,
                  meta={"n_options": 4, "category": "math"})


def answer(letter: str, conf: float | None = 0.9, why: str = "Some reasoning.") -> str:
    """A choice answer as a model writes it: reasoning, ``Answer: X``, a confidence line."""
    text = f"{why}\nAnswer: {letter}"
    return text if conf is None else f"{text}\nConfidence: {conf}"


#: The hand-computed GPQA samples of ``tests/pipeline/responders.py`` (see
#: ``tests/pipeline/test_pipeline_ray.py`` for the computation).
PIPELINE_SCRIPT = "tests.pipeline.responders:table"
PIPELINE_GOLD = {"S1": "A", "S2": "D", "S3": "C", "S4": "A", "S5": "D"}


def pipeline_samples() -> list[Sample]:
    return [Sample(id=s, task="gpqa",
                   question=f"[{s}] Which option is right?\n(A) one\n(B) two\n(C) three\n(D) four",
                   gold=g, meta={}) for s, g in PIPELINE_GOLD.items()]


def write_mmlu_goa(path: Path, n: int, tag: str = "q") -> Path:
    """A GoA-style MMLU-Pro file: ``question`` with options ``(A) ... (D)`` inlined,
    ``gold_answer`` letter, one category (so the test split takes every row)."""
    rows = []
    for i in range(n):
        opts = " ".join(f"({c}) {tag}{i}-{c.lower()}" for c in LETTERS)
        rows.append({"question": f"[{tag}{i}] Which option fits item {tag}{i}? "
                                 f"The options are: {opts}.",
                     "gold_answer": LETTERS[(i * 7) % 4], "category": "reliability"})
    path.write_text(json.dumps(rows, indent=1))
    return path


# ============================================================================ configs


def uncalibrated(method: str, method_args: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``method_args`` with DarkForest's belief uncalibrated (``ablation: no_calibration``,
    unless they set one), so that a run needs no calibration file; other methods' as given."""
    args = dict(method_args or {})
    if method == "darkforest":
        args.setdefault("ablation", "no_calibration")
    return args


def driver_config(*, agents: Sequence[str] = AGENTS, coordinator: bool = True,
                  method: str = "darkforest", **over: Any) -> RunConfig:
    """MMLU-Pro on scripted backbones, one per agent (model ``MODELS[agent]``), for runs in
    this process (nothing stored); DarkForest uncalibrated unless ``method_args`` say."""
    d: dict[str, Any] = {
        "benchmark": "mmlu_pro",
        "method": method,
        "backbones": {f"b{a}": {"kind": "scripted", "model": MODELS[a]}
                      for a in [*agents, "coord"]},
        "agents": [{"id": a, "backbone": f"b{a}"} for a in agents],
        "coordinator": {"id": "coord", "backbone": "bcoord"} if coordinator else None,
    }
    d.update(over)
    d["method_args"] = uncalibrated(method, over.get("method_args"))
    return RunConfig.model_validate(d)


def pipeline_config(tmp_path: Path, **over: Any) -> RunConfig:
    """The hand-computed GPQA configuration: backbones b1..b3 and bc answering from
    ``PIPELINE_SCRIPT``, cache, results and MLflow under ``tmp_path``."""
    base = {
        "name": "df",
        "benchmark": "gpqa",
        "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}", "script": PIPELINE_SCRIPT}
                      for i in (1, 2, 3)} | {"bc": {"kind": "scripted", "model": "mc",
                                                    "script": PIPELINE_SCRIPT}},
        "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)],
        "coordinator": {"id": "coord", "backbone": "bc"},
        "cache_root": str(tmp_path / "cache"),
        "results_dir": str(tmp_path / "results"),
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "pipeline-test"},
        "batch_size": 2,
    }
    base.update(over)
    base["method_args"] = uncalibrated(base.get("method", "darkforest"), over.get("method_args"))
    return RunConfig.model_validate(base)


#: The responder of the sweep-file configs below: every agent answers the gold letter or
#: its neighbour by a fixed rule, and logs each call it serves (``DF_RAY_CALL_LOG``).
SWEEP_SCRIPT = "tests.reliability.responders:logged_majority"


def scripted_backbones(latency_s: float = 0.0, script: str = SWEEP_SCRIPT,
                       **extra: Any) -> dict[str, dict]:
    """Backbones b1, b2, b3 and bc (models m1, m2, m3, mc) on the scripted engine."""
    args = {"latency_s": latency_s} if latency_s else {}
    return {f"b{m}": {"kind": "scripted", "model": f"m{m}", "script": script,
                      "engine_args": dict(args), **extra}
            for m in ("1", "2", "3", "c")}


def base_config(tmp: Path, source: Path, *, latency_s: float = 0.0, batch_size: int = 2,
                concurrency: int = 2, cache_root: Path | None = None,
                experiment: str = "reliability") -> dict[str, Any]:
    """A sweep file's ``base``: DarkForest on the MMLU-Pro file ``source`` with
    ``scripted_backbones``, every path absolute under ``tmp``."""
    tmp = tmp.resolve()
    return {
        "name": "df",
        "benchmark": "mmlu_pro",
        "source": str(source.resolve()),
        "backbones": scripted_backbones(latency_s),
        "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)],
        "coordinator": {"id": "coord", "backbone": "bc"},
        "method_args": {"ablation": "no_calibration"},
        "calibration": {"dir": str(tmp / "calibration"), "auto_fit": False},
        "cache_root": str((cache_root or tmp / "cache").resolve()),
        "results_dir": str(tmp / "results"),
        "tracking": {"uri": f"sqlite:///{tmp}/mlflow.db", "experiment": experiment},
        "batch_size": batch_size,
        "concurrency": concurrency,
    }


def write_sweep(path: Path, base: dict[str, Any], runs: list[dict[str, Any]],
                name: str = "reliability", fuse: bool = True) -> Path:
    path.write_text(yaml.safe_dump({"name": name, "base": base, "runs": runs, "fuse": fuse},
                                   sort_keys=False))
    return path


# ============================================================================ scripted answers


def phase(request: ChatRequest) -> str:
    """What kind of call a request is, from its last user message."""
    u = last_user_content(request)
    if DEBATE_HEADER in u:
        return "debate"
    if RECONCILE_INTRO in u or RECONCILE_REVIEW in u:
        return "discussion"
    if u.startswith("Q: ") and RECONCILE_JSON_FORMAT in u:
        return "reconcile"
    if u.startswith(MOA_AGGREGATE):
        return "moa"
    if u.startswith("Select ") and "models best suited" in u:
        return "select"
    if "Provide brief reasoning (2-3 key sentences)" in u:
        return "goa_initial"
    if u.startswith("Score the following"):
        return "score"
    if u.startswith("Refine your answer by considering"):
        return "s2t"
    if u.startswith("Other models refined their answers"):
        return "t2s"
    if u.startswith("Synthesize these model responses"):
        return "pool"
    if REFINE_INSTRUCTION in u:
        return "fewshot_feedback"
    if "Proposed solution:" in u and VERDICT_CORRECT in u:
        return "feedback"
    if "Using the feedback, write an improved solution" in u:
        return "refine"
    if u.startswith("You are the coordinator"):
        return "coordinator"
    return "independent"


def json_answer(letter: str | None, conf: float | str | None = 0.9,
                why: str = "Brief reasoning.") -> str:
    """A JSON answer {"reasoning", "answer", "confidence_level"} (GoA's and ReConcile's)."""
    d = {"reasoning": why, "answer": letter}
    if conf is not None:
        d["confidence_level"] = conf
    return json.dumps(d)


@dataclass
class Script:
    """Answers by (agent, phase), so a test says "a2's debate answer is C" in one line; a
    value may be a str, a list (one per successive call of that key) or a callable of the
    request. Unlisted keys get ``default``."""

    table: Mapping[tuple[str, str], Any] = field(default_factory=dict)
    default: str | Callable[[ChatRequest], str] = ""
    seen: dict[tuple[str, str], int] = field(default_factory=dict)

    def __call__(self, request: ChatRequest) -> str:
        key = (AGENT_OF.get(request.model, request.model), phase(request))
        val = self.table.get(key, self.default)
        if isinstance(val, list):
            i = self.seen.get(key, 0)
            self.seen[key] = i + 1
            val = val[min(i, len(val) - 1)]
        return val(request) if callable(val) else val


# ============================================================================ runs


@dataclass
class Run:
    """What a driver run left: final states, outcomes and every planned call."""

    states: list[SampleState]
    outcomes: list[Outcome]
    planned: list[PlannedCall]
    engine: ScriptedEngine

    def calls(self, sample_id: str | None = None, *, round: int | None = None,
              role: str | None = None) -> list[Call]:
        return [p.call for p in self.planned
                if (sample_id is None or self.states[p.row].sample.id == sample_id)
                and (round is None or p.round == round)
                and (role is None or p.call.role == role)]

    def n_calls(self, sample_id: str | None = None) -> int:
        return len(self.calls(sample_id))

    @property
    def outcome(self) -> Outcome:
        return self.outcomes[0]

    @property
    def state(self) -> SampleState:
        return self.states[0]


def run_method(name: str, script: Script | Callable[[ChatRequest], str] | str,
               method_args: Mapping[str, Any] | None = None, *,
               samples: Sequence[Sample] | None = None, cfg: RunConfig | None = None,
               calibration: Any = None, engine: ScriptedEngine | None = None) -> Run:
    """Method ``name`` on the scripted engine through the evaluation driver, the round loop
    the Ray stage runs, in this process. Checks the method's bound on calls per sample."""
    cfg = cfg or driver_config(method=name)
    method = get_method(name, **dict(method_args or {}))
    ctx = build_context(cfg, calibration, lambda agent, text: whitespace_tokens(text))
    engine = engine or ScriptedEngine("scripted", script)
    driver = Driver([Member(method, ctx)], engine, keep_plan=True)
    rows = driver.run(samples or [make_sample()])
    finished = driver.outcomes(rows)
    run = Run([states[0] for states in rows], [o for _, o, _ in finished], driver.planned,
              engine)
    bound = method.max_calls_per_sample(ctx)
    for st in run.states:
        assert bound is None or len(st.calls) <= bound
    return run


def count_constructions(monkeypatch, **classes: type) -> dict[str, int]:
    """Counts of each class's constructions (``name=Class``), live, from now on."""
    built = dict.fromkeys(classes, 0)
    for name, cls in classes.items():
        init = cls.__init__

        def counted(self, *a, _name=name, _init=init, **k):
            built[_name] += 1
            _init(self, *a, **k)

        monkeypatch.setattr(cls, "__init__", counted)
    return built


def run_pipeline(cfg: RunConfig, samples: Sequence[Sample], *, track: bool = True):
    """``cfg`` on ``samples`` through the Ray pipeline (the session's local Ray: use the
    ``ray_local`` fixture), its engines started for this run and stopped after it."""
    from df_ray.pipeline.runner import Runner, shared_backbones
    from df_ray.tracking import Tracker

    tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment) if track else None
    runner = Runner(shared_backbones([cfg]), tracker=tracker, progress=lambda m: None)
    try:
        return runner.run(cfg, list(samples))
    finally:
        runner.shutdown()


# ============================================================================ processes




def cli_env(call_log: Path | None = None) -> dict[str, str]:
    """This process's environment for a ``df-ray`` child: the repository on PYTHONPATH, no
    RAY_ADDRESS (so it starts its own Ray), unbuffered output."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    env["PYTHONUNBUFFERED"] = "1"
    if call_log is not None:
        env["DF_RAY_CALL_LOG"] = str(call_log)
    return env


def start_cli(args: list[str], log: Path, call_log: Path | None = None) -> subprocess.Popen:
    """`python -m df_ray.cli ARGS` as the leader of a new session (and process group)."""
    out = open(log, "wb")  # noqa: SIM115 - closed by the caller through proc.stdout_file
    proc = subprocess.Popen([sys.executable, "-m", "df_ray.cli", *args], cwd=REPO,
                            env=cli_env(call_log), stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    proc.log_file = out  # type: ignore[attr-defined]
    return proc


def finish(proc: subprocess.Popen, timeout: float) -> int:
    try:
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            kill_group(proc)
        proc.log_file.close()  # type: ignore[attr-defined]
    return rc


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def wait_for(pred, timeout: float, what: str, proc: subprocess.Popen | None = None,
             log: Path | None = None, every: float = 0.1) -> None:
    t = time.monotonic()
    while not pred():
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise AssertionError(f"the run exited (rc {proc.returncode}) before {what}:\n{tail}")
        if time.monotonic() - t > timeout:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise AssertionError(f"timed out waiting for {what}:\n{tail}")
        time.sleep(every)


# Ray's node start gives the raylet a fixed 30 s to register; on an overloaded machine that
# can fail before anything of ours ran. Such a run is started again; any other failure is not.
#: What a run prints when its local Ray did not start in time (its processes missed Ray's
#: fixed timeouts: `runner._ray_init`'s message, or Ray's own).
RAY_START_FAILED = ("timed out during startup", "did not come up within Ray's fixed timeouts")


def _ray_start_failed(proc: subprocess.Popen, log: Path) -> bool:
    if proc.poll() in (None, 0):
        return False
    text = log.read_text(errors="replace")
    return any(s in text for s in RAY_START_FAILED)


def start_and_wait(args: list[str], log: Path, call_log: Path | None, pred, timeout: float,
                   what: str, tries: int = 5) -> subprocess.Popen:
    """Start a run and wait until ``pred()``; retries a run whose Ray failed to start."""
    for attempt in range(tries):
        proc = start_cli(args, log, call_log)
        try:
            wait_for(pred, timeout, what, proc, log, every=0.05)
            return proc
        except AssertionError:
            retry = attempt + 1 < tries and _ray_start_failed(proc, log)
            finish(proc, 60)
            if not retry:
                raise
    raise AssertionError("unreachable")


def run_to_end(args: list[str], log: Path, call_log: Path | None, timeout: float,
               proc: subprocess.Popen | None = None, tries: int = 5) -> int:
    """Run (or finish ``proc``) to its exit status; retries a run whose Ray failed to start."""
    for attempt in range(tries):
        if proc is None:
            proc = start_cli(args, log, call_log)
        rc = finish(proc, timeout)
        if rc == 0 or attempt + 1 == tries or not _ray_start_failed(proc, log):
            return rc
        proc = None
    return rc


def one_line(out: subprocess.CompletedProcess, rc: int, *needles: str) -> str:
    """A ``df-ray`` command's one message (docs/faults.md): exit status ``rc``, a single
    ``df-ray:`` line at the end of stderr (a configuration error names its file and run on
    it, and the field on the next line), no traceback; returns the message."""
    text = out.stdout + out.stderr
    assert out.returncode == rc, text
    assert "Traceback" not in text, text
    lines = out.stderr.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("df-ray:")]
    assert len(starts) == 1, out.stderr
    message = "\n".join(lines[starts[0]:])
    assert len(lines) - starts[0] <= 2, out.stderr
    for n in needles:
        assert n in message, message
    return message


@contextlib.contextmanager
def tmpfs(target: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``target`` for the block (``options`` as ``mount -o``: ``size=8k``
    for a disk that fills, ``ro`` for one nobody, root included, can write); skips the test
    where mounting is not permitted."""
    import pytest

    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        why = done.stderr.strip() or f"mount exited {done.returncode}"
        pytest.skip(f"cannot mount a tmpfs ({why}): a real full or read-only file system "
                    "needs the right to mount")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False, capture_output=True)


# ============================================================================ results


def configuration_runs(tracking_uri: str, experiment: str = "reliability") -> list:
    """Every configuration run (finished, failed or running) of an MLflow experiment."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id], filter_string="tags.`df_ray.kind` = 'configuration'",
                              run_view_type=ViewType.ALL)


def cache_parts(root: Path) -> list[Path]:
    return sorted(root.glob("part-*.parquet")) if root.exists() else []


# ============================================================================ private Ray head

HEAD_START_TIMEOUT_S = 150.0


class RayHead:
    """A private Ray head with the dashboard (the Job API), started with `ray start --head
    --block` in its own session: its own ports, its own --temp-dir, its own auth token. It
    is stopped by signalling that process (never `ray stop`, which stops every Ray on the
    machine); leftover workers naming its temp dir are killed."""

    def __init__(self) -> None:
        # A short temp dir: Ray puts unix sockets under it (108-byte path limit).
        self.temp_dir = tempfile.mkdtemp(prefix="dfrj", dir="/tmp")
        # Fixed ports only where Ray's defaults are fixed (and so shared with any other Ray
        # on this machine); the rest Ray picks itself.
        self.gcs_port, self.dash_port, self.client_port, self.agent_port = free_ports(4)
        self.address = f"http://127.0.0.1:{self.dash_port}"
        self.log_path = Path(self.temp_dir + ".log")
        self.env = dict(os.environ)
        # `python` in a job's entrypoint resolves through the head's PATH: the venv first.
        self.env["PATH"] = f"{VENV_BIN}{os.pathsep}{self.env.get('PATH', '')}"
        # Token auth with a token of our own, so neither ~/.ray/auth_token nor other
        # clusters on this machine matter; clients get the same env.
        self.env["RAY_AUTH_MODE"] = "token"
        self.env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        self.env.pop("RAY_ADDRESS", None)
        self.env.pop("RAY_API_SERVER_ADDRESS", None)
        self.env["RAY_USAGE_STATS_ENABLED"] = "0"
        self.env.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        cmd = [str(VENV_BIN / "ray"), "start", "--head", "--block",
               f"--port={self.gcs_port}", f"--dashboard-port={self.dash_port}",
               "--dashboard-host=127.0.0.1", "--include-dashboard=true",
               f"--ray-client-server-port={self.client_port}",
               f"--dashboard-agent-listen-port={self.agent_port}",
               "--num-cpus=4", "--num-gpus=0", "--object-store-memory=300000000",
               "--disable-usage-stats",
               f"--temp-dir={self.temp_dir}"]
        log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the head
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=self.temp_dir)
        log.close()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.env['RAY_AUTH_TOKEN']}"}

    def client(self):
        """A Job API client that sends this head's token whatever this process's Ray auth
        settings are (another test's ray.init may have set RAY_AUTH_MODE here)."""
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.address, headers=self.headers)

    def wait_ready(self) -> None:
        """Until the dashboard answers the Job API (its head agent may come up later; a
        submission retries for that)."""
        deadline = time.time() + HEAD_START_TIMEOUT_S
        last = None
        while time.time() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"`ray start --head` exited with {self.proc.returncode}:\n"
                                   f"{self.tail()}")
            try:
                self.client().list_jobs()
                return
            except Exception as e:  # connection refused, 503 while starting, ...
                last = e
                time.sleep(1.0)
        raise TimeoutError(f"the Ray dashboard at {self.address} did not answer the Job API "
                           f"in {HEAD_START_TIMEOUT_S:.0f}s (last error: {last!r}); is "
                           f"ray[default] installed?\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        parts = []
        with contextlib.suppress(OSError):
            parts.append(self.log_path.read_text(errors="replace").splitlines()[-n:])
        for logs in Path(self.temp_dir).glob("session_*/logs"):
            for name in ("dashboard.err", "dashboard.log", "dashboard_agent.log"):
                f = logs / name
                if f.is_file():
                    parts.append([f"--- {f}", *f.read_text(errors="replace").splitlines()[-20:]])
        return "\n".join(line for p in parts for line in p)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # `ray start --block` drains and stops its node
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # Workers run in their own process groups: anything still naming our temp dir is ours.
        deadline = time.time() + 15
        while pids_matching(self.temp_dir) and time.time() < deadline:
            time.sleep(0.5)
        for pid in pids_matching(self.temp_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.log_path.unlink(missing_ok=True)


@contextlib.contextmanager
def private_ray_head() -> Iterator[RayHead]:
    """A started private head; a second try with other ports if the first one dies while
    starting (a port taken between our probe and Ray's bind)."""
    for attempt in (1, 2):
        head = RayHead()
        head.start()
        try:
            head.wait_ready()
        except RuntimeError:
            head.stop()
            if attempt == 2:
                raise
            continue
        except BaseException:
            head.stop()
            raise
        break
    try:
        yield head
    finally:
        head.stop()
