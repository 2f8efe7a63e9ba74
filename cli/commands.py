"""Registry of stage subcommands beyond validate and plan.

Each entry is ``register(subparsers, handlers)``; a stage module adds its commands by appending
its registrar here, so `cli/main.py` stays a table of contents.
"""

from __future__ import annotations

from cli import bench_cmd, capacity_cmd, deploy_cmd, eks_token_cmd, fabric_cmd, flows_cmd, weights_cmd

REGISTRARS = [flows_cmd.register, eks_token_cmd.register, capacity_cmd.register, weights_cmd.register, deploy_cmd.register,
              fabric_cmd.register, bench_cmd.register]
