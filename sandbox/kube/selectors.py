"""Label selectors (equality- and set-based, string and object form) and field selectors."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandbox.kube.errors import bad_request

_SET_EXPR = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_EXPR = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # In NotIn Exists DoesNotExist Gt Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: dict) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "In":
            return present and value in self.values
        if self.op == "NotIn":
            return not present or value not in self.values
        if self.op == "Exists":
            return present
        if self.op == "DoesNotExist":
            return not present
        if self.op in ("Gt", "Lt") and present:
            try:
                a, b = int(value), int(self.values[0])
            except (ValueError, IndexError):
                return False
            return a > b if self.op == "Gt" else a < b
        return False


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (``a in (x,y),b``)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (s.strip() for s in parts) if p]


class LabelSelector:
    def __init__(self, requirements: list[Requirement], match_nothing: bool = False):
        self.requirements = requirements
        self.match_nothing = match_nothing

    def matches(self, labels: dict | None) -> bool:
        if self.match_nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @classmethod
    def parse(cls, text: str | None) -> "LabelSelector":
        reqs = []
        for part in _split_top_level(text or ""):
            m = _EQ_EXPR.match(part)
            if m:
                key, op, value = m.groups()
                reqs.append(Requirement(key, "NotIn" if op == "!=" else "In", (value,)))
                continue
            m = _SET_EXPR.match(part)
            if not m:
                raise bad_request(f"unable to parse requirement: {part!r}")
            neg, key, op, values = m.groups()
            if op:
                vals = tuple(v.strip() for v in values.split(",") if v.strip())
                reqs.append(Requirement(key, "In" if op == "in" else "NotIn", vals))
            else:
                reqs.append(Requirement(key, "DoesNotExist" if neg else "Exists"))
        return cls(reqs)

    @classmethod
    def from_object(cls, selector: dict | None, empty_matches_all: bool = True) -> "LabelSelector":
        """metav1.LabelSelector: matchLabels AND matchExpressions.

        A null selector matches nothing; an empty one matches everything (for workloads).
        """
        if selector is None:
            return cls([], match_nothing=True)
        reqs = [Requirement(k, "In", (str(v),))
                for k, v in (selector.get("matchLabels") or {}).items()]
        for e in selector.get("matchExpressions") or []:
            reqs.append(Requirement(e.get("key", ""), e.get("operator", "In"),
                                    tuple(str(v) for v in e.get("values") or [])))
        if not reqs and not empty_matches_all:
            return cls([], match_nothing=True)
        return cls(reqs)

    @classmethod
    def from_map(cls, labels: dict | None) -> "LabelSelector":
        """A Service or nodeSelector style map: every pair must match; empty matches all."""
        return cls([Requirement(k, "In", (str(v),)) for k, v in (labels or {}).items()])


def get_path(obj: dict, dotted: str):
    node = obj
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


class FieldSelector:
    """``metadata.name=x,spec.nodeName!=y``: dotted paths compared as strings."""

    def __init__(self, terms: list[tuple[str, bool, str]]):
        self.terms = terms

    @classmethod
    def parse(cls, text: str | None) -> "FieldSelector":
        terms = []
        for part in _split_top_level(text or ""):
            m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
            if not m:
                raise bad_request(f"invalid field selector: {part!r}")
            path, op, value = m.groups()
            terms.append((path, op != "!=", value))
        return cls(terms)

    def matches(self, obj: dict) -> bool:
        for path, equal, value in self.terms:
            actual = get_path(obj, path)
            actual = "" if actual is None else (str(actual).lower() if isinstance(actual, bool)
                                                else str(actual))
            if (actual == value) != equal:
                return False
        return True
