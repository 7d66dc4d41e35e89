"""The shared engine service: a config's backbones as long-lived Ray Serve applications.

``df-ray serve --config <file>`` deploys one Serve application per backbone (named after the
backbone): vLLM backbones through ``ray.serve.llm`` (an OpenAI-compatible app whose
``LLMServer`` deployment has one replica per GPU and autoscaling bounds), embedded and
scripted ones through :class:`~df_ray.serving.deployment.EngineServer`, a deployment around
df_ray's own engine interface. A sweep whose backbone is ``{kind: serve}`` calls that
application through a Serve ``DeploymentHandle`` (no HTTP): requests from every job merge into
the same engine batches, while the cache, token accounting and retries stay in the job's
stages exactly as with job-owned engines.

Ray and Serve are imported lazily: importing this package costs nothing.
"""

from __future__ import annotations

#: The deployment name of df_ray's own engine server inside each application.
ENGINE_DEPLOYMENT = "EngineServer"
#: The prefix ``ray.serve.llm`` gives its vLLM server deployments.
LLM_DEPLOYMENT_PREFIX = "LLMServer:"
