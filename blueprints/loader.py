"""Load a blueprint file into a validated ``Blueprint``, or fail with located problems.

Every failure becomes a ``BlueprintError`` whose lines read
``FILE:LINE:COLUMN: field.path: what is wrong (hint: what to do)``. Nothing else escapes:
the fuzz tests in ``tests/unit/test_blueprint_fuzz.py`` hold the loader to that.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from blueprints import rules
from blueprints.schema import Blueprint
from tasks.errors import BlueprintError, BlueprintProblem

MAX_BYTES = 1 << 20  # a blueprint is a page of YAML; anything larger is a mistake

Path_ = tuple[str | int, ...]
Marks = dict[Path_, tuple[int, int]]


def load_blueprint(path: str | Path, *, to_release: bool = False) -> Blueprint:
    """Read, parse and validate the blueprint at ``path``.

    ``to_release``: for what only finds and releases what the deployment made (teardown, status,
    the sweep). The cross-field rules (``blueprints.rules``) are about what a run would buy and
    run; a blueprint a newer rule refuses (an engine image by tag, written before digests were
    required) must still name its fleet, or that fleet bills until someone edits the file."""
    name = str(path)
    if "\0" in name:  # open() would raise a bare ValueError ("embedded null byte")
        raise BlueprintError([BlueprintProblem(name.replace("\0", "\\0"), None, None, "",
                                               "the path has a NUL character in it", "check the path")])
    try:
        # At most one byte past the limit: a device (/dev/zero) or a huge file is refused, not read whole.
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise BlueprintError([BlueprintProblem(name, None, None, "", f"cannot read file: {e.strerror}",
                                               "check the path")]) from e
    if len(raw) > MAX_BYTES:
        raise BlueprintError([BlueprintProblem(name, None, None, "",
                                               f"file is over {MAX_BYTES} bytes; a blueprint is under that",
                                               "point at the blueprint YAML, not a data file")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlueprintError([BlueprintProblem(name, None, None, "", "file is not UTF-8 text",
                                               "save the blueprint as UTF-8")]) from e
    return parse_blueprint(text, name, check_rules=not to_release)


def parse_blueprint(text: str, source: str = "<blueprint>", check_rules: bool = True) -> Blueprint:
    """Parse blueprint YAML text; ``source`` names it in error messages; ``check_rules``: refuse
    one that breaks a cross-field rule too (all but what only releases)."""
    try:
        data, marks = _parse_yaml(text, source)
        bp = _validate(data, marks, source)
    except RecursionError as e:
        raise BlueprintError([BlueprintProblem(source, None, None, "", "document is nested too deeply",
                                               "a blueprint is a few levels of mappings and lists")]) from e
    violations = rules.check(bp) if check_rules else []
    if violations:
        raise BlueprintError([_locate(source, marks, v.path, v.message, v.hint) for v in violations])
    return bp


def _parse_yaml(text: str, source: str) -> tuple[Any, Marks]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        problem = " ".join(filter(None, [e.context, e.problem])) or "invalid YAML"
        raise BlueprintError([BlueprintProblem(source, line, col, "", f"YAML syntax error: {problem}",
                                               "check indentation, colons and quotes at that spot")]) from e
    except yaml.YAMLError as e:
        raise BlueprintError([BlueprintProblem(source, None, None, "", f"YAML error: {e}",
                                               "check the file is plain YAML text")]) from e
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise BlueprintError([BlueprintProblem(source, 1, 1, "", f"expected a mapping at the top, got {kind}",
                                               "start with 'apiVersion: pdlift/v1' and 'name: ...'")])
    marks: Marks = {}
    duplicates: list[BlueprintProblem] = []
    _collect_marks(node, (), marks, duplicates, source)
    if duplicates:
        raise BlueprintError(duplicates)
    return data, marks


def _collect_marks(node: yaml.Node, path: Path_, marks: Marks, dups: list[BlueprintProblem],
                   source: str) -> None:
    marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                dups.append(BlueprintProblem(source, key_node.start_mark.line + 1,
                                             key_node.start_mark.column + 1, _dotted(path + (key,)),
                                             "key appears twice; YAML would silently keep the last",
                                             "delete one of the two"))
            seen.add(key)
            marks[path + (key, "__key__")] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _collect_marks(value_node, path + (key,), marks, dups, source)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _collect_marks(item, path + (i,), marks, dups, source)


def _validate(data: dict, marks: Marks, source: str) -> Blueprint:
    try:
        return Blueprint.model_validate(data)
    except ValidationError as e:
        problems = [_problem_from_pydantic(err, marks, source) for err in e.errors(include_url=False)]
        raise BlueprintError(_dedupe(problems)) from None


def _problem_from_pydantic(err: dict, marks: Marks, source: str) -> BlueprintProblem:
    loc = _clean_loc(err.get("loc", ()))
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        parent, key = loc[:-1], str(loc[-1]) if loc else ""
        valid = _field_names(parent)
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else (
            f"valid keys here: {', '.join(valid)}" if valid else "remove it")
        line_col = marks.get(loc + ("__key__",)) or _nearest(marks, loc)
        return BlueprintProblem(source, *line_col, _dotted(loc), f"unknown key '{key}'", hint)
    if kind == "missing":
        return _locate(source, marks, loc, "required field is missing",
                       f"add '{loc[-1]}:' under {_dotted(loc[:-1]) or 'the top level'}")
    message = str(err.get("msg", "invalid value"))
    ctx = err.get("ctx") or {}
    if kind == "literal_error" and "expected" in ctx:
        hint = f"use one of {ctx['expected']}"
    elif kind == "union_tag_invalid" or kind == "union_tag_not_found":
        hint = "set 'kind' to mla or gqa"
    elif kind.endswith("_type") or kind.endswith("_parsing"):
        hint = f"got {_short(err.get('input'))}"
    elif kind == "string_pattern_mismatch":
        hint = f"got {_short(err.get('input'))}"
    else:
        hint = ""
    return _locate(source, marks, loc, message, hint)


def _locate(source: str, marks: Marks, loc: Path_, message: str, hint: str) -> BlueprintProblem:
    line, col = _nearest(marks, loc)
    return BlueprintProblem(source, line, col, _dotted(loc), message, hint)


def _nearest(marks: Marks, loc: Path_) -> tuple[int | None, int | None]:
    """The mark of the deepest existing node on ``loc`` (a missing key points at its parent)."""
    for depth in range(len(loc), -1, -1):
        mark = marks.get(tuple(loc[:depth]))
        if mark:
            return mark
    return (None, None)


def _clean_loc(loc: tuple) -> Path_:
    """Drop pydantic's union-member segments (e.g. 'mla' in attention.mla.layers)."""
    out: list[str | int] = []
    for part in loc:
        if isinstance(part, str) and part in ("mla", "gqa") and out and out[-1] == "attention":
            continue
        out.append(part if isinstance(part, (str, int)) else str(part))
    if out and out[0] == "api_version":
        out[0] = "apiVersion"
    return tuple(out)


def _field_names(path: Path_) -> list[str]:
    """The keys a mapping at ``path`` accepts, for "did you mean" hints."""
    model: Any = Blueprint
    for part in path:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part) if isinstance(model, type) else None
        if field is None:
            return []
        model = _model_of(field.annotation)
        if model is None:
            return []
    fields = getattr(model, "model_fields", {})
    return [f.alias or n for n, f in fields.items()]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _dotted(loc: Path_) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _dedupe(problems: list[BlueprintProblem]) -> list[BlueprintProblem]:
    seen, out = set(), []
    for p in problems:
        key = (p.field, p.message)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out
