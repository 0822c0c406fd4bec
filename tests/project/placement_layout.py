"""Where ``tasks/`` (and ``clozeline/``, the export's entry point) builds or loads a torch module, found with
``ast``: the call sites that tests/project/test_placement_layout.py checks each have a placement test.

A site is a call, inside a function, of

- ``from_pretrained`` / ``from_config`` (not on a ``*Tokenizer*`` or ``*Config`` class: those build no module);
- a model class (``*Model``, ``*ForMaskedLM``, ``*ForSequenceClassification``, ``*ForTokenClassification``,
  ``*WithHead``);
- a weights loader: ``load_file``, ``load_model``, ``load_state_dict``, ``safe_open``, ``torch.load``
  (``safe_open(path, "np")``, which reads into numpy and makes no torch tensor, is not one);
- one of the project's own loaders: a function that contains a site and whose name says it loads or builds a
  model (``HELPER``: ``load_encoder``, ``build_model``, ``initial_model``, the leakage ``Encoder`` class, whose
  ``__init__`` holds the site; found to a fixed point), so a stage that calls a loader is a site of its own.
  Other functions holding a site (a stage's ``run``, ``train_and_test``) are not followed to their callers:
  their own placement test covers them.

A site is named ``<file>::<function qualname>``; ``sites()`` maps each name to its ``file:line`` list.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("tasks", "clozeline")
LOADERS = {"from_pretrained", "from_config", "load_file", "load_model", "load_state_dict", "safe_open"}
MODEL_CLASS = re.compile(r"^[A-Z]\w*(Model|ForMaskedLM|ForSequenceClassification|ForTokenClassification|WithHead)$")
NOT_A_MODULE = re.compile(r"(Tokenizer\w*|Config)$")
#: A function (or class) holding a site with such a name is a loader: its callers are sites too ...
HELPER = re.compile(r"load|build|init|encoder|model|masked_lm", re.IGNORECASE)
#: ... unless the name is this generic (``json.load``, ``convert.build``, ``checkpoint.load`` share it).
GENERIC = {"load", "build", "__init__"}


def _called(func: ast.expr) -> tuple[str, str]:
    """``(name, receiver)`` of a call's function (``AutoModel.from_pretrained``: ``from_pretrained``, ``AutoModel``)."""
    if isinstance(func, ast.Attribute):
        receiver = func.value
        return func.attr, receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
    return getattr(func, "id", ""), ""


def _numpy_framework(call: ast.Call) -> bool:
    """Whether a ``safe_open`` call reads into numpy (``framework`` "np", second argument or keyword)."""
    given = [kw.value for kw in call.keywords if kw.arg == "framework"] + call.args[1:2]
    return any(isinstance(arg, ast.Constant) and arg.value == "np" for arg in given)


def _is_primitive(call: ast.Call) -> bool:
    name, receiver = _called(call.func)
    if name == "safe_open" and _numpy_framework(call):
        return False
    if name == "load":
        return receiver == "torch"
    if name in LOADERS:
        return not NOT_A_MODULE.search(receiver)
    return bool(MODEL_CLASS.match(name))


def _calls(tree: ast.Module) -> list[tuple[str, str, ast.Call]]:
    """``(qualname of the enclosing function, name called, call)`` for every call in a function."""
    out = []

    def walk(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Call) and scope:
                out.append((".".join(scope), _called(child.func)[0], child))
            walk(child, scope)

    walk(tree, [])
    return out


def sites() -> dict[str, list[str]]:
    """``{"<file>::<qualname>": ["<file>:<line>", ...]}`` of every site (see the module docstring)."""
    calls = {}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            calls[path.relative_to(ROOT).as_posix()] = _calls(ast.parse(path.read_text(encoding="utf-8")))
    found: dict[str, list[str]] = {}
    helpers: set[str] = set()
    while True:
        for file, entries in calls.items():
            for qualname, name, call in entries:
                if _is_primitive(call) or name in helpers:
                    found.setdefault(f"{file}::{qualname}", [])
                    where = f"{file}:{call.lineno}"
                    if where not in found[f"{file}::{qualname}"]:
                        found[f"{file}::{qualname}"].append(where)
        names = {key.split("::")[1].split(".")[-1] for key in found}
        names |= {key.split("::")[1].split(".")[-2] for key in found if key.endswith(".__init__")}
        grown = helpers | {name for name in names - GENERIC if HELPER.search(name)}
        if grown == helpers:
            return found
        helpers = grown
