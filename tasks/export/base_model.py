"""What the exported encoder started from, for the model card: its name, licence and origin, read from the files
that ship with it (the base model's own card and config, the installed package's metadata), never typed in here.

The variant of the arm (``selected.json`` ``variant``) says which: ``reference`` is the packaged MiniLM
(``tasks.common.models.encoders.reference_model_dir``); ``adapted`` is that model (or the Hugging Face folder
``pretrain.init_from`` names) continued by the pretrain stage; ``pretrained`` is clozeline's own encoder,
pretrained from scratch; ``random`` has no pretraining at all.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path

from huggingface_hub.repocard import metadata_load

from tasks.common.models.encoders import pretrained_dir, pretraining_record, reference_model_dir, tokenization

#: Where a Hugging Face card names its own hub id: its usage snippet's ``from_pretrained('<id>')`` call.
HUB_ID = re.compile(r"""(?:from_pretrained|SentenceTransformer)\(\s*['"]([\w.-]+/[\w.-]+)['"]""")
OWN = {
    "pretrained": (
        "clozeline's own encoder",
        "pretrained from scratch by this run's pretrain stage on its pretraining sources (models/pretrained)",
    ),
    "random": (
        "no pretrained encoder",
        "the encoder config of models/pretrained, randomly initialised (the no-pretraining control)",
    ),
}
NO_LICENCE = (
    "none declared",
    "weights trained by this pipeline: no licence file ships with them; the terms of "
    "the data they were trained on apply",
)


def describe(variant: str, models: Path) -> dict:
    """The base model of an arm of ``variant``: ``variant``, ``name``, ``origin`` (in words), ``licence``,
    ``licence_source``, ``package`` (the installed distribution that ships it, or None), ``based_on`` (the
    model its config names, or None) and ``tokenization`` (``data/tokenize/<task>/<tok>`` it read, None when
    ``<models>/pretrained`` has no record)."""
    try:
        tok = tokenization(variant, models)
    except FileNotFoundError:
        tok = None
    if variant == "reference":
        return {
            "variant": variant,
            **hf_folder(reference_model_dir()),
            "tokenization": tok,
            "origin": "the packaged reference encoder, fine-tuned on this task",
        }
    if variant == "adapted":
        init = pretraining_record(pretrained_dir(models)).get("init_from", "reference")
        base = hf_folder(reference_model_dir() if init == "reference" else Path(init))
        return {
            "variant": variant,
            **base,
            "tokenization": tok,
            "origin": f"{base['name']} continued with masked-LM training by this run's pretrain stage "
            "(models/pretrained), then fine-tuned on this task",
        }
    name, origin = OWN.get(variant, (variant, f"the {variant} variant of the finetune stage"))
    return {
        "variant": variant,
        "name": name,
        "origin": origin,
        "licence": NO_LICENCE[0],
        "licence_source": NO_LICENCE[1],
        "package": None,
        "based_on": None,
        "tokenization": tok,
    }


def hf_folder(folder: Path) -> dict:
    """``name``, ``licence``, ``licence_source``, ``package``, ``based_on`` of a Hugging Face model folder, from
    its ``README.md`` (front matter ``license``, the hub id its usage snippet loads, else its first heading),
    its ``config.json`` (``_name_or_path``) and the installed distribution holding it, if any."""
    card = folder / "README.md"
    text = card.read_text(encoding="utf-8") if card.is_file() else ""
    front = front_matter(card) if text else {}
    hub = HUB_ID.search(text)
    heading = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), None)
    config = folder / "config.json"
    based_on = json.loads(config.read_text(encoding="utf-8")).get("_name_or_path") if config.is_file() else None
    where = f"{folder.parent.name}/{folder.name}/README.md"
    licence = front.get("license")
    return {
        "name": hub.group(1) if hub else heading or folder.name,
        "based_on": based_on or None,
        "licence": str(licence) if licence else "not stated",
        "licence_source": (
            f"from `license:` in the front matter of {where}, the base model's own card"
            if licence
            else f"{where} states none: check the model's origin before use"
        ),
        "package": package_of(folder),
    }


def front_matter(card: Path) -> dict:
    """The YAML front matter of a Hugging Face model card (``huggingface_hub``'s ``metadata_load``); ``{}``
    without one, or with one that is not a mapping."""
    try:
        return metadata_load(card) or {}
    except ValueError:  # metadata_load's "repo card metadata block should be a dict"
        return {}


def package_of(folder: Path) -> dict | None:
    """``{name, version, licence}`` of the installed distribution whose files hold ``folder``, or None."""
    top = folder.parent.name
    for dist_name in importlib.metadata.packages_distributions().get(top, []):
        meta = importlib.metadata.metadata(dist_name)
        return {"name": meta["Name"], "version": meta["Version"], "licence": meta.get("License") or "not stated"}
    return None
