"""Published and recorded tool outputs under tests/fixtures/outputs (see its README.md)."""

from pathlib import Path

OUTPUTS = Path(__file__).resolve().parents[2] / "fixtures" / "outputs"


def read(name: str) -> str:
    return (OUTPUTS / name).read_text()


def names(prefix: str) -> list[str]:
    return sorted(p.name for p in OUTPUTS.iterdir() if p.name.startswith(prefix))
