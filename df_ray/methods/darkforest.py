"""DarkForest: independent agents, a calibrated belief, controlled disclosure, one coordinator
and a deterministic guardrail (docs/method.md).

Round 0: every agent answers the question alone (no agent sees another's output).
Round 1: the answers are parsed and turned into a belief; the coordinator sees only what the
disclosure policy lets through. A lazy coordinator is skipped when the guardrail already
trusts z* (it could not change the outcome), and then no evidence is disclosed (T_cross 0).
With ``belief_only`` (Table 2's "belief only" row) the coordinator is never called: the final
answer is z*, T_cross and the coordinator's tokens are 0. n + 1 calls per sample at most.

``tie_rule`` chooses z* among candidates level on posterior and support: ``first`` (the
default), the belief's own order (lower agent index, then smaller key); ``random``, a uniform
pick seeded by the run seed and the sample id (``df_ray.core.voting.break_belief_tie``). It
decides the belief-only answer, and what the guardrail and the coordinator see as z*.

The coordinator sees the whole task (``problem_statement``: FinQA's table and program
language, LegalBench's instruction and labels, a question's options), then the evidence.

With ``guardrail.fit`` the thresholds are the calibration file's fitted setting
(``fitted_setting``; the fit itself: ``df_ray.evaluation.guardrail_calibration``), which
reads the held-out rows' ``top_support``, ``top_posterior``, ``top_margin``,
``selected_correct`` and ``coordinator_correct``.

Its result columns (``result_columns``) record each sample's decision; its metrics, shares
of all samples unless noted:
- trusted_rate: the guardrail trusted z*.
- override_rate: the guardrail overrode a coordinator that disagreed with z*.
  correct_override_rate: overrides where z* was right and the coordinator wrong;
  wrong_override_rate: overrides where z* was wrong and the coordinator right. With a lazy
  coordinator no override can be observed.
- coordinator_call_rate: the coordinator was called.
- coordinator_agreement: among samples whose coordinator was called and a belief existed, the
  share where its answer equalled z* (NaN when there was none).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from df_ray.core import (
    BeliefConfig,
    GuardrailConfig,
    build_belief,
    decide,
    disclose,
    needs_coordinator,
    parse,
)
from df_ray.core.disclosure import POLICIES
from df_ray.core.guardrail_fit import GuardrailSetting
from df_ray.core.types import Belief, Cluster, Decision, Observation
from df_ray.core.voting import break_belief_tie
from df_ray.methods import darkforest_explain
from df_ray.methods.base import (
    Call,
    Method,
    MethodArgs,
    MethodArgsError,
    MethodContext,
    Outcome,
    SampleState,
)
from df_ray.methods.common import RunTieRule, behaviour_seconds, rekeyed, tie_rule_field
from df_ray.methods.prompt_templates import coordinator_prompt
from df_ray.methods.result_columns import RowMean
from df_ray.tasks.base import problem_statement

Disclosure = Literal[POLICIES]  # type: ignore[valid-type]
Ablation = Literal[BeliefConfig.ABLATIONS]  # type: ignore[valid-type]


class GuardrailArgs(MethodArgs):
    """When the belief's top candidate is trusted over the coordinator (docs/method.md §6).

    ``fit``: the thresholds are chosen on the calibration split instead (the coordinator run
    there too, Learn-then-Test: ``df_ray.core.guardrail_fit``), as the most accurate setting
    whose wrong-override rate is certified at most ``max_wrong_override`` with probability
    1 - ``delta``; the frozen calibration file records the choice. k, tau_p and tau_m then
    only set what the ``adaptive`` disclosure calls certain."""

    k: int = Field(2, ge=1, description="least support |S_z*| for trust")
    tau_p: float = Field(0.66, ge=0.0, le=1.0, description="least posterior P(z*|O)")
    tau_m: float = Field(0.30, ge=0.0, le=1.0, description="least margin Delta")
    enabled: bool = Field(True, description="off: the coordinator always decides")
    fit: bool = Field(False, description="choose k, tau_p, tau_m on the calibration split "
                                         "(Learn-then-Test)")
    max_wrong_override: float = Field(0.05, ge=0.0, le=1.0,
                                      description="the fit: the certified wrong-override rate")
    delta: float = Field(0.1, gt=0.0, lt=1.0,
                         description="the fit: the chance the certificate may fail")
    testing: Literal["fixed_sequence", "bonferroni"] = Field(
        "fixed_sequence", description="the fit: how the grid's settings are tested")


#: GuardrailArgs' fit fields and their defaults: at these values they hash as before they
#: existed (``DarkForest.hashed_args``).
_FIT_DEFAULTS = {"fit": False, "max_wrong_override": 0.05, "delta": 0.1,
                 "testing": "fixed_sequence"}


def observations_from_state(state: SampleState, ctx: MethodContext, round: int = 0,
                            role: str = "agent") -> list[Observation]:
    """Parse the ``role`` calls of ``round`` into observations (a failed call is invalid)."""
    spec = ctx.task.parse_spec(state.sample)
    out = []
    for rec in state.records(round=round, role=role):
        if rec.error:
            out.append(Observation.invalid(rec.agent, raw=""))
        else:
            out.append(parse(rec.text, spec, agent=rec.agent))
    # the benchmark's candidate keys (HumanEval's behaviour keys; text keys: unchanged)
    return rekeyed(out, ctx, state, f"{role}:{round}")


def correct_override(row: Mapping[str, Any]) -> bool:
    """An override where z* was right and the coordinator wrong."""
    return bool(row.get("overridden") and row["correct"]
                and row.get("coordinator_correct") is False)


def wrong_override(row: Mapping[str, Any]) -> bool:
    """An override where z* was wrong and the coordinator right."""
    return bool(row.get("overridden") and not row["correct"]
                and row.get("coordinator_correct") is True)


@functools.lru_cache(maxsize=64, typed=True)  # 1 and 1.0 stay apart
def _guardrail_config(k: int, tau_p: float, tau_m: float, enabled: bool) -> GuardrailConfig:
    """One (frozen, validated) GuardrailConfig per setting: a sample asks for it twice."""
    return GuardrailConfig(k=k, tau_p=tau_p, tau_m=tau_m, enabled=enabled)


def cluster_to_dict(c: Cluster) -> dict[str, Any]:
    """``dataclasses.asdict(c)``, without its generic recursion and copies (a cluster holds
    only strings, numbers and tuples of strings)."""
    return {"answer": c.answer, "support": tuple(c.support), "pattern": tuple(c.pattern),
            "score": c.score, "posterior": c.posterior}


def belief_to_dict(b: Belief) -> dict[str, Any]:
    return {
        "clusters": [cluster_to_dict(c) for c in b.clusters],
        "top": b.top.answer if b.top else None,
        "runner_up": b.runner_up.answer if b.runner_up else None,
        "margin": b.margin,
    }


class DarkForest(Method):
    name = "darkforest"

    class Args(MethodArgs):
        disclosure: Disclosure = Field(
            "strict", description="what the coordinator is shown of the belief and traces")
        guardrail: GuardrailArgs = Field(default_factory=GuardrailArgs,
                                         description="trust thresholds k, tau_p, tau_m")
        lazy: bool = Field(False, description="skip the coordinator when the guardrail "
                                              "already trusts z* (same answers, fewer tokens)")
        ablation: Ablation = Field("full", description="which belief factors are switched off")
        gamma: float = Field(0.5, ge=0.0, le=1.0,
                             description="strength of the independence discount")
        belief_only: bool = Field(False, description="the paper's belief-only decision "
                                                     "(Table 2): z* without a coordinator call")
        tie_rule: RunTieRule = tie_rule_field("the candidate of the lowest-index agent in "
                                              "config order, then the smaller key")

    #: Where the top-level config keys of earlier versions went (config key -> Args field).
    moved_config_keys: ClassVar[dict[str, str]] = {
        "disclosure": "disclosure", "guardrail": "guardrail", "lazy_coordinator": "lazy",
        "ablation": "ablation", "gamma": "gamma", "belief_only": "belief_only"}

    needs_coordinator = True

    def __init__(self, args: Any = None, **kwargs: Any) -> None:
        super().__init__(args, **kwargs)
        g, a = self.args.guardrail, self.args
        if g.fit:
            why = ("ablation no_calibration fits nothing on held-out data"
                   if a.ablation == "no_calibration" else
                   "belief_only never calls the coordinator" if a.belief_only else
                   "guardrail.enabled is false" if not g.enabled else None)
            if why is not None:
                raise MethodArgsError(f"method 'darkforest': method_args.guardrail.fit needs "
                                      f"the coordinator run on a calibration split, but {why}")

    @classmethod
    def hashed_args(cls, args: dict[str, Any]) -> dict[str, Any]:
        args = super().hashed_args(args)
        g = args.get("guardrail")
        if not isinstance(g, dict):
            return args
        g = {k: v for k, v in g.items() if not (k in _FIT_DEFAULTS and v == _FIT_DEFAULTS[k])}
        return {**args, "guardrail": g}

    result_columns: ClassVar[dict[str, str]] = {
        "decision_source": "string",    # guardrail, coordinator or belief
        "trusted": "bool",              # the guardrail trusted z*
        "overridden": "bool",           # ... over a coordinator that disagreed
        "coordinator_called": "bool",
        "coordinator_answer": "string",  # its canonical answer (null: none valid)
        "coordinator_correct": "bool",   # null when it was not called
        "top_answer": "string",          # the belief's z*
        "coordinator_agrees": "bool",    # its answer is z* (null: not called, or no z*)
        "top_posterior": "double",       # P(z*|O) (null: no z*): the belief's calibration
        "top_support": "int64",          # |S_z*| (0: no z*)
        "top_margin": "double",          # Delta (null: no z*)
        "behaviour_s": "double",         # sandbox seconds of behaviour keys (0: text keys)
    }
    metrics: ClassVar[dict[str, RowMean]] = {
        "trusted_rate": RowMean("trusted"),
        "override_rate": RowMean("overridden"),
        "correct_override_rate": RowMean(correct_override),
        "wrong_override_rate": RowMean(wrong_override),
        "coordinator_call_rate": RowMean("coordinator_called"),
        "coordinator_agreement": RowMean("coordinator_agrees", among="coordinator_agrees"),
        "behaviour_s_per_sample": RowMean("behaviour_s"),
    }
    summary_metrics: ClassVar[tuple[str, ...]] = ("trusted_rate", "override_rate")

    @classmethod
    def explain(cls, row: Mapping[str, Any], detail: Mapping[str, Any]) -> list[str]:
        return darkforest_explain.explain(row, detail)

    @property
    def rounds(self) -> int:
        return 2

    @property
    def needs_calibration(self) -> bool:
        return self.args.ablation != "no_calibration"

    def _belief(self, obs: list[Observation], ctx: MethodContext, sample_id: str) -> Belief:
        cfg = BeliefConfig.ablation(self.args.ablation, gamma=self.args.gamma)
        belief = build_belief(obs, ctx.calibration, cfg,
                              agent_order=[a.id for a in ctx.agents])
        return break_belief_tie(belief, self.args.tie_rule, ctx.run_seed, sample_id)

    def guardrail(self, ctx: MethodContext | None = None) -> GuardrailConfig:
        """The thresholds of Trusted(z*): the configured ones, or with ``guardrail.fit`` the
        setting the calibration file's fit chose."""
        g = self.args.guardrail
        if g.fit:
            return fitted_setting(ctx).config()
        return self._configured()

    def _configured(self) -> GuardrailConfig:
        g = self.args.guardrail
        return _guardrail_config(g.k, g.tau_p, g.tau_m, g.enabled)

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        sample = state.sample
        if round == 0:
            prompt = ctx.task.agent_prompt(sample)
            return [Call("agent", a.id, ctx.request(a, prompt, sample=sample, slot="independent"))
                    for a in ctx.agents]
        if round == 1:
            if self.args.belief_only:
                # Table 2's belief-only decision: nothing is shown to anyone, no call.
                state.data["t_cross"] = 0
                return []
            obs, belief = self._observed(state, ctx)
            guard = self.guardrail(ctx)
            coord = ctx.coordinator
            assert coord is not None
            if self.args.lazy and not needs_coordinator(belief, guard):
                # Skipped: no evidence crosses to a coordinator, so T_cross is 0.
                state.data["coordinator_skipped"] = True
                state.data["t_cross"] = 0
                return []
            # the configured thresholds decide what adaptive disclosure calls certain, fitted
            # guardrail or not: the held-out coordinator saw the same evidence
            evidence = disclose(belief, obs, self.args.disclosure,
                                count_tokens=lambda t: ctx.count_tokens(coord.id, t),
                                guardrail=self._configured(),
                                display=_cluster_programs(obs, belief, ctx))
            state.data["t_cross"] = evidence.tokens
            user = coordinator_prompt(problem_statement(ctx.task, sample), evidence.text,
                                      ctx.task.answer_instructions())
            return [Call("coordinator", coord.id,
                         ctx.request(coord, user, sample=sample, slot="coordinator"))]
        return []

    def _observed(self, state: SampleState, ctx: MethodContext
                  ) -> tuple[list[Observation], Belief]:
        """The agents' observations and the belief over them, built once per sample (round 1
        builds them; ``finish`` reuses them)."""
        got = state.memo.get("belief")
        if got is None:
            obs = observations_from_state(state, ctx)
            got = state.memo["belief"] = (obs, self._belief(obs, ctx, state.sample.id))
        return got

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        obs, belief = self._observed(state, ctx)
        guard = self.guardrail(ctx)
        coord_obs = observations_from_state(state, ctx, round=1, role="coordinator")
        coord = coord_obs[0] if coord_obs else None
        decision, final = decision_and_final(obs, belief, coord, guard,
                                             lambda o, answer: _member(o, answer, ctx))
        coord_answer = coord.answer if coord is not None and coord.valid else None
        top = belief.top.answer if belief.top else None
        called = bool(coord_obs)
        return Outcome(
            final=final,
            agent_observations=obs,
            coordinator=coord,
            t_cross=int(state.data.get("t_cross", 0)),
            extra={"belief": belief_to_dict(belief)},
            columns={"decision_source": decision.source, "trusted": bool(decision.trusted),
                     "overridden": bool(decision.overridden), "coordinator_called": called,
                     "coordinator_answer": coord_answer, "top_answer": top,
                     "coordinator_agrees": (coord_answer == top)
                     if called and top is not None else None,
                     "top_posterior": belief.top.posterior if belief.top else None,
                     "top_support": len(belief.top.support) if belief.top else 0,
                     "top_margin": belief.margin if belief.top else None,
                     "behaviour_s": behaviour_seconds(state)},
            # a coordinator called without a valid answer is graded wrong
            graded={"coordinator_correct": coord if called else None},
            # z*'s program as the guardrail would answer it (the fit's top_correct)
            selected=_member(obs, top, ctx) if top is not None else None,
        )

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        return len(ctx.agents) + 1


def _representative(obs: list[Observation], answer: str) -> Observation | None:
    """The best-parsed supporting observation of a cluster (what gets graded)."""
    members = [o for o in obs if o.valid and o.answer == answer]
    if not members:
        return None
    return max(members, key=lambda o: (o.quality, o.confidence, -obs.index(o)))


def decision_and_final(obs: Sequence[Observation], belief: Belief,
                       coordinator: Observation | None, guard: GuardrailConfig,
                       member: Callable[[list[Observation], str], Observation | None] | None
                       = None) -> tuple[Decision, Observation | None]:
    """DarkForest's decision (``decide``) and the observation graded for it: the
    coordinator's when the coordinator decided, else the member of the decided cluster
    (``member``; default: its best parsed observation), the coordinator's when none is.
    ``coordinator``: its parsed answer (None: not called)."""
    coord_answer = coordinator.answer if coordinator is not None and coordinator.valid else None
    decision = decide(belief, coord_answer, guard)
    if decision.final is None:
        return decision, None
    if decision.final == coord_answer and decision.source == "coordinator":
        return decision, coordinator
    pick = member or _representative
    return decision, pick(list(obs), decision.final) or coordinator


def _member(obs: list[Observation], answer: str, ctx: MethodContext) -> Observation | None:
    """The observation a cluster answers with: a behaviour cluster's most reliable member,
    a text cluster's best parsed one."""
    if _behaviour_keyed(ctx):
        return _most_reliable(obs, answer, ctx)
    return _representative(obs, answer)


def fitted_setting(ctx: MethodContext | None) -> GuardrailSetting:
    """The guardrail setting the calibration's fit chose (``guardrail.fit``); a calibration
    without a fit is refused with one line (preflight refuses it first on every path)."""
    from df_ray.core.guardrail_fit import fit_from_dict

    cal = ctx.calibration if ctx is not None else None
    fit = getattr(cal, "guardrail_fit", None)
    if not fit:
        raise MethodArgsError("method 'darkforest': method_args.guardrail.fit is on, but the "
                              "run's calibration holds no guardrail fit; let the run fit one "
                              "(calibration.auto_fit) or pass a file fitted with it")
    return fit_from_dict(fit)[0]


def _behaviour_keyed(ctx: MethodContext) -> bool:
    return bool(getattr(ctx.task, "behaviour_keys", False))


def _most_reliable(obs: list[Observation], answer: str, ctx: MethodContext
                   ) -> Observation | None:
    """A behaviour cluster's program: its most reliable member's (highest alpha, then the
    earlier agent), a deterministic member whatever the programs' texts."""
    members = [o for o in obs if o.valid and o.answer == answer]
    if not members:
        return None
    cal = ctx.calibration
    return max(members, key=lambda o: (cal.alpha(o.agent) if cal is not None else 0.5,
                                       -obs.index(o)))


def _cluster_programs(obs: list[Observation], belief: Belief, ctx: MethodContext
                      ) -> dict[str, str] | None:
    """What the coordinator is shown of each behaviour cluster: its program (None: the
    answers themselves, as with text keys)."""
    if not _behaviour_keyed(ctx):
        return None
    out = {}
    for c in belief.clusters:
        rep = _most_reliable(obs, c.answer, ctx)
        if rep is not None and rep.extracted:
            out[c.answer] = rep.extracted
    return out
