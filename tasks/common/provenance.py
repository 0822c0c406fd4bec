"""Provenance: the one reader of ``dvc.yaml``, ``dvc.lock`` and the git commit.

``dvc.yaml`` declares the graph: stage names (a ``foreach`` stage expands to ``<stage>@<item>``) and each
stage's declared ``deps``. ``dvc.lock`` records what each stage last ran with: the md5 of every dep and out
and the params values DVC saw. Every other module asks here instead of parsing either file itself, so the
schema of both files is interpreted in one place (DVC 3 lock schema ``2.0``).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from tasks.common.nested import flatten
from tasks.config import SafeLoader, read_yaml

DVC_YAML = "dvc.yaml"
DVC_LOCK = "dvc.lock"
PARAMS_YAML = "params.yaml"
_VARIABLE = re.compile(r"\$\{\s*([\w.-]+)\s*\}")


def git_commit(root: Path) -> str:
    """The HEAD commit (with ``-dirty`` if tracked files changed), or ``unknown`` outside git."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], cwd=root, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


# ---------------------------------------------------------------------------------------------- dvc.yaml


def read_dvc_yaml(root: Path) -> dict[str, Any]:
    """The ``stages`` mapping of ``<root>/dvc.yaml``; raises ``FileNotFoundError`` naming the file."""
    path = Path(root) / DVC_YAML
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (run from the project root)")
    return (yaml.load(path.read_text(encoding="utf-8"), Loader=SafeLoader) or {}).get("stages", {})


def stage_names(root: Path) -> list[str]:
    """Stage names in ``dvc.yaml`` order; a ``foreach`` stage expands to ``<stage>@<item>`` per item (per key
    of a mapping, such as ``foreach: ${tasks}``, which DVC reads from ``params.yaml``)."""
    names: list[str] = []
    params = read_params(root)
    for name, body in read_dvc_yaml(root).items():
        items = foreach_items(body, params) if isinstance(body, dict) and "foreach" in body else None
        if items is None:
            names.append(name)
        else:
            names.extend(f"{name}@{item}" for item in items)
    return names


def read_params(root: Path) -> dict[str, Any]:
    """The parsed ``<root>/params.yaml`` (``{}`` when absent): the values ``${...}`` in dvc.yaml take."""
    params_file = Path(root) / PARAMS_YAML
    return (read_yaml(params_file) or {}) if params_file.is_file() else {}


def foreach_items(body: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``{item name: item value}`` of a ``foreach`` stage body: a list's items name themselves, a mapping's keys
    name its items, and ``${key}`` reads that value from ``params`` (``read_params``; a missing key gives no
    items)."""
    items = body["foreach"]
    if isinstance(items, str):
        match = _VARIABLE.fullmatch(items.strip())
        items = _dotted(params, match.group(1)) if match else None
    if isinstance(items, dict):
        return {str(key): value for key, value in items.items()}
    return {str(item): item for item in items or []}


def _dotted(tree: dict[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def stage_modules(names: list[str]) -> list[str]:
    """``names`` (from ``stage_names``) without ``@item``, distinct, in order: each the module ``tasks.<name>``."""
    return list(dict.fromkeys(name.partition("@")[0] for name in names))


def declared_deps(root: Path, dvc_stage: str) -> list[str]:
    """The ``deps`` of ``dvc_stage`` (``stage`` or ``stage@item``) in dvc.yaml, with ``${item}`` and
    ``${<params key>}`` filled in from ``params.yaml`` as DVC does; a dep whose variable is unknown is left out."""
    body, values = _stage_body(root, dvc_stage)
    deps = [dep for dep in body.get("deps", []) if isinstance(dep, str)]
    resolved = (_interpolate(dep, values) for dep in deps)
    return [dep for dep in resolved if dep is not None]


def declared_params(root: Path, dvc_stage: str) -> list[str]:
    """The ``params`` keys of ``dvc_stage`` in dvc.yaml, interpolated as ``declared_deps``."""
    body, values = _stage_body(root, dvc_stage)
    resolved = (_interpolate(str(key), values) for key in body.get("params", []) if isinstance(key, str))
    return [key for key in resolved if key is not None]


def declared_outs(root: Path, dvc_stage: str) -> dict[str, bool]:
    """``{path: persist}`` of every output of ``dvc_stage`` in dvc.yaml (``outs``, ``metrics`` and ``plots``),
    interpolated as ``declared_deps``; ``persist`` is DVC's flag for an output it keeps across runs."""
    body, values = _stage_body(root, dvc_stage)
    outs: dict[str, bool] = {}
    for entry in (e for section in ("outs", "metrics", "plots") for e in body.get(section, [])):
        path, flags = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()))
        resolved = _interpolate(str(path), values)
        if resolved is not None:
            outs[resolved] = bool((flags or {}).get("persist", False))
    return outs


def _stage_body(root: Path, dvc_stage: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dvc.yaml body of ``dvc_stage`` (a ``foreach`` stage's ``do``) and the values its ``${...}`` take."""
    name, _, item = dvc_stage.partition("@")
    try:
        body = read_dvc_yaml(root).get(name, {})
    except FileNotFoundError:
        return {}, {}
    params = read_params(root)
    values = flatten(params)
    if item and "foreach" in body:
        value = foreach_items(body, params).get(item)
        values.update({"key": item, "item": item} | (flatten(value, "item") if isinstance(value, dict) else {}))
    return body.get("do", body), values


def _interpolate(text: str, values: dict[str, Any]) -> str | None:
    """``text`` with every ``${key}`` replaced by ``values[key]`` (dotted keys), or ``None`` if one is unknown."""
    try:
        return _VARIABLE.sub(lambda match: str(values[match.group(1)]), text)
    except KeyError:
        return None


# ---------------------------------------------------------------------------------------------- dvc.lock


class Lock:
    """``dvc.lock`` parsed: per stage its ``cmd``, ``deps``/``outs`` (path + md5) and recorded ``params``.

    A missing or empty file is an empty lock (nothing reproduced yet): every lookup then returns empty.
    """

    def __init__(self, stages: dict[str, Any]) -> None:
        self.stages = stages

    @classmethod
    def read(cls, path: Path) -> Lock:
        """Parse ``path`` (a ``dvc.lock``); an absent file gives an empty ``Lock``."""
        path = Path(path)
        if not path.is_file():
            return cls({})
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=SafeLoader)
        stages = data.get("stages") if isinstance(data, dict) else None
        return cls(stages if isinstance(stages, dict) else {})

    def out_md5s(self) -> dict[tuple[str, str], str]:
        """``{(stage, out path): md5}`` of every output, stages sorted by name (``dir`` md5s end in ``.dir``)."""
        return {
            (stage, str(out.get("path"))): str(out.get("md5", ""))
            for stage, body in sorted(self.stages.items())
            for out in body.get("outs", [])
        }

    def dep_md5s(self, stage: str) -> dict[str, str]:
        """``{dep path: md5}`` that ``stage`` last ran with (empty for a stage not in the lock)."""
        return {str(dep.get("path")): str(dep.get("md5", "")) for dep in self.stages.get(stage, {}).get("deps", [])}

    def params(self, stage: str) -> dict[str, Any]:
        """The params values ``stage`` last ran with, as DVC recorded them: a whole section listed in dvc.yaml
        stays nested (``{"dedup": {...}}``), a key listed on its own stays dotted (``{"finetune.seeds": [...]}``)."""
        recorded = self.stages.get(stage, {}).get("params", {})
        merged: dict[str, Any] = {}
        for values in recorded.values():  # one mapping per params file
            merged.update(values or {})
        return merged

    def entries(self, stages: Iterable[str]) -> dict[str, Any]:
        """The raw lock entries of those ``stages`` that were reproduced (for hashing a whole sub-graph)."""
        return {s: self.stages[s] for s in stages if s in self.stages}

    def input_md5s(self, dvc_stage: str, deps: list[str]) -> dict[str, str]:
        """md5 of each path in ``deps`` as ``dvc_stage`` sees it now, for tagging its run.

        A path that another stage outputs takes that output's md5 (DVC has updated it before this stage
        runs); a source file takes the md5 of this stage's own last run. Unknown md5s are left out.
        """
        md5 = self.dep_md5s(dvc_stage)
        md5.update({path: value for (_, path), value in self.out_md5s().items()})
        return {path: md5[path] for path in deps if md5.get(path)}


def input_md5s(root: Path, dvc_stage: str) -> dict[str, str]:
    """md5 of each declared dep of ``dvc_stage`` as the stage runs now: ``Lock.input_md5s``, except that a
    source (a dep no stage outputs: a raw data folder, a probe set) is hashed afresh with ``dvc_md5``, because
    ``dvc.lock`` still holds the md5 of the previous run (or none, on a first run) until this stage ends."""
    lock = Lock.read(Path(root) / DVC_LOCK)
    deps = declared_deps(root, dvc_stage)
    md5 = lock.input_md5s(dvc_stage, deps)
    produced = {out for _, out in lock.out_md5s()}
    for path in deps:
        if (Path(root) / path).exists() and path not in produced:
            md5[path] = dvc_md5(root, path)
    return md5


def dvc_md5(root: Path, path: str) -> str:
    """The md5 DVC 3 records for ``path`` (relative to ``root``): of the bytes for a file, of the manifest with a
    ``.dir`` suffix for a folder, ``.dvcignore`` applied. Computed by dvc-data, DVC's own hashing library, in a
    dry run that stores nothing. The md5 of each file it read is kept for ``hashed_md5``."""
    from dvc.fs import LocalFileSystem
    from dvc.ignore import DvcIgnoreFilter
    from dvc_data.hashfile.build import build
    from dvc_data.hashfile.db.local import LocalHashFileDB
    from dvc_data.hashfile.tree import Tree

    fs, full = LocalFileSystem(), Path(root).resolve() / path
    before = {file: _stat_key(file) for file in ([full] if full.is_file() else full.rglob("*")) if file.is_file()}
    with tempfile.TemporaryDirectory() as scratch:
        _, _, obj = build(
            LocalHashFileDB(fs, scratch),
            str(full),
            fs,
            "md5",
            dry_run=True,
            ignore=DvcIgnoreFilter(fs, str(Path(root).resolve())),
        )
    hashed = (
        [(full.joinpath(*key), info.value) for key, _, info in obj]
        if isinstance(obj, Tree)
        else [(full, obj.hash_info.value)]
    )
    for file, md5 in hashed:
        if file in before and before[file] == _stat_key(file):  # unchanged while DVC read it
            _HASHED[before[file]] = md5
    return str(obj.hash_info.value)


#: (real path, size, mtime_ns, ctime_ns, inode) -> md5 of every file ``dvc_md5`` hashed in this process
_HASHED: dict[tuple[str, int, int, int, int], str] = {}


def _stat_key(file: Path) -> tuple[str, int, int, int, int]:
    """The file's identity as far as a stat shows it; the ctime also moves when a write keeps the mtime (``touch
    -d``, ``cp -p``, ``rsync -t``), which the kernel cannot be told to set back."""
    stat = file.stat()
    return os.path.realpath(file), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino


def hashed_md5(file: Path) -> tuple[int, str] | None:
    """``(size in bytes, md5)`` of ``file`` when ``dvc_md5`` hashed it earlier in this process and its size,
    mtime, ctime and inode are still those it had then (how DVC's own state skips hashing a file twice), else None.
    A stage whose run hashed its raw inputs for provenance (``input_md5s``) so reads them once, not twice."""
    key = _stat_key(file)
    return (key[1], _HASHED[key]) if key in _HASHED else None
