"""The blueprint: everything a migration needs to know, as one frozen, validated model.

A blueprint is YAML loaded with ``yaml.safe_load`` (see ``blueprints.loader``) into these
models. Every model forbids unknown keys, so a typo is an error with a hint, not a silently
ignored setting. Cross-field rules (parallelism fits the fleet, supported engine and
connector combinations) live in ``blueprints.rules`` so each can name the field it concerns.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Name = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")]
PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=False)


# --- model ---------------------------------------------------------------------------


class MlaAttention(Frozen):
    """Multi-head latent attention: the cache holds the compressed latent plus the rope key."""

    kind: Literal["mla"]
    layers: PositiveInt
    kv_lora_rank: PositiveInt
    qk_rope_head_dim: PositiveInt
    # DeepSeek Sparse Attention keeps an indexer key per token and layer (vLLM, SGLang cache it).
    indexer_head_dim: Annotated[int, Field(ge=0)] = 0


class GqaAttention(Frozen):
    """Grouped-query attention: the cache holds full K and V for each KV head."""

    kind: Literal["gqa"]
    layers: PositiveInt
    kv_heads: PositiveInt
    head_dim: PositiveInt


Attention = Annotated[Union[MlaAttention, GqaAttention], Field(discriminator="kind")]

DType = Literal["fp8", "bf16", "fp16", "fp32", "int4"]


class ModelSpec(Frozen):
    name: str = Field(min_length=1)
    revision: str = "main"
    total_params_b: PositiveFloat = Field(description="Total parameters, in billions.")
    active_params_b: PositiveFloat = Field(description="Parameters active per token, in billions.")
    dtype: DType
    weights_uri: str = Field(pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$")
    experts: Annotated[int, Field(ge=0)] = 0
    expert_params_b: Annotated[float, Field(ge=0)] | None = Field(
        default=None,
        description="Routed-expert parameters, in billions (sharded by EP); the rest is replicated.",
    )
    max_context: PositiveInt
    attention: Attention
    source: str = Field(min_length=1, description="Where the numbers above come from.")

    @model_validator(mode="after")
    def _active_within_total(self) -> "ModelSpec":
        if self.active_params_b > self.total_params_b:
            raise ValueError("active_params_b cannot exceed total_params_b")
        if self.expert_params_b is not None and self.expert_params_b > self.total_params_b:
            raise ValueError("expert_params_b cannot exceed total_params_b")
        return self


# --- AWS -----------------------------------------------------------------------------


class CapacitySpec(Frozen):
    mode: Literal["existing", "odcr", "capacity-block"]
    reservation_id: str | None = Field(default=None, pattern=r"^cr-[0-9a-f]{8,17}$")
    duration_hours: PositiveInt | None = None
    end_time: dt.datetime | None = None
    max_hourly_usd: PositiveFloat
    max_upfront_usd: Annotated[float, Field(ge=0)] = 0.0
    wait_ready_s: PositiveInt = 900
    retry_delays_s: list[Annotated[float, Field(ge=0, le=3600)]] = Field(
        default=[10, 60], max_length=10,
        description="Seconds before each new attempt of the reserve stage after a transient failure "
                    "(no capacity in any AZ, throttling): one entry per retry, [] for none.")


class EksSpec(Frozen):
    cluster: str = Field(min_length=1)
    service_cidr: str = "10.100.0.0/16"
    node_instance_profile: str = ""
    ami_ssm_parameter: str = (
        "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
    )
    join_timeout_s: PositiveInt = 900


class SshSpec(Frozen):
    user: str = Field(min_length=1)
    key_pair: str = Field(min_length=1)
    key_file: str = Field(min_length=1)
    key_passphrase_env: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The environment variable holding key_file's passphrase (an encrypted key); the "
                    "passphrase itself is never in the blueprint.")
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    known_hosts: str | None = None
    bastion: str | None = Field(default=None, description="user@host[:port] for ProxyJump.")
    connect_timeout_s: PositiveFloat = 10.0
    max_parallel: PositiveInt = 32


class AwsSpec(Frozen):
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    availability_zones: list[str] = Field(min_length=1)
    instance_type: str = Field(pattern=r"^[a-z0-9-]+\.[a-z0-9]+$")  # p6-b200.48xlarge has a hyphen
    capacity: CapacitySpec
    subnets: dict[str, str] = Field(description="Subnet id per availability zone.")
    security_group: str = Field(min_length=1)
    eks: EksSpec
    ssh: SshSpec
    hourly_price_usd: PositiveFloat | None = Field(
        default=None, description="Overrides the built-in price table for this instance type."
    )
    ttl_hours: PositiveInt = 72

    @field_validator("availability_zones")
    @classmethod
    def _unique_zones(cls, zones: list[str]) -> list[str]:
        if len(set(zones)) != len(zones):
            raise ValueError("availability zones must not repeat")
        return zones


# --- topology, engine, KV transfer -----------------------------------------------------


class PrefillSpec(Frozen):
    nodes: PositiveInt
    tp: PositiveInt
    pp: PositiveInt = 1


class DecodeSpec(Frozen):
    nodes: PositiveInt
    dp: PositiveInt = 1
    ep: PositiveInt = 1
    tp: PositiveInt = 1


class TopologySpec(Frozen):
    gpus_per_node: PositiveInt | None = Field(
        default=None, description="Defaults to the instance type's GPU count."
    )
    gpu_memory_gb: PositiveFloat | None = Field(
        default=None, description="Defaults to the instance type's GPU memory."
    )
    prefill: PrefillSpec
    decode: DecodeSpec


class EngineSpec(Frozen):
    name: Literal["vllm", "sglang"]
    image: str = Field(min_length=1)
    version: str = Field(min_length=1)
    kv_cache_dtype: Literal["auto", "fp8", "bf16", "fp16"] = "auto"
    block_size: PositiveInt = 64
    gpu_memory_utilization: Fraction = 0.90
    all2all_backend: Literal[
        "uccl_ep", "deepep_low_latency", "deepep_high_throughput", "deepep", "naive", "allgather_reducescatter"
    ] = "uccl_ep"
    prefill_port: Annotated[int, Field(ge=1, le=65535)] = 8000
    decode_port: Annotated[int, Field(ge=1, le=65535)] = 8200
    router_port: Annotated[int, Field(ge=1, le=65535)] = 8080
    bootstrap_port: Annotated[int, Field(ge=1, le=65535)] = 8998
    extra_args: list[str] = Field(default_factory=list)


class KvTransferSpec(Frozen):
    connector: Literal["mooncake", "nixl"]
    protocol: Literal["efa", "tcp"] = "efa"
    nixl_mode: Literal["pull", "push"] = Field(
        default="push", description="vLLM only: NixlConnector (pull) or NixlPushConnector (push)."
    )
    usable_bandwidth_gbps: PositiveFloat = Field(
        default=2400.0,
        description="Usable fabric bandwidth per node for KV transfer, Gbit/s (3.2 Tbps line rate).",
    )


# --- validation, staging, benchmark, gate ------------------------------------------------


class FabricSpec(Frozen):
    efa_devices: PositiveInt = 16
    gpus: PositiveInt = 8
    single_node_allreduce_busbw_gbs: PositiveFloat = 431.0
    pair_allreduce_busbw_gbs: PositiveFloat = 300.0
    pair_alltoall_busbw_gbs: PositiveFloat = 60.0
    pair_sendrecv_busbw_gbs: PositiveFloat = 40.0
    judge_size_bytes: PositiveInt = 1 << 30
    max_pingpong_latency_us: PositiveFloat = 50.0
    outlier_mad_threshold: PositiveFloat = 3.5
    test_timeout_s: PositiveInt = 600
    replace_attempts: Annotated[int, Field(ge=0)] = 2
    # Per-NIC loopbacks at once on one node: one SSH session each, so at most sshd's default
    # MaxSessions (10). fi_pingpong busy-polls its completion queue, so each one holds a core
    # while it runs: fewer where the nodes' cores are shared (the sandbox: four nodes, two cores).
    loopbacks_per_node: Annotated[int, Field(ge=1, le=10)] = 8


class StagingSpec(Frozen):
    local_path: str = Field(pattern=r"^/")
    concurrency: PositiveInt = 64
    part_size_mb: PositiveInt = 64
    free_space_margin: Annotated[float, Field(ge=0)] = 0.05
    max_retries: Annotated[int, Field(ge=0)] = 8


# A TTFT probe's completion: at least 2 tokens, because with PD disaggregation a 1-token request
# may be answered by the prefill engine alone, its KV never sent to decode, so its TTFT would not
# be the path production requests take (the benchmark checks the transfers happened); at most 16,
# since past that the probe's point is lost (a few tokens already give about 11x the TTFT samples
# per minute at 3k-token prompts, 2-3x at 60k-120k).
PROBE_MIN_TOKENS, PROBE_MAX_TOKENS = 2, 16


class Scenario(Frozen):
    name: Name
    input_tokens: PositiveInt
    output_tokens: PositiveInt
    concurrencies: list[PositiveInt] = Field(min_length=1)
    duration_s: PositiveFloat
    max_requests: PositiveInt = 2000
    warmup_requests: Annotated[int, Field(ge=0)] = 4
    # A TTFT probe: a point whose requests ask for a tiny completion, so many more TTFT samples fit
    # in its minutes; the gate judges only its TTFT (and errors, samples), never TPOT or throughput,
    # and only once the engines counted at least as many KV transfers as requests during it.
    ttft_probe: bool = False

    @model_validator(mode="after")
    def _probe_output(self) -> "Scenario":
        n = self.output_tokens
        if self.ttft_probe and n < PROBE_MIN_TOKENS:
            raise ValueError(f"output_tokens: a TTFT probe needs at least {PROBE_MIN_TOKENS} output tokens, got {n}: "
                             "with PD disaggregation a 1-token request may be answered by the prefill engine alone, "
                             "so no KV reaches decode and its TTFT is not production's; set output_tokens: 2")
        if self.ttft_probe and n > PROBE_MAX_TOKENS:
            raise ValueError(f"output_tokens: a TTFT probe asks for at most {PROBE_MAX_TOKENS} output tokens, got "
                             f"{n} (its point is many short requests); set output_tokens between {PROBE_MIN_TOKENS} "
                             f"and {PROBE_MAX_TOKENS}, or remove ttft_probe to gate this scenario's TPOT too")
        return self


class SloSpec(Frozen):
    ttft_ms: PositiveFloat | None = None
    tpot_ms: PositiveFloat | None = None
    e2e_ms: PositiveFloat | None = None


class BaselineCv(Frozen):
    """The spread behind published figures, stated (a recorded baseline carries its samples instead):
    the coefficient of variation of one request's TTFT and TPOT at the published points, and of a
    run-level figure (a throughput) between runs. ``pdlift plan`` shows what they cost the gate."""

    ttft: PositiveFloat
    tpot: PositiveFloat
    e2e: PositiveFloat | None = None
    run: PositiveFloat | None = None   # None: a run-level rule against these figures is not judged


class BaselinePoint(Frozen):
    concurrency: PositiveInt
    # How many requests the published means were drawn from: with ``BaselineSpec.cv`` it gives the
    # figure its uncertainty (a mean of 57 requests is not exact, and a gate that held it exact
    # would PASS a candidate at the margin more often than alpha).
    completed: PositiveInt = Field(description="Requests the published figures were measured on.")
    # This point's spread where it differs from the baseline's ``cv`` (long prompts queue less).
    cv: BaselineCv | None = None
    ttft_ms_mean: PositiveFloat
    tpot_ms_mean: PositiveFloat
    ttft_ms_p99: PositiveFloat | None = None
    tpot_ms_p99: PositiveFloat | None = None
    output_tokens_per_s: PositiveFloat | None = None


# The environment variable names notifications.secret_values redacts: an endpoint's key must be
# in one of them, so it never reaches a log, an event or an error (tasks/planning/notifications.py).
SECRET_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*(SECRET|TOKEN|PASSWORD|CREDENTIAL|API_KEY|ACCESS_KEY|AUTH)[A-Za-z0-9_]*$"


class BaselineEndpoint(Frozen):
    """The service being replaced, still serving until the cutover: an OpenAI-compatible root
    URL that a paired gate (``gate.paired``) measures beside the candidate, under one request
    stream. Its key comes from the environment variable ``api_key_env`` (never the blueprint)."""

    url: str = Field(pattern=r"^https?://[^\s@]+$", description="The root, e.g. https://llm.internal:8000 "
                     "(no credentials in it: they go in api_key_env).")
    api_key_env: str | None = Field(default=None, pattern=SECRET_ENV_NAME, description=(
        "The environment variable holding its API key (sent as a Bearer token); its name must say it holds "
        "a secret (…API_KEY, …TOKEN, …SECRET) so pdlift redacts it everywhere."))


class BaselineSpec(Frozen):
    source: str = Field(min_length=1)
    endpoint: BaselineEndpoint | None = None
    cv: BaselineCv | None = Field(default=None, description="Per-request CV of TTFT and TPOT behind the "
                                  "published figures (and between runs of a throughput): their uncertainty.")

    @model_validator(mode="after")
    def _figures_carry_their_spread(self) -> "BaselineSpec":
        if any(self.scenarios.values()) and self.cv is None:
            raise ValueError("cv: published figures need their spread, e.g. cv: {ttft: 0.2, tpot: 0.05} (the "
                             "coefficient of variation of one request's TTFT and TPOT in the run they came "
                             "from); without it the gate would hold them exact")
        return self
    scenarios: dict[str, list[BaselinePoint]] = Field(default_factory=dict)


Metric = Literal[
    "ttft_mean", "ttft_p50", "ttft_p90", "ttft_p99",
    "tpot_mean", "tpot_p50", "tpot_p90", "tpot_p99",
    "itl_mean", "e2e_mean", "e2e_p99",
    "output_tokens_per_s", "request_throughput", "goodput", "error_rate",
    # What the engines and the GPUs say about a load point (tasks/planning/server_figures.py):
    "prefill_queue_ms_mean", "decode_queue_ms_mean", "kv_transfer_ms_mean", "kv_transfer_mib_mean",
    "spec_acceptance", "prefill_gpu_util", "decode_gpu_util",
]
# Server-side figures explain a latency change more than they define one: a rule on one is
# report-only unless it says otherwise.
SERVER_METRICS: tuple[str, ...] = (
    "prefill_queue_ms_mean", "decode_queue_ms_mean", "kv_transfer_ms_mean", "kv_transfer_mib_mean",
    "spec_acceptance", "prefill_gpu_util", "decode_gpu_util",
)


class GateRule(Frozen):
    metric: Metric
    max_ratio: PositiveFloat | None = Field(
        default=None, description="Candidate / baseline must stay at or under this (latencies)."
    )
    min_ratio: PositiveFloat | None = Field(
        default=None, description="Candidate / baseline must stay at or over this (throughputs)."
    )
    critical: bool = False
    report_only: bool = False

    @model_validator(mode="before")
    @classmethod
    def _server_figures_report_only(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("metric") in SERVER_METRICS and "report_only" not in data:
            return {**data, "report_only": True}
        return data


class GpuExporterSpec(Frozen):
    """Where the cluster's DCGM exporter runs (the GPU operator's defaults); none found: no GPU figures."""

    namespace: Name = "gpu-operator"
    selector: dict[str, str] = Field(default_factory=lambda: {"app": "nvidia-dcgm-exporter"})
    port: Annotated[int, Field(ge=1, le=65535)] = 9400


class ServerMetricsSpec(Frozen):
    """The engines' and GPUs' Prometheus endpoints, read before, during and after each load point."""

    enabled: bool = True
    # Gauges (GPU utilisation, SGLang's last-transfer figures) are sampled this often during a point.
    interval_s: Annotated[float, Field(ge=0.5, le=300)] = 5.0
    gpu_exporter: GpuExporterSpec = GpuExporterSpec()


Family = Literal["ttft", "tpot"]


class PairedGateSpec(Frozen):
    """The paired gate (``tasks.planning.gate_paired``, ``tasks.stages.benchmark_paired``): when both
    colours are live (a fleet swap; the migration against ``baseline.endpoint``) each point sends
    one request stream to both at once; its measured time is split into windows and the gate reads
    each family's ratio per window, its standard error by the jackknife over windows, so drift
    common to both colours cancels. Each scenario's ``duration_s`` is its point's load in all,
    measured in ``looks`` rounds; after each round every check is judged (group-sequential)."""

    # A window shorter than about 3 requests' end-to-end time shares batches with its neighbours
    # and the jackknife reads too little spread (gate_sim: 20 s windows of 28 s requests passed a
    # candidate at the margin 7.7% of the time at 5%): windows are widened to 3 request times.
    window_s: PositiveFloat = 60.0
    looks: Annotated[int, Field(ge=1, le=12)] = 3
    spending: Annotated[float, Field(ge=0.5, le=6)] = 2.0
    # The contracts: each family pooled over every point, PASS needing its upper bound within this.
    contracts: dict[Family, Annotated[float, Field(gt=1.0)]] = Field(
        default_factory=lambda: {"ttft": 1.05, "tpot": 1.05}, min_length=1)
    # A guard per scenario (one input length) and family, at this wider margin; None: no guards.
    guard: Annotated[float, Field(gt=1.0)] | None = 1.20
    # Fixed before the run, per family, per "scenario@concurrency": the weight of a point in its
    # contract (inverse projected variance; `pdlift plan` prints it). Unnamed points weigh 1.
    weights: dict[Family, dict[str, PositiveFloat]] = Field(default_factory=dict)


class GateSpec(Frozen):
    slo: SloSpec = SloSpec()
    rules: list[GateRule] = Field(min_length=1)
    # Counted in independent time blocks (as many consecutive requests as the point's concurrency,
    # which share batch steps): 1,000 requests at concurrency 64 are 15 blocks, not 1,000 samples.
    min_samples: PositiveInt = 12
    max_error_rate: Annotated[float, Field(ge=0, le=1)] = 0.01
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = 0.95
    # What a candidate not shown non-inferior at the end of its budget gets: rolled back with the
    # reason and the figures (a decision, as a schedule or an API rollout expects), or held for a
    # person's approval (promotion.approval_timeout_s).
    undecided: Literal["rollback", "ask"] = "rollback"
    # `pdlift validate` refuses a gate whose rules `pdlift plan` projects it cannot decide within
    # its load (tasks/planning/gate_sizing.py); true takes that knowingly: a warning instead.
    allow_undecidable: bool = False
    # Both colours measured at once where both are live (see PairedGateSpec); None: one after the other.
    paired: PairedGateSpec | None = None


class SequentialSpec(Frozen):
    """Measure each point in rounds and stop it once the gate can decide
    (``tasks.planning.gate_sequential``; docs/sources.md#sequential-gate)."""

    # Looks per point: a round is the scenario's duration_s (the point's cap) divided by this.
    rounds: Annotated[int, Field(ge=2, le=64)] = 6
    # rho of the alpha spending function alpha * t^rho: higher spends less early.
    spending: Annotated[float, Field(ge=0.5, le=6)] = 2.0
    # rounds: round 1 of every point, then round 2...; points: each point until it is decided.
    order: Literal["rounds", "points"] = "points"


class BenchmarkSpec(Frozen):
    scenarios: list[Scenario] = Field(min_length=1)
    repeats: PositiveInt = 3
    mode: Literal["concurrency", "poisson"] = "concurrency"
    server_metrics: ServerMetricsSpec = ServerMetricsSpec()
    sequential: SequentialSpec | None = None
    # All load of one benchmark, minutes; a round that would go past it is not started.
    budget_minutes: PositiveFloat | None = None

    @model_validator(mode="after")
    def _rounds_not_repeats(self) -> "BenchmarkSpec":
        if self.sequential is not None and "repeats" in self.model_fields_set and self.repeats != 1:
            raise ValueError("repeats: with benchmark.sequential each point runs in rounds (its repeats), "
                             "so benchmark.repeats does not apply; remove it or set sequential.rounds")
        return self

    @field_validator("scenarios")
    @classmethod
    def _unique_names(cls, scenarios: list[Scenario]) -> list[Scenario]:
        names = [s.name for s in scenarios]
        if len(set(names)) != len(names):
            raise ValueError("scenario names must be unique")
        return scenarios


Strategy = Literal["auto", "blue-green", "recreate", "rolling", "fleet"]


class PromotionSpec(Frozen):
    """How a redeploy or rollout replaces the live colour (tasks/planning/strategy.py):
    blue-green beside it when the fleet has room; recreate on the same nodes (downtime);
    rolling by role, decode first (a role's downtime, KV-compatible changes only); fleet on a
    second fleet (zero downtime, extra fleet-hours); auto picks the first that fits."""

    strategy: Strategy = "auto"
    allow_downtime: bool = Field(default=False, description="auto may pick recreate (the whole stack down "
                                                             "for a drain, a cold start and a canary)")
    allow_role_downtime: bool = Field(default=False, description="auto may pick rolling (the P->D path "
                                                                  "down while one role restarts)")
    approval_timeout_s: PositiveInt = 3600
    # After a promotion the replaced colour stays up this long (instant switch-back), then is deleted.
    keep_previous_colour_s: Annotated[int, Field(ge=0, le=86400)] = 0


class StateSpec(Frozen):
    """Where run state lives (the ledger, leases, benchmark and fabric records, baselines, persisted
    results): an S3 prefix every worker can reach, or (unset) PDLIFT_STATE_DIR / ./.pdlift on the
    worker. PDLIFT_STATE_URI, where set, overrides it (tasks/wiring.py)."""

    uri: str | None = Field(default=None, pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$",
                            description="s3://bucket/prefix of the shared state store")


class SandboxSpec(Frozen):
    """Only in sandbox blueprints: where the local stand-ins listen."""

    ssh_port: Annotated[int, Field(ge=1, le=65535)] = 2222
    node_address_base: str = Field(default="127.0.0.11", pattern=r"^127\.\d+\.\d+\.\d+$")
    model_size_mb: PositiveInt = 256


class Blueprint(Frozen):
    api_version: Literal["pdlift/v1"] = Field(alias="apiVersion")
    name: Name = Field(description="Deployment name; tags and namespaces derive from it.")
    description: str = ""
    model: ModelSpec
    aws: AwsSpec
    topology: TopologySpec
    engine: EngineSpec
    kv_transfer: KvTransferSpec
    fabric: FabricSpec = FabricSpec()
    staging: StagingSpec
    benchmark: BenchmarkSpec
    baseline: BaselineSpec
    gate: GateSpec
    promotion: PromotionSpec = PromotionSpec()
    state: StateSpec = StateSpec()
    expected_run_hours: PositiveFloat = Field(
        default=6.0, description="The target wall time of one migration run: `pdlift plan` warns when its "
                                 "projection (tasks/planning/timeline.py) is longer."
    )
    sandbox: SandboxSpec | None = None

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @property
    def node_count(self) -> int:
        return self.topology.prefill.nodes + self.topology.decode.nodes
