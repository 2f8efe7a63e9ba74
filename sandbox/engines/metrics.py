"""A tiny Prometheus registry rendering the text exposition format (version 0.0.4)."""

from __future__ import annotations

import bisect
from collections.abc import Callable

# vLLM's TTFT buckets; good enough for every latency histogram here.
LATENCY_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)


# vLLM's buckets for bytes per NIXL transfer: 2 kB up to 16 GB.
BYTE_BUCKETS = tuple(float(2 ** e) for e in range(11, 35))


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                    for k, v in sorted(labels.items()))
    return "{" + body + "}"


def _num(value: float) -> str:
    return repr(float(value)) if value != int(value) else f"{int(value)}.0"


class Histogram:
    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value


class Registry:
    def __init__(self, base_labels: dict[str, str] | None = None):
        self.base = dict(base_labels or {})
        self._help: dict[str, tuple[str, str]] = {}
        self._counters: dict[tuple[str, tuple], float] = {}
        # name -> (buckets, labelled, {labels: series}); an unlabelled histogram has its one
        # series from the start, a labelled one a series per label set once observed (as
        # prometheus_client renders them).
        self._histograms: dict[str, tuple[tuple[float, ...], bool, dict[tuple, Histogram]]] = {}
        self._gauges: dict[str, Callable[[], list[tuple[dict[str, str], float]]]] = {}

    def counter(self, name: str, help_text: str) -> None:
        self._help[name] = ("counter", help_text)

    def gauge(self, name: str, help_text: str, read: Callable[[], list[tuple[dict[str, str], float]]]) -> None:
        self._help[name] = ("gauge", help_text)
        self._gauges[name] = read

    def histogram(self, name: str, help_text: str, buckets: tuple[float, ...] = LATENCY_BUCKETS,
                  labelled: bool = False) -> None:
        self._help[name] = ("histogram", help_text)
        self._histograms[name] = (buckets, labelled, {} if labelled else {(): Histogram(buckets)})

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        self._counters[key] = self._counters.get(key, 0.0) + value

    def observe(self, name: str, value: float, **labels: str) -> None:
        buckets, _, series = self._histograms[name]
        key = tuple(sorted(labels.items()))
        if key not in series:
            series[key] = Histogram(buckets)
        series[key].observe(value)

    def value(self, name: str, **labels: str) -> float:
        return self._counters.get((name, tuple(sorted(labels.items()))), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        for name, (kind, help_text) in self._help.items():
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            if kind == "counter":
                for (cname, labels), value in self._counters.items():
                    if cname == name:
                        lines.append(f"{name}{_labels({**self.base, **dict(labels)})} {_num(value)}")
            elif kind == "gauge":
                for labels, value in self._gauges[name]():
                    lines.append(f"{name}{_labels({**self.base, **labels})} {_num(value)}")
            else:
                for key, hist in self._histograms[name][2].items():
                    labels = {**self.base, **dict(key)}
                    cumulative = 0
                    for bound, count in zip(hist.buckets, hist.counts):
                        cumulative += count
                        lines.append(f"{name}_bucket{_labels({**labels, 'le': _num(bound)})} {cumulative}.0")
                    cumulative += hist.counts[-1]
                    lines.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {cumulative}.0")
                    lines.append(f"{name}_count{_labels(labels)} {cumulative}.0")
                    lines.append(f"{name}_sum{_labels(labels)} {_num(hist.sum)}")
        return "\n".join(lines) + "\n"
