"""params.yaml loading: strict keys, dotted-key errors, YAML 1.2 floats."""

from pathlib import Path

import pytest

from tasks.config import ParamsError, load_params, read_yaml

ROOT = Path(__file__).resolve().parents[2]


def test_default_params_load():
    params = load_params(ROOT / "params.yaml")
    assert params.paths.data == Path("data")
    assert params.section("ingest") is params.ingest


def test_unknown_key_fails_with_dotted_path(tmp_path):
    text = (ROOT / "params.yaml").read_text() + "\nbogus_section: 1\n"
    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(ParamsError, match="bogus_section"):
        load_params(tmp_path / "params.yaml")


def test_wrong_type_names_the_dotted_key(tmp_path):
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    with pytest.raises(ParamsError, match=r"pipeline\.retries"):
        load_params(tmp_path / "params.yaml", overrides={"pipeline.retries": "three"})


def test_nested_unknown_key_is_named(tmp_path):
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    with pytest.raises(ParamsError, match=r"pipeline\.retriez"):
        load_params(tmp_path / "params.yaml", overrides={"pipeline.retriez": 1})


@pytest.mark.parametrize(("literal", "value"), [("1e-5", 1e-5), ("3E+2", 300.0), ("2.5e-3", 0.0025), ("-1e3", -1000.0)])
def test_exponent_without_dot_loads_as_float(tmp_path, literal, value):
    (tmp_path / "x.yaml").write_text(f"lr: {literal}\nsteps: 10\nname: 1e5x\n")
    loaded = read_yaml(tmp_path / "x.yaml")
    assert isinstance(loaded["lr"], float) and loaded["lr"] == value
    assert loaded["steps"] == 10 and isinstance(loaded["steps"], int)
    assert loaded["name"] == "1e5x"


def test_invalid_yaml_names_file(tmp_path):
    (tmp_path / "params.yaml").write_text("paths: [unclosed\n")
    with pytest.raises(ParamsError, match="params.yaml"):
        load_params(tmp_path / "params.yaml")


def test_unknown_stage_section():
    params = load_params(ROOT / "params.yaml")
    with pytest.raises(ParamsError, match="nope"):
        params.section("nope")


def test_require_unique_names_every_repeated_value():
    from tasks.config.base import require_unique

    assert require_unique([3, 1, 2], "seeds") == [3, 1, 2]
    with pytest.raises(ValueError, match=r"^seeds must be unique; repeated: \[1, 3\]$"):
        require_unique([3, 1, 2, 1, 3], "seeds")


def test_dose_response_without_pretraining_snapshots_fails_at_load_time():
    with pytest.raises(ParamsError, match="finetune.recipes.cls.dose_response needs pretrain.dose_snapshot_fractions"):
        load_params(ROOT / "params.yaml", overrides={"finetune.recipes.cls.dose_response": "pretrained/full/cls-pool"})
    both = {
        "finetune.recipes.cls.dose_response": "pretrained/full/cls-pool",
        "pretrain.dose_snapshot_fractions": [0.0, 0.5],
    }
    assert (
        load_params(ROOT / "params.yaml", overrides=both).finetune.recipes["cls"].dose_response
        == "pretrained/full/cls-pool"
    )


@pytest.mark.parametrize("name", ["pretrain", "claims", "verdicts", "max_seq_len_tokens"])
def test_a_task_name_another_output_uses_fails_at_load_time(name):
    # tokenize wrote task 'pretrain' into data/tokenize/pretrain/clozeline over the MLM blocks, and its metrics
    # over tokenize.json's pretrain key; summary.json holds claims, verdicts and pretrain beside the tasks
    task = {"kind": "classification", "source": "bbc_news", "metric": "macro_f1", "recipe": "cls"}
    with pytest.raises(ParamsError, match=rf"task name {name!r} is reserved \("):
        load_params(ROOT / "params.yaml", overrides={"tasks": {name: task}})


@pytest.mark.parametrize("name", ["table", "lineage"])
def test_a_source_name_another_output_uses_fails_at_load_time(name):
    # the leakage stage writes data/leakage/<source>.parquet beside its own table.parquet and lineage.parquet
    source = {"name": name, "kind": "builtin", "corpus": "wikipedia_sample", "role": "pretrain"}
    sources = load_params(ROOT / "params.yaml").model_dump(mode="json")["ingest"]["sources"] + [source]
    with pytest.raises(ParamsError, match=rf"source name {name!r} is reserved \(data/leakage/{name}.parquet"):
        load_params(ROOT / "params.yaml", overrides={"ingest.sources": sources})


@pytest.mark.parametrize(("key", "alias"), [("release.evaluated_alias", "latest"), ("release.alias", "V2")])
def test_a_registry_alias_mlflow_reserves_fails_at_load_time(key, alias):
    # MLflow refuses them when the release stage sets the alias, at the end of a run
    with pytest.raises(ParamsError, match=rf"{alias!r} is reserved by the MLflow registry"):
        load_params(ROOT / "params.yaml", overrides={key: alias})
