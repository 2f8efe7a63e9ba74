"""Thin Prefect tasks for the plan stage: load the blueprint, plan, publish the artifact."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from blueprints.loader import load_blueprint
from blueprints.schema import Blueprint
from tasks.planning.plan import Plan, make_plan
from tasks.planning.plan_render import render


@task(cache_policy=NO_CACHE)
def load(path: str, to_release: bool = False) -> Blueprint:
    """Read and validate the blueprint (a ConfigError fails the run with the located problem);
    ``to_release``: for a teardown, which only needs it to name what the deployment made."""
    return load_blueprint(path, to_release=to_release)


@task(cache_policy=NO_CACHE)
def plan(blueprint: Blueprint) -> Plan:
    return make_plan(blueprint)


@task(cache_policy=NO_CACHE)
def publish_plan(the_plan: Plan) -> str:
    """The plan as a markdown artifact keyed by deployment name; returns the markdown."""
    markdown = render(the_plan, markdown=True)
    create_markdown_artifact(markdown=markdown, key=f"plan-{the_plan.blueprint}",
                             description=f"pdlift plan for {the_plan.blueprint}")
    return markdown
