"""``df-ray serve``: deploy, inspect and stop the shared engine service.

    df-ray serve --config jobs/configs/table1_math.yaml      # every backbone of a sweep
    df-ray serve --config cluster/serve_pool.yaml --only qwen25-7b
    df-ray serve --config pool.yaml --plugin my_engines   # an engine kind of a plugin
    df-ray serve status [--json]
    df-ray serve stop [--apps a,b]

``--plugin MODULE`` (repeatable) and a file's ``plugins:`` list are imported before the file
is validated, and on every replica before it builds its engine (``df_ray.plugins``).

``--address`` (or RAY_ADDRESS) names the cluster; without either the command joins the
cluster started on this machine (``ray start --head``) and fails if there is none, because a
service in a Ray that ends with the command would be gone at once. ``--local`` serves from an
embedded Ray in this process until Ctrl-C (a laptop).

The HTTP route of df_ray's engine server takes a bearer token: ``DF_RAY_SERVE_TOKEN``,
``--token-file`` / ``DF_RAY_SERVE_TOKEN_FILE``, else one generated for this deployment and
written to ``~/.config/df_ray/serve-token`` (df_ray.serving.auth). vLLM backbones get no HTTP
route unless ``--vllm-http`` (``ray.serve.llm``'s route checks no token).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from df_ray.config import ConfigError
from df_ray.plugins import PLUGIN_HELP


def add_serve_parser(sub) -> None:
    s = sub.add_parser("serve", help="deploy a config's backbones as a shared Ray Serve service "
                                     "(status, stop: manage it)")
    s.add_argument("action", nargs="?", choices=("deploy", "status", "stop"), default="deploy")
    s.add_argument("--config", help="a run/sweep config or a pool file (backbones: + serve:)")
    s.add_argument("--only", help="comma-separated backbone names to deploy (default: all)")
    s.add_argument("--apps", help="status/stop: comma-separated application names")
    s.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else the "
                                     "cluster started on this machine)")
    s.add_argument("--local", action="store_true",
                   help="serve from an embedded Ray in this process until Ctrl-C")
    s.add_argument("--http-host", help="where Serve's HTTP proxy listens (first deploy only)")
    s.add_argument("--http-port", type=int, help="Serve's HTTP port (first deploy only)")
    s.add_argument("--proxy-location", default="HeadOnly",
                   choices=("HeadOnly", "EveryNode", "Disabled"),
                   help="where Serve runs HTTP proxies (first deploy only; default HeadOnly)")
    s.add_argument("--max-replicas", type=int, help="autoscaling upper bound for every backbone")
    s.add_argument("--resources", help='custom Ray resources per replica, JSON, e.g. '
                                       '\'{"gpu_node": 1}\'')
    s.add_argument("--num-cpus", type=float, help="CPUs per replica (default: the engine's)")
    s.add_argument("--json", action="store_true", help="status: machine-readable output")
    s.add_argument("--token-file", help="a secret file (mode 0600) holding the HTTP route's "
                                        "bearer token (default: DF_RAY_SERVE_TOKEN, "
                                        "DF_RAY_SERVE_TOKEN_FILE, else a new token written "
                                        "to ~/.config/df_ray/serve-token)")
    s.add_argument("--plugin", action="append", metavar="MODULE", help=PLUGIN_HELP)
    s.add_argument("--vllm-http", action="store_true",
                   help="give vLLM backbones ray.serve.llm's HTTP route too (it checks no "
                        "token: only behind a proxy that does)")
    s.set_defaults(fn=cmd_serve)


def _names(v: str | None) -> list[str] | None:
    return [x.strip() for x in v.split(",") if x.strip()] if v else None


def cmd_serve(args: argparse.Namespace) -> int:
    from df_ray.serving import apps

    if args.action == "deploy":
        if not args.config:
            raise ConfigError("df-ray serve: --config FILE is required (a run/sweep config or "
                              "a pool file)")
        backbones, opts = apps.load_pool(args.config, args.plugin or ())
        only = _names(args.only)
        if only:
            missing = sorted(set(only) - set(backbones))
            if missing:
                raise ConfigError(f"--only: unknown backbones {missing}; defined: "
                                  f"{sorted(backbones)}")
            backbones = {n: backbones[n] for n in only}
        update = {}
        if args.max_replicas is not None:
            update["max_replicas"] = args.max_replicas
        if args.num_cpus is not None:
            update["num_cpus"] = args.num_cpus
        if args.resources:
            try:
                update["resources"] = {str(k): float(v)
                                       for k, v in json.loads(args.resources).items()}
            except (ValueError, AttributeError) as e:
                raise ConfigError(f"--resources: expected a JSON object of numbers ({e})") from None
        if update:
            opts = opts.model_validate({**opts.model_dump(), **update})
        from df_ray.serving.auth import TokenError, resolve_token, token_digest

        try:
            token, where = resolve_token(args.token_file)
        except TokenError as e:
            raise ConfigError(f"df-ray serve: {e}") from None
        apps.connect(args.address, local=args.local)
        try:
            apps.deploy(backbones, opts, http_host=args.http_host, http_port=args.http_port,
                        proxy_location=args.proxy_location, token_sha256=token_digest(token),
                        vllm_http=args.vllm_http)
        except RuntimeError as e:  # a backbone's replicas failed to start: its cause, no trace
            print(f"df-ray serve: {e}", file=sys.stderr)
            return 1
        print(f"HTTP route token: {where} (send Authorization: Bearer <token>)")
        print("use them with backbones of kind 'serve', e.g. "
              + ", ".join(f"{n}: {{kind: serve, model: {s.model}}}" for n, s in backbones.items()))
        if args.local:
            print("serving until Ctrl-C")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                apps.stop(list(backbones))
        return 0
    apps.connect(args.address)
    if args.action == "status":
        st = apps.status(_names(args.apps))
        if args.json:
            print(json.dumps(st, indent=1, default=str))
            return 0
        if not st:
            print("no df_ray engine applications on this cluster")
            return 0
        for name, e in st.items():
            print(f"{name}: {e['status']} ({e.get('engine', e['protocol'])}: {e.get('model')}) "
                  f"replicas running {e['running']}, started {e['replicas_started']}, route "
                  f"/{name}")
        return 0
    apps.stop(_names(args.apps))
    return 0
