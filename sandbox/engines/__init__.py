"""Simulated vLLM / SGLang engines, PD routers and the Mooncake master (see README.md here)."""
