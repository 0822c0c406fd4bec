"""Named profiles: partial params files under ``profiles/`` that fit the run to a machine (``cpu``, ``gpu``,
``gpu-node``) or to runs on a schedule (``scheduled``: the split ledger), applied by DVC's own experiment
mechanism (``dvc exp run -S key=value``, which records the experiment and writes the values back into
params.yaml).

A profile is nested YAML with the keys it changes; ``extends: <profile>`` starts from another one. Before a
profile is applied, ``params.yaml`` with it must validate (the same pydantic models, the same dotted-key
errors), and a profile that asks for more GPUs than the machine has stops with one line.

    python -m flows.profiles gpu      # prints the -S arguments for `dvc exp run`, one per line
    make run PROFILE=gpu                     # dvc exp run -n gpu <those arguments>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tasks.config import ParamsError, load_params, read_yaml

PROFILES = Path(__file__).resolve().parents[1] / "profiles"


def names() -> list[str]:
    """The profiles there are (file stems under ``profiles/``)."""
    return sorted(p.stem for p in PROFILES.glob("*.yaml"))


def overrides(name: str) -> dict[str, Any]:
    """Dotted key -> value of profile ``name``, with what it ``extends`` first. Raises ``ParamsError`` naming an
    unknown profile or a profile that is not a mapping."""
    if name not in names():
        raise ParamsError(f"profile {name!r}: no profiles/{name}.yaml (profiles: {', '.join(names())})")
    raw = read_yaml(PROFILES / f"{name}.yaml")
    if not isinstance(raw, dict):
        raise ParamsError(f"profiles/{name}.yaml: top level must be a mapping of params sections")
    base = overrides(raw.pop("extends")) if "extends" in raw else {}
    return base | flatten(raw)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; an empty mapping or a list is a value."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def set_params_args(name: str, params_file: Path | str = "params.yaml") -> list[str]:
    """``-S key=value`` arguments of profile ``name`` for ``dvc exp run`` (values as JSON, which DVC parses as
    YAML), after checking that ``params_file`` with them validates. Raises ``ParamsError``."""
    values = overrides(name)
    load_params(params_file, values)
    return [arg for key, value in values.items() for arg in ("-S", f"{key}={json.dumps(value)}")]


def check_gpus(values: dict[str, Any]) -> None:
    """Raise ``ParamsError`` when the profile asks for CUDA or more training processes than the GPUs torch sees."""
    from tasks.common.device import resolve  # torch: only when a profile is applied, never when params load

    device, nproc = values.get("hardware.device", "auto"), values.get("pretrain.nproc_per_node", 1)
    try:
        found = resolve(device)
    except ValueError as err:
        raise ParamsError(str(err)) from None
    import torch

    if found.type == "cuda" and isinstance(nproc, int) and nproc > torch.cuda.device_count():
        raise ParamsError(f"pretrain.nproc_per_node: {nproc} processes, but torch sees {torch.cuda.device_count()} GPU(s)")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: python -m flows.profiles <{'|'.join(names())}>", file=sys.stderr)
        return 2
    try:
        check_gpus(overrides(argv[0]))
        print("\n".join(set_params_args(argv[0])))
    except ParamsError as err:
        print(f"clozeline: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
