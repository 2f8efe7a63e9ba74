"""A synthetic MLA MoE checkpoint for the sandbox: real safetensors shards of random weights.

The layout follows the blueprint's model (GLM-5-style: MLA attention with a DSA indexer, dense
first layers then routed + shared experts, FP8 block-quantised weights with their F32
`weight_scale_inv`), so config.json carries the blueprint's layer count, kv_lora_rank,
qk_rope_head_dim, indexer head dim, expert count and context length. Only the widths (hidden
size, expert width, heads) shrink so the whole checkpoint has the requested size.

Shards are generated while they are read (a header, then 1 MiB blocks of a seeded PRNG), so a
multi-GB model never sits in memory, and the same seed gives the same bytes. Uploads go through
boto3's classic transfer manager (the CRT client ignores endpoint_url) and skip objects that
already exist with the right size and seed.

    python -m sandbox.model --endpoint http://127.0.0.1:PORT --model-size-mb 4096
    python -m sandbox.model --out-dir /tmp/model --model-size-mb 64
"""

from sandbox.model.files import SEED_KEY, ModelFile, Shard, ShardStream, directory_files, model_files
from sandbox.model.layout import Dims, ModelShape, Tensor, plan_dims
from sandbox.model.upload import DEFAULT_URI, UploadReport, split_uri, upload_model, write_model

__all__ = ["DEFAULT_URI", "SEED_KEY", "Dims", "ModelFile", "ModelShape", "Shard", "ShardStream",
           "Tensor", "UploadReport", "directory_files", "model_files", "plan_dims", "split_uri", "upload_model",
           "write_model"]
