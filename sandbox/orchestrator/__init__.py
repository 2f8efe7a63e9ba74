"""Start, stop and inspect the sandbox's components (`scripts/sandbox up | down | status`).

For tests and tools: `Sandbox(state_dir).start([...])`, `.env()`, `.stop()`; the component list
is `components.COMPONENTS`.
"""
