"""The errors df_ray's layers raise to each other, below every layer that raises them.

Engines, serving, tasks and the pipeline raise these without importing the layers above
them (``df_ray.config`` imports the engines; an engine that imported ``df_ray.config`` for
its error class closed a circle at run time). Each keeps its old home as an alias:
``df_ray.config.ConfigError`` and ``df_ray.pipeline.engine_health.EngineFailure`` are these.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration is invalid; the message names the field and what is allowed."""


class UnknownNameError(KeyError):
    """No registered thing of that name (a method, benchmark, answer kind, pool model,
    composition); the message lists the registered ones. ``str()`` is the message itself,
    not KeyError's repr of it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RegistryError(ValueError):
    """A name registered twice (a method, benchmark or engine kind): the message names it and
    what holds it; ``replace=True`` replaces on purpose."""


class EngineFailure(RuntimeError):
    """A backbone's replica cannot serve: the job stops. ``str()`` is the one-line message.

    Raised by the engine pool (a replica that cannot start, crash-loops, or whose token
    counts run out of retries) and by the in-process engine router (an engine whose token
    count raises); the evaluation driver never turns it into one sample's error row."""

    def __init__(self, backbone: str, model: str, replica: int, node: str, cause: str,
                 detail: str = "") -> None:
        self.backbone, self.model, self.replica = backbone, model, replica
        self.node, self.cause, self.detail = node, cause, detail
        msg = (f"engine {backbone!r} (model {model}), replica {replica} on node {node}: "
               f"{cause}")
        super().__init__(msg + (f"\n{detail}" if detail else ""))

    def __reduce__(self):  # crosses process boundaries whole (a stage's token count raises it)
        return (EngineFailure, (self.backbone, self.model, self.replica, self.node, self.cause,
                                self.detail))

    @classmethod
    def found_in(cls, e: BaseException | None) -> EngineFailure | None:
        """The EngineFailure ``e`` carries (a stage's exception wrapped by Ray), as itself."""
        seen = 0
        while e is not None and seen < 20:
            if isinstance(e, cls):
                return cls(e.backbone, e.model, e.replica, e.node, e.cause, e.detail)
            e = getattr(e, "cause", None) or e.__cause__ or e.__context__
            seen += 1
        return None



def register_name(registry: dict[str, str], name: str, target: str, what: str, *,
                  replace: bool = False) -> None:
    """``registry[name] = target`` (a registry line: name -> "module:Class" or "module"),
    refusing a name already taken by another target unless ``replace`` (as Inspect, lm-eval
    and Ray refuse): a plugin never silently replaces a method, benchmark, engine kind or
    answer kind. Registering the same target again is a no-op."""
    if not isinstance(name, str) or not name.strip():
        raise RegistryError(f"a {what} name must be a non-empty string, not {name!r}")
    held = registry.get(name)
    if held is not None and held != target and not replace:
        raise RegistryError(f"{what} {name!r} is already registered ({held}); choose another "
                            f"name, or pass replace=True to replace it on purpose")
    registry[name] = target
