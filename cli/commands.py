"""The subcommands, one module per stage: each module's ``register(subparsers, handlers)`` adds its
own, in the order ``pdlift --help`` lists them (the pipeline's order)."""

from __future__ import annotations

from cli import aws, benchmark, deploy, fabric, launch, notify, plan, redeploy, reserve, state, status, teardown, weights

REGISTRARS = [plan.register, reserve.register, launch.register, fabric.register, weights.register,
              deploy.register, benchmark.register, redeploy.register, status.register, teardown.register, state.register,
              notify.register, aws.register]
