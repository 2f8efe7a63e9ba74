"""The plan flow publishes the same plan as a markdown artifact on its run."""

import asyncio
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.usefixtures("prefect_harness")
def test_plan_flow_publishes_the_plan_as_a_markdown_artifact():
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.plan import plan_flow

    plan = plan_flow(str(ROOT / "blueprints" / "sandbox-2p2d.yaml"))
    assert plan.blueprint == "sandbox-2p2d"

    async def artifacts():
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["plan-sandbox-2p2d"])))

    found = asyncio.run(artifacts())
    assert found, "no plan artifact was created"
    assert found[0].type == "markdown"
    assert "Memory fit per GPU" in found[0].data and "Warnings" in found[0].data


@pytest.mark.usefixtures("prefect_harness")
def test_plan_flow_fails_the_run_with_the_blueprint_problem(tmp_path):
    from flows.plan import plan_flow
    from tasks.errors import ConfigError

    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "blueprints" / "sandbox-2p2d.yaml").read_text().replace("dtype: fp8", "dtype: fp7"))
    with pytest.raises(ConfigError, match="model.dtype"):
        plan_flow(str(bad))
