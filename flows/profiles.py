r"""Named profiles: partial params files under ``profiles/`` (one per ``*.yaml`` there: ``names()``) that fit the
run to a machine and a corpus (``cpu``, ``gpu``, ``gpu-large``, ``gpu-node``, ...) or to runs on a schedule
(``scheduled``: the split ledger), applied by DVC's own experiment mechanism (``dvc exp run -S key=value``,
which records the experiment and writes the values back into params.yaml).

A profile is nested YAML with the keys it changes; ``extends: <profile>`` starts from another one. Before a
profile is applied, ``params.yaml`` with it must validate (the same pydantic models, the same dotted-key
errors); before ``--run`` starts DVC, a profile that asks for a device or more GPUs than the machine has stops
with one line (exit 2).

    python -m flows.profiles gpu                 # prints `dvc exp run -n gpu-<time> -S ... -S ...`: one shell
                                                 #   command (shell-quoted, ` \` continuations) to paste; params
                                                 #   checked, GPUs not (prepare it on a CPU login node)
    python -m flows.profiles --run gpu [--dvc D]  # checks the GPUs too, then runs `D exp run -n gpu-<time> ...`
    make run PROFILE=gpu                         # the same as --run (DVC=... picks the dvc binary)

The flow applies profiles itself (``python -m flows.pipeline --profile NAME``, and ``serve``, which applies
``scheduled`` unless told not to): ``write_values`` writes the changed keys into params.yaml, leaving every other
line as it was, before the stages run, so dvc.lock and git record them as they record ``-S``.

``--run`` hands DVC its argument vector directly (``os.execvp``), never through a shell, so a value with spaces,
quotes or a list stays one argument. Each value is written in the grammar DVC parses ``-S`` with (Hydra's
override grammar): strings quoted with Hydra's escapes, lists and numbers as Hydra reads them
(``override_value``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from tasks.common.runtime import device_setting
from tasks.config import ParamsError, load_params, read_yaml
from tasks.config.model.pretrain import processes_per_node

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


def override_value(value: Any) -> str:
    """``value`` in Hydra's override grammar, which ``dvc exp run -S key=<value>`` parses: ``null``, ``true``,
    numbers, ``[a, b]``, ``{k: v}``, and every string quoted (double quotes, or single ones when it holds a
    double quote and no single one), so that ``"21"`` or ``"null"`` stay strings. Inside the quotes that quote
    is ``\\"`` (``\\'``), backslashes just before a quote or at the end are doubled, and ``${``
    is ``\\${`` (OmegaConf would read an interpolation); everything else (spaces, the other quote, commas,
    brackets, newlines, any Unicode) is literal. Raises ``ParamsError`` for a value of another type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        quote = "'" if '"' in value and "'" not in value else '"'
        quoted = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
        quoted = re.sub(rf"(\\*){quote}", lambda m: m.group(1) * 2 + "\\" + quote, quoted)
        quoted = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, quoted)
        return f"{quote}{quoted}{quote}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(override_value(item) for item in value) + "]"
    if isinstance(value, dict):
        bad = [key for key in value if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][\w-]*", key)]
        if bad:
            raise ParamsError(f"a mapping key DVC's -S cannot take: {bad[0]!r}")
        return "{" + ", ".join(f"{key}: {override_value(item)}" for key, item in value.items()) + "}"
    raise ParamsError(f"a value DVC's -S cannot take: {value!r} ({type(value).__name__})")


def set_params_args(name: str, params_file: Path | str = "params.yaml") -> list[str]:
    """``-S key=value`` arguments of profile ``name`` for ``dvc exp run`` (``override_value``), after checking
    that ``params_file`` with them validates. Raises ``ParamsError``."""
    return checked_args(name, params_file, gpus=False)


def checked_args(name: str, params_file: Path | str = "params.yaml", gpus: bool = True) -> list[str]:
    """``set_params_args``, and with ``gpus`` also the check that the device and the training processes
    ``params_file`` with the profile asks for exist here (``check_gpus``; its message names the profile when the
    profile sets ``hardware.device``). Raises ``ParamsError``."""
    values = checked_values([name], params_file, gpus)
    return [arg for key, value in values.items() for arg in ("-S", f"{key}={override_value(value)}")]


def checked_values(profiles: list[str], params_file: Path | str = "params.yaml", gpus: bool = True) -> dict[str, Any]:
    """Dotted key -> value of ``profiles`` merged in order (a later one wins), after checking that ``params_file``
    with them validates and, with ``gpus``, that the device they ask for is here (``check_gpus``). Raises
    ``ParamsError``."""
    values: dict[str, Any] = {}
    for name in profiles:
        values |= overrides(name)
    params = load_params(params_file, values)
    if gpus:
        device_from = [name for name in profiles if "hardware.device" in overrides(name)]
        check_gpus(
            params.hardware.device, params.pretrain.nproc_per_node, profile=device_from[-1] if device_from else None
        )
    return values


def round_trip_yaml() -> YAML:
    """ruamel's round-trip YAML set to write params.yaml back as it was read (comments, flow lists, quotes, ``null``,
    the 2/4/2 indentation, long lines): what loading and dumping the shipped file gives is the file, byte for byte."""
    yaml = YAML()
    yaml.width = 4096
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.representer.add_representer(type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
    return yaml


def write_values(values: dict[str, Any], params_file: Path | str = "params.yaml") -> dict[str, Any]:
    """Write each dotted ``values`` key whose value differs into ``params_file`` (what ``dvc exp run -S`` does, but
    every other line, comment and list style as it was: ``round_trip_yaml``), replacing the file by rename; returns
    the keys changed (none: the file is not touched)."""
    path = Path(params_file)
    yaml = round_trip_yaml()
    tree = yaml.load(path.read_text(encoding="utf-8"))
    changed = {}
    for dotted, value in values.items():
        *parents, leaf = dotted.split(".")
        node = tree
        for key in parents:
            node = node.setdefault(key, {})
        if leaf not in node or json.dumps(node[leaf], sort_keys=True) != json.dumps(value, sort_keys=True):
            node[leaf] = value
            changed[dotted] = value
    if changed:
        tmp = path.with_name(f".{path.name}.tmp")
        with tmp.open("w", encoding="utf-8") as handle:
            yaml.dump(tree, handle)
        os.replace(tmp, path)
    return changed


def exp_run_argv(name: str, dvc: str = "dvc", params_file: Path | str = "params.yaml", gpus: bool = True) -> list[str]:
    """The whole argument vector of ``dvc exp run`` for profile ``name``, checked (``checked_args``; the GPUs only
    with ``gpus``): ``[dvc, "exp", "run", "-n", "<name>-<YYYYmmdd-HHMMSS>", "-S", "key=value", ...]``. Raises
    ``ParamsError``."""
    args = checked_args(name, params_file, gpus=gpus)
    return [dvc, "exp", "run", "-n", f"{name}-{time.strftime('%Y%m%d-%H%M%S')}", *args]


def shell_command(argv: list[str]) -> str:
    r"""``argv`` (``exp_run_argv``) as one shell command to paste: ``dvc exp run -n <name>`` on the first line, one
    ``-S key=value`` pair a line after it, every word quoted by ``shlex.quote``, the lines joined with `` \``
    continuations (a POSIX shell reads it back as exactly ``argv``)."""
    head, pairs = argv[:5], argv[5:]
    lines = [shlex.join(head)] + [shlex.join(pairs[i : i + 2]) for i in range(0, len(pairs), 2)]
    return " \\\n  ".join(lines)


def check_gpus(device: str, nproc_per_node: int | str, profile: str | None = None) -> None:
    """Raise ``ParamsError`` (one line) when ``hardware.device`` cannot be used here, or ``pretrain.nproc_per_node``
    asks for more training processes than the GPUs torch sees (or for ``gpu`` without one): the checks the
    pretrain stage's rank setup makes, made before DVC starts (``tasks.config.model.pretrain.processes_per_node``).

    With ``profile`` (the profile that sets ``hardware.device``), a device torch cannot give is said as that
    profile's request, with what to do instead (``profile_device_error``); without it, in ``resolve``'s words."""
    import torch  # only when a profile is applied, never when params load

    try:
        found = device_setting.resolve(device)
    except ValueError as err:
        if profile is None or torch.cuda.is_available():  # a cuda:N that is not there: resolve says it best
            raise ParamsError(str(err)) from None
        raise ParamsError(profile_device_error(profile, device)) from None
    try:
        processes_per_node(nproc_per_node, torch.cuda.device_count() if found.type == "cuda" else 0)
    except ValueError as err:
        raise ParamsError(str(err)) from None


def profile_device_error(profile: str, device: str) -> str:
    """One line for profile ``profile`` asking for ``hardware.device: <device>`` where torch sees no GPU: on a
    machine without one, use a CPU profile; on one whose GPUs this torch cannot use (a CPU-only build, or a
    driver too old for its CUDA), reinstall (``CUDA_INSTALL_HINT``: ``make install``'s checks then say the rest)."""
    import torch

    host = device_setting.gpus_on_host()
    build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
    asks = f"profile {profile} asks for hardware.device: {device}"
    if not host:
        return (
            f"{asks}, but this machine has no GPU (torch {torch.__version__} sees none); use PROFILE=cpu, or "
            f"plain make run, on a machine without a GPU"
        )
    return (
        f"{asks}, but torch {torch.__version__} ({build}) sees none of this machine's {host} GPU(s); "
        f"{device_setting.CUDA_INSTALL_HINT}, or use PROFILE=cpu"
    )


def one_line(message: str) -> str:
    """A ``ParamsError`` of several lines (a header, then one invalid key a line) as one line."""
    first, *rest = [line.strip() for line in message.splitlines() if line.strip()] or [""]
    return first + (": " + "; ".join(rest) if rest else "")


def main(argv: list[str]) -> int:
    """``<profile>``: print ``dvc exp run -n <profile>-<time> -S ... -S ...`` as one shell command to paste
    (``shell_command``), after checking that the params validate; the GPUs are not checked, so it can be prepared
    on a machine without them. ``--run <profile>``: check the params and the GPUs, then replace this process with
    ``dvc exp run`` (``--dvc``: the dvc binary, in either mode). Exit 2 with one line on an unknown profile, a
    value that does not validate or (``--run``) a device or GPUs that are not there."""
    parser = argparse.ArgumentParser(prog="python -m flows.profiles", description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", help=f"one of {', '.join(names())}")
    parser.add_argument("--run", action="store_true", help="run dvc exp run with the profile (make run PROFILE=...)")
    parser.add_argument(
        "--dvc", default="dvc", help="the dvc binary --run starts or the printed command names (default: dvc on PATH)"
    )
    args = parser.parse_args(argv)
    try:
        if not args.run:
            print(shell_command(exp_run_argv(args.profile, args.dvc, gpus=False)))
            return 0
        command = exp_run_argv(args.profile, args.dvc)
    except ParamsError as err:
        print(f"clozeline: {one_line(str(err))}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    try:
        os.execvp(command[0], command)
    except OSError as err:
        print(f"clozeline: cannot run {command[0]!r}: {err.strerror}", file=sys.stderr)
        return 2
    return 0  # not reached: execvp replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
