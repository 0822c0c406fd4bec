"""Reading ``params.yaml`` and the other YAML files the pipeline reads (``dvc.yaml``, ``dvc.lock``, profiles):
YAML 1.2 floats, libyaml's parser where PyYAML has it, and one error type naming the file and line. Kept apart
from the params models so that reading a YAML file imports no model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml


class ParamsError(ValueError):
    """``params.yaml`` is missing, is not valid YAML, or fails validation (message names the dotted key)."""


# PyYAML follows YAML 1.1, where "1e-5" (no dot) is a string. Accept YAML 1.2 floats.
_FLOAT_RE = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


#: libyaml's parser when PyYAML was built with it: about 10x faster than the pure-Python one, and every stage
#: process reads params.yaml, dvc.yaml and dvc.lock at start-up (about 1 s of each stage's start in pure Python).
SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Yaml12FloatLoader(SafeLoader):
    """SafeLoader that resolves ``1e-5`` as a float, as YAML 1.2 does."""


_Yaml12FloatLoader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12FloatLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


def read_yaml(path: Path) -> Any:
    """Parse a YAML file with YAML 1.2 float rules; raises ``ParamsError`` naming the file and line."""
    try:
        return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_Yaml12FloatLoader)
    except FileNotFoundError as err:
        raise ParamsError(f"{path}: file not found") from err
    except yaml.YAMLError as err:
        raise ParamsError(f"{path}: invalid YAML: {err}") from err
