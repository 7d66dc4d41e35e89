"""The Ray Data stages: one per method round, then grading.

Rows are ``{"sample_id": str, "state": json}``. A round stage asks the method what each sample
needs, answers from the generation cache what it can, sends the rest to the shared engines
(all backbones at once), persists the new completions and appends the records to the state.
The grading stage runs `Method.finish`, grades the final answer and the agents' answers, and
emits one flat result row per sample.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

from df_ray.config import RunConfig
from df_ray.core import Calibration
from df_ray.core.types import Observation
from df_ray.engines.base import Completion
from df_ray.methods import get_method
from df_ray.methods.base import CallRecord, MethodContext, SampleState, agent_view
from df_ray.pipeline import lifeline
from df_ray.pipeline.cache import GenerationCache
from df_ray.pipeline.engine_pool import EngineClient
from df_ray.pipeline.runner import shared_backbones
from df_ray.tasks import get_task

#: How often a round stage re-lists the cache root for other writers' parts (seconds).
REFRESH_INTERVAL_S = 5.0


def build_context(cfg: RunConfig, calibration: Calibration | None,
                  client: EngineClient | None) -> MethodContext:
    def count(agent_id: str, text: str) -> int:
        if client is None:
            return len(text.split())
        return _count_cached(agent_id, text)

    @functools.lru_cache(maxsize=4096)
    def _count_cached(agent_id: str, text: str) -> int:
        return client.count_tokens(cfg.agent(agent_id).backbone, [text])[0]

    return MethodContext(
        task=get_task(cfg.benchmark),
        agents=[agent_view(cfg, a.id) for a in cfg.agents],
        coordinator=agent_view(cfg, cfg.coordinator.id) if cfg.coordinator else None,
        settings=cfg,
        calibration=calibration,
        count_tokens=count,
        run_seed=cfg.seed,
    )


# Off the main thread math-verify runs without its signal-based timeouts (df_ray bounds the
# input instead) and warns about it on every call; in stage actors that is noise.
logging.getLogger("math_verify").setLevel(logging.ERROR)


class _Member:
    """One configuration a stage serves: its settings, method and context."""

    def __init__(self, cfg: RunConfig, calibration: Calibration | None, client: EngineClient,
                 agents_only: bool) -> None:
        self.cfg = cfg
        # Calibration runs only the independent round of DarkForest (agents_only).
        self.method = (get_method("darkforest") if agents_only
                       else get_method(cfg.method, **cfg.method_args))
        self.rounds = 1 if agents_only else self.method.rounds
        self.ctx = build_context(cfg, calibration, client)


class _StageBase:
    """Rows hold one sample's states, one per configuration the pipeline carries (all over
    the same samples and cache root); stages serve every configuration at once."""

    def __init__(self, configs: list[str], calibrations: list[dict | None], handles: dict,
                 agents_only: bool = False) -> None:
        lifeline.hold()
        cfgs = [RunConfig.model_validate_json(c) for c in configs]
        self.client = EngineClient(handles, shared_backbones(cfgs),
                                   retries=cfgs[0].max_request_retries)
        self.members = [
            _Member(c, Calibration.from_dict(cal) if cal else None, self.client, agents_only)
            for c, cal in zip(cfgs, calibrations, strict=True)]


class RoundStage(_StageBase):
    """Runs one round of every configuration's method over a batch of samples."""

    def __init__(self, round: int, configs: list[str], calibrations: list[dict | None],
                 handles: dict, agents_only: bool = False) -> None:
        super().__init__(configs, calibrations, handles, agents_only)
        self.round = round
        self.cache = GenerationCache(self.members[0].cfg.cache_root)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        rows = [[SampleState.from_dict(d) for d in json.loads(s)] for s in batch["state"]]
        planned = []  # (row, member, call): the first configuration to ask for a call pays
        for i, states in enumerate(rows):
            for m, (member, st) in enumerate(zip(self.members, states, strict=True)):
                if st.done or self.round >= member.rounds:
                    continue
                for call in member.method.plan(self.round, st, member.ctx):
                    planned.append((i, m, call))
        if planned:
            keys = [call.request.key() for _, _, call in planned]
            # Calls another configuration already made for this sample in an earlier round
            # (they ride in the row; another stage's cache writes may not be listed yet).
            known: dict[int, dict[str, Completion]] = {}
            for i in {i for i, _, _ in planned}:
                known[i] = {c.key: Completion(c.text, c.prompt_tokens, c.completion_tokens)
                            for st in rows[i] for c in st.calls if c.error is None}
            if any(k not in self.cache and k not in known[i]
                   for k, (i, _, _) in zip(keys, planned, strict=True)):
                # Another job or stage actor may have written them since this stage started
                # (earlier configurations' parts were loaded when it started).
                self.cache.refresh(min_interval_s=REFRESH_INTERVAL_S)
            results: list[Any] = [None] * len(planned)
            cached = [False] * len(planned)
            todo: dict[str, list[int]] = {}
            for j in range(len(planned)):
                hit = known[planned[j][0]].get(keys[j]) or self.cache.get(keys[j])
                if hit is not None:
                    results[j], cached[j] = hit, True
                else:
                    todo.setdefault(keys[j], []).append(j)
            if todo:
                firsts = [js[0] for js in todo.values()]
                reqs = [planned[j][2].request for j in firsts]
                comps = self.client.generate(reqs)
                self.cache.put_many(zip(reqs, comps, strict=True))
                for js, comp in zip(todo.values(), comps, strict=True):
                    for n, j in enumerate(js):
                        results[j] = comp
                        cached[j] = n > 0  # a duplicate within the batch costs nothing
            for j, (i, m, call) in enumerate(planned):
                comp = results[j]
                rows[i][m].calls.append(CallRecord(
                    round=self.round, role=call.role, agent=call.agent, key=keys[j],
                    text=comp.text, prompt_tokens=comp.prompt_tokens,
                    completion_tokens=comp.completion_tokens, cached=cached[j], error=comp.error))
        return {"sample_id": batch["sample_id"],
                "state": [json.dumps([st.to_dict() for st in states]) for states in rows]}


class GradeStage(_StageBase):
    """Finishes each sample of each configuration: the method's outcome, grades, token and
    call accounting; one output row per (sample, configuration)."""

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        out = []
        for s in batch["state"]:
            for m, (member, d) in enumerate(zip(self.members, json.loads(s), strict=True)):
                row = grade_state(SampleState.from_dict(d), member.method, member.ctx)
                row["config"] = m
                out.append(row)
        return {k: [r[k] for r in out] for k in (*RESULT_COLUMNS, "config")}


RESULT_COLUMNS = (
    "sample_id", "correct", "scores", "final_answer", "decision_source", "trusted",
    "overridden", "coordinator_called", "coordinator_answer", "coordinator_correct",
    "top_answer", "coordinator_agrees", "any_agent_correct", "n_calls", "n_fresh_calls",
    "n_errors", "agent_tokens", "coordinator_tokens", "other_tokens", "total_tokens", "t_cross",
    "detail",
)


def grade_state(state: SampleState, method, ctx: MethodContext) -> dict[str, Any]:
    task = ctx.task
    sample = state.sample
    outcome = method.finish(state, ctx)
    grades: dict[str, Any] = {}

    def grade_obs(o: Observation | None):
        if o is None or not o.valid:
            return task.grade(sample, None)
        key = o.answer
        if key not in grades:
            grades[key] = task.grade(sample, o)
        return grades[key]

    final_grade = grade_obs(outcome.final)
    agent_correct = {}
    for o in outcome.agent_observations:
        if o.valid:
            agent_correct[o.agent] = bool(grade_obs(o).correct)
    d = outcome.decision
    coord_called = bool(outcome.extra.get("coordinator_called", False))
    coord_answer = d.coordinator_answer if d else None
    coord_correct = None
    if coord_answer is not None:
        coord_obs = [o for o in _coordinator_observations(state, ctx) if o.answer == coord_answer]
        coord_correct = bool(grade_obs(coord_obs[0]).correct) if coord_obs else None
    elif coord_called:
        coord_correct = False
    top = (outcome.extra.get("belief") or {}).get("top")
    tokens = {"agent": 0, "coordinator": 0, "other": 0}
    for c in state.calls:
        bucket = c.role if c.role in tokens else "other"
        tokens[bucket] += c.prompt_tokens + c.completion_tokens
    detail = {
        "observations": [_obs_dict(o) for o in outcome.agent_observations],
        "agent_correct": agent_correct,
        "final": _obs_dict(outcome.final) if outcome.final else None,
        "extra": outcome.extra,
        "calls": [{"round": c.round, "role": c.role, "agent": c.agent, "cached": c.cached,
                   "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
                   "error": c.error} for c in state.calls],
    }
    return {
        "sample_id": sample.id,
        "correct": bool(final_grade.correct),
        "scores": json.dumps(final_grade.scores),
        "final_answer": outcome.final.answer if outcome.final else None,
        "decision_source": d.source if d else None,
        "trusted": bool(d.trusted) if d else False,
        "overridden": bool(d.overridden) if d else False,
        "coordinator_called": coord_called,
        "coordinator_answer": coord_answer,
        "coordinator_correct": coord_correct,
        "top_answer": top,
        "coordinator_agrees": (coord_answer == top) if (coord_called and top is not None) else None,
        "any_agent_correct": any(agent_correct.values()),
        "n_calls": len(state.calls),
        "n_fresh_calls": sum(1 for c in state.calls if not c.cached and c.error is None),
        "n_errors": sum(1 for c in state.calls if c.error),
        "agent_tokens": tokens["agent"],
        "coordinator_tokens": tokens["coordinator"],
        "other_tokens": tokens["other"],
        "total_tokens": sum(tokens.values()),
        "t_cross": int(outcome.t_cross),
        "detail": json.dumps(detail, default=str),
    }


def _coordinator_observations(state: SampleState, ctx: MethodContext) -> list[Observation]:
    from df_ray.methods.darkforest import observations_from_state

    return observations_from_state(state, ctx, round=1, role="coordinator")


def _obs_dict(o: Observation) -> dict[str, Any]:
    return {"agent": o.agent, "answer": o.answer, "confidence": o.confidence, "valid": o.valid,
            "quality": o.quality, "extracted": (o.extracted or "")[:2000],
            "raw": o.raw[:4000]}
