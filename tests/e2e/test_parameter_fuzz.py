"""Bad parameters for prefect.yaml's deployments, as an API caller or the UI's form sends them.

What the schema can say no to, the API says no to before any flow run exists
(``enforce_parameter_schema: true``; Prefect 3.9 answers 409 "Validation failed for field ...",
older servers 422). What passes the schema but names no usable blueprint, or a run id that is
no run id, fails the run with a pdlift ConfigError before anything is spent: no AWS call at
all (every botocore call is refused and counted while the flows run in this process), and no
lease or ledger in the state directory. What the API accepts and the flow cannot take ends the
run before any pdlift code.

A real ``prefect server`` with ``prefect deploy --all`` and no worker: the few flow runs the
API creates here are executed as a worker would, by ``prefect flow-run execute``.
"""

from __future__ import annotations

import json
import string
import subprocess
import sys
import urllib.error
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tasks.errors import ConfigError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEPLOYMENTS = [d["name"] for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]]
BLUEPRINT = REPO / "blueprints" / "sandbox-2p2d.yaml"
FUZZ = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))


class Deployed:
    def __init__(self, server, env: dict[str, str], state: Path, by_name: dict[str, dict]):
        self.server, self.env, self.state, self.by_name = server, env, state, by_name

    def create_run(self, name: str, parameters: dict) -> tuple[int, dict]:
        """(HTTP status, body) of POST /deployments/{id}/create_flow_run."""
        path = f"/deployments/{self.by_name[name]['id']}/create_flow_run"
        try:
            return self.server.http("POST", path, {"parameters": parameters})
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def schema(self, name: str) -> dict:
        return self.by_name[name]["parameter_openapi_schema"]

    def defaults(self, name: str) -> dict:
        return self.by_name[name]["parameters"] or {}


@pytest.fixture(scope="module")
def deployed(prefect_server, tmp_path_factory) -> Deployed:
    """prefect.yaml deployed as `scripts/demo` and an operator deploy it; no worker."""
    state = tmp_path_factory.mktemp("fuzz-state")
    env = {**prefect_server.env, "PDLIFT_REPO": str(REPO), "PDLIFT_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    subprocess.run([str(BIN / "prefect"), "work-pool", "create", "pdlift", "--type", "process"], env=env, cwd=REPO,
                   capture_output=True, timeout=120)
    out = subprocess.run([str(BIN / "prefect"), "--no-prompt", "deploy", "--all"], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    _, found = prefect_server.http("POST", "/deployments/filter", {"deployments": {"name": {"any_": DEPLOYMENTS}}})
    by_name = {d["name"]: d for d in found}
    assert set(by_name) == set(DEPLOYMENTS)
    assert all(d["enforce_parameter_schema"] for d in found)
    return Deployed(prefect_server, env, state, by_name)


def _refused(deployed: Deployed, name: str, parameters: dict) -> str:
    status, body = deployed.create_run(name, parameters)
    if status in (200, 201):  # accepted after all: take the run back before a worker could start it
        deployed.server.http("DELETE", f"/flow_runs/{body['id']}")
    # Prefect 3.9 answers a schema violation with 409 (older releases 422), saying which field.
    assert status in (409, 422) and "Validation failed for field" in json.dumps(body), \
        f"{name} {parameters!r}: HTTP {status} {body!r:.600}"
    return json.dumps(body)


# --- what the schema says no to: 409/422 ----------------------------------------------------------------

REFUSED = [
    ("migrate", {"params": {"stages": ["reserve", "teleport"]}}, "teleport"),
    ("migrate", {"params": {"skip": "weights"}}, "skip"),
    ("migrate", {"params": {"dry_run": "yes"}}, "dry_run"),
    ("migrate", {"params": {"approve_capacity_block_purchase": 1}}, "approve_capacity_block_purchase"),
    ("migrate", {"params": {"blueprint": 7}}, "blueprint"),
    ("migrate", {"params": "blueprints/sandbox-2p2d.yaml"}, "params"),
    ("redeploy", {"strategy": "sideways"}, "sideways"),
    ("redeploy", {"fleet_run_id": 3}, "fleet_run_id"),
    ("rollout", {"strategy": "yolo"}, "yolo"),
    ("rollout", {"engine_image": ["vllm/vllm-openai:v0.9"]}, "engine_image"),
    ("benchmark-gate", {"colour": "purple"}, "purple"),
    ("benchmark-gate", {"blueprint_path": None}, "blueprint_path"),
    ("benchmark-gate", {"in_place": "false"}, "in_place"),
    ("teardown", {"run_id": {"id": "r1"}}, "run_id"),
    ("sweep", {"apply": "true"}, "apply"),
    ("sweep", {"active_runs": "r1"}, "active_runs"),
    ("status", {"blueprint_path": 1}, "blueprint_path"),
]


@pytest.mark.parametrize("name, parameters, named", REFUSED, ids=[f"{n}-{named}" for n, _, named in REFUSED])
def test_a_value_outside_the_schema_is_refused(deployed, name, parameters, named):
    assert named in _refused(deployed, name, parameters)


def test_every_deployment_is_covered_and_its_own_defaults_fit_its_schema(deployed):
    assert {n for n, _, _ in REFUSED} == set(DEPLOYMENTS)
    # The control for the oracle below: the checker passes what each deployment itself sends.
    for name in DEPLOYMENTS:
        jsonschema.validate(deployed.defaults(name), deployed.schema(name))


def _resolve(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        schema = root["definitions"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _leaves(schema: dict, root: dict, path: tuple = ()) -> list[tuple[tuple, dict, bool]]:
    """(path, schema, nullable) of every property, through nested objects (migrate's params).

    nullable: Prefect's server lets null through where a property is optional and its schema
    has a type and no default (``preprocess_schema``: pydantic v1's schemas); the flow run then
    fails binding its parameters, before any pdlift code (the test at the end)."""
    out = []
    resolved = _resolve(schema, root)
    for key, sub in (resolved.get("properties") or {}).items():
        nullable = key not in resolved.get("required", []) and "type" in sub and "default" not in sub
        out.append((path + (key,), sub, nullable))
        if _resolve(sub, root).get("type") == "object":
            out.extend(_leaves(sub, root, path + (key,)))
    return out


_JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10, 10**12),
                               st.floats(allow_nan=False, allow_infinity=False),  # JSON has neither
                               st.text(string.printable, max_size=12), st.sampled_from(["purple", "yolo", ""])),
                     lambda inner: st.one_of(st.lists(inner, max_size=3),
                                             st.dictionaries(st.text(string.ascii_lowercase, max_size=6), inner,
                                                             max_size=2)), max_leaves=5)


@settings(FUZZ, max_examples=150)
@given(data=st.data(), name=st.sampled_from(DEPLOYMENTS))
def test_any_ill_typed_parameter_is_refused(deployed, data, name):
    """One property (top level or inside migrate's params) gets a value its schema excludes."""
    schema = deployed.schema(name)
    path, sub, nullable = data.draw(st.sampled_from(_leaves(schema, schema)), label="property")
    value = data.draw(_JSON, label="value")
    assume(not (nullable and value is None))
    assume(not jsonschema.Draft7Validator({**_resolve(sub, schema), "definitions": schema.get("definitions", {})})
           .is_valid(value))
    parameters: dict = {}
    node = parameters
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    _refused(deployed, name, parameters)


# --- what passes the schema but is no blueprint or no run id: ConfigError before any spend ----------

class SpendAttempted(Exception):
    pass


@pytest.fixture
def no_aws(monkeypatch, tmp_path, deployed):
    """Flows run in this process against the server; every AWS call is refused and counted; the
    state directory is a fresh one (a lease or ledger there means the run got as far as a run)."""
    import botocore.client

    from tests.fixtures.prefect_server import using_api

    calls: list[str] = []

    def refuse(self, operation, params):
        calls.append(operation)
        raise SpendAttempted(operation)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", refuse)
    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("PDLIFT_STATE_URI", raising=False)
    monkeypatch.chdir(REPO)  # the worker's pull step: flows run from the checkout
    with using_api(deployed.server.api):
        yield calls, tmp_path / "state"


def _flows():
    from flows.benchmark import benchmark_flow
    from flows.migrate import MigrateParams, migrate
    from flows.redeploy import redeploy
    from flows.rollout import rollout
    from flows.status import status_flow
    from flows.teardown import teardown_flow

    return {
        "migrate": lambda bp, run_id=None: migrate(MigrateParams(blueprint=bp, run_id=run_id, stages=["reserve"])),
        "migrate-dry-run": lambda bp, run_id=None: migrate(MigrateParams(blueprint=bp, run_id=run_id, dry_run=True)),
        "redeploy": lambda bp, run_id=None: redeploy(bp, run_id),
        "rollout": lambda bp, run_id=None: rollout(bp, run_id, engine_image="vllm/vllm-openai:v0.9.9"),
        "benchmark-gate": lambda bp, run_id=None: benchmark_flow(bp, run_id, colour="green"),
        "teardown": lambda bp, run_id=None: teardown_flow(bp, run_id),
        "status": lambda bp, run_id=None: status_flow(bp),
    }


FLOWS = sorted(["migrate", "migrate-dry-run", "redeploy", "rollout", "benchmark-gate", "teardown", "status"])


def _fails_before_spend(no_aws, run, *args) -> ConfigError:
    calls, state = no_aws
    with pytest.raises(ConfigError) as info:
        run(*args)
    assert calls == [], f"AWS was called before the ConfigError: {calls}"
    touched = [p for p in state.rglob("*") if p.is_file()] if state.exists() else []
    assert touched == [], f"the run got as far as its state: {touched}"
    return info.value


_SEGMENT = st.sampled_from(["..", ".", "", "blueprints", "nope", "etc", "hostname", "passwd", "sandbox-2p2d.yaml",
                            "missing.yaml", "pyproject.toml", "README.md", "tests", "prefect.yaml", "x y.yaml",
                            "blueprint\u00e9.yaml", "~"])
_VALID = {p.resolve() for p in (REPO / "blueprints").glob("*.yaml")}


@settings(FUZZ, max_examples=5)
@given(flow=st.sampled_from(FLOWS), parts=st.lists(_SEGMENT, min_size=1, max_size=6),
       absolute=st.booleans())
def test_a_path_that_is_no_blueprint_fails_the_run_with_a_config_error_before_any_spend(no_aws, flow, parts,
                                                                                        absolute):
    path = ("/" if absolute else "") + "/".join(parts)
    target = Path(path)
    assume(not (target.is_file() and target.resolve() in _VALID))  # blueprints/../blueprints/x.yaml is fine
    error = _fails_before_spend(no_aws, _flows()[flow], path)
    assert path in str(error) or str(target) in str(error), error


@settings(FUZZ, max_examples=3)
@given(flow=st.sampled_from(["migrate", "benchmark-gate", "redeploy"]),
       run_id=st.tuples(st.sampled_from(["", "r1/", "/"]), st.sampled_from(["..", "."]),
                        st.sampled_from(["/x", "/../../etc", "/"])).map("".join))
def test_a_run_id_that_walks_out_of_the_state_directory_fails_before_any_spend(no_aws, flow, run_id):
    error = _fails_before_spend(no_aws, _flows()[flow], str(BLUEPRINT), run_id)
    assert run_id in str(error), error


@pytest.mark.parametrize("run_id", ["my run", "a/b"])
def test_a_run_id_that_cannot_label_a_node_fails_before_any_spend(no_aws, run_id):
    _fails_before_spend(no_aws, _flows()["migrate"], str(BLUEPRINT), run_id)


def test_a_misspelt_migrate_option_is_refused(deployed):
    _refused(deployed, "migrate", {"params": {"dryrun": True}})


def test_a_path_with_a_nul_fails_with_a_config_error(no_aws):
    _fails_before_spend(no_aws, _flows()["status"], "blueprints/sandbox-2p2d.yaml\x00.txt")


@pytest.mark.timeout(60)
def test_a_device_as_blueprint_path_is_a_config_error_not_an_out_of_memory_kill():
    # In a child process with 1 GiB of address space: the product as it is dies of MemoryError there.
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from blueprints.loader import load_blueprint\nfrom tasks.errors import ConfigError\n"
            "try:\n    load_blueprint('/dev/zero')\nexcept ConfigError as e:\n    print('ConfigError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=50,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0 and out.stdout.startswith("ConfigError"), out.stderr[-500:]


# --- through the API and a worker's execution ------------------------------------------------------

def _execute(deployed: Deployed, flow_run_id: str) -> dict:
    """`prefect flow-run execute`, as the process worker runs a flow run; the finished run."""
    out = subprocess.run([str(BIN / "prefect"), "flow-run", "execute", flow_run_id], env=deployed.env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    finished = deployed.server.wait_terminal(flow_run_id, timeout_s=120)
    finished["output"] = out.stdout[-2000:] + out.stderr[-2000:]
    return finished


def _state_files(deployed: Deployed) -> list[Path]:
    return [p for p in deployed.state.rglob("*") if p.is_file()]


def test_a_run_the_api_accepts_with_a_path_out_of_the_checkout_fails_before_any_spend(deployed):
    """The schema cannot know that the path leads out of the checkout to a file that is no
    blueprint: the API creates the run, and the run, executed as a worker does, fails with the
    blueprint error, having written nothing to the state directory (no lease, no ledger)."""
    bad = "blueprints/../../../../../../etc/hostname"
    status, run = deployed.create_run("migrate", {"params": {"blueprint": bad, "stages": ["reserve"]}})
    assert status == 201, run
    finished = _execute(deployed, run["id"])
    assert finished["state_type"] == "FAILED", (finished["state"], finished["output"])
    message = finished["state"]["message"] or ""
    assert "BlueprintError" in message and bad in message, message
    assert _state_files(deployed) == [], "the run wrote a lease or a ledger"


@pytest.mark.parametrize("name, parameters", [
    # The flows' schemas allow unknown top-level names: Prefect cannot bind "colr" to
    # benchmark_flow. Were the name dropped instead, the run would judge the default's candidate.
    ("benchmark-gate", {"colr": "purple"}),
    # Prefect's server lets null through for skip (see _leaves); MigrateParams refuses it.
    ("migrate", {"params": {"skip": None, "stages": ["reserve"]}}),
], ids=["unknown-name", "null-skip"])
def test_a_run_the_api_accepts_with_parameters_the_flow_cannot_take_ends_before_its_code(deployed, name,
                                                                                          parameters):
    status, run = deployed.create_run(name, parameters)
    assert status == 201, run
    finished = _execute(deployed, run["id"])
    assert finished["state_type"] in ("FAILED", "CRASHED"), (finished["state"], finished["output"])
    assert _state_files(deployed) == [], "the flow ran: it took the run's lease"
