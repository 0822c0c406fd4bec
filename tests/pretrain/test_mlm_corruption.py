"""The masking-strategy knobs of pretraining (pretrain.mask_token_fraction, random_token_fraction): all-[MASK]
against BERT's 80/10/10 on the same selected tokens, their validation, and that the training masks use them while
the held-out masks stay 80/10/10 (so held-out losses of the two strategies are scored on the same inputs)."""

import pytest
import torch

from pretrain_fixtures import make_cfg
from tasks.pretrain.feed import masked_batch
from tasks.pretrain.mlm import IGNORE_INDEX, mask_tokens
from test_mlm import MASK, make_blocks, make_vocab

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def test_all_mask_corrupts_the_same_selection_with_mask_only():
    ids, maskable = make_blocks(400, 256)
    bert, bert_labels = mask_tokens(ids, maskable, make_vocab(), 0.15, torch.Generator().manual_seed(4))
    default, _ = mask_tokens(ids, maskable, make_vocab(), 0.15, torch.Generator().manual_seed(4), False, 0.8, 0.1)
    assert torch.equal(bert, default)  # the defaults are BERT's 80/10/10
    masked, labels = mask_tokens(ids, maskable, make_vocab(), 0.15, torch.Generator().manual_seed(4), False, 1.0, 0.0)
    selected = labels != IGNORE_INDEX
    assert torch.equal(labels, bert_labels)  # the same tokens are selected: only their corruption differs
    assert bool((masked[selected] == MASK).all()) and torch.equal(masked[~selected], ids[~selected])


@pytest.mark.parametrize(("mask", "random"), [(0.5, 0.3), (0.0, 0.0)])
def test_the_shares_of_the_selected_tokens(mask, random):
    ids, maskable = make_blocks(2000, 512)
    masked, labels = mask_tokens(
        ids, maskable, make_vocab(), 0.3, torch.Generator().manual_seed(6), False, mask, random
    )
    selected = labels != IGNORE_INDEX
    n = int(selected.sum())
    as_mask = int((masked[selected] == MASK).sum()) / n
    changed = int((masked[selected] != ids[selected]).sum()) / n  # random picks equal to the token stay "kept"
    assert as_mask == pytest.approx(mask, abs=0.01)
    assert changed - as_mask == pytest.approx(random, abs=0.01)


def test_fractions_above_one_are_refused():
    with pytest.raises(ValueError, match="exceed 1"):
        make_cfg(mask_token_fraction=0.95, random_token_fraction=0.1)
    assert make_cfg(mask_token_fraction=1.0, random_token_fraction=0.0).mask_token_fraction == 1.0


def test_training_masks_follow_the_params_and_held_out_masks_stay_bert():
    ids, maskable = make_blocks(64, 128)
    blocks = {"input_ids": ids, "maskable": maskable, "attention_mask": torch.ones_like(ids)}
    rows = torch.arange(64)
    train = masked_batch(
        blocks, rows, make_vocab(), 0.3, torch.Generator().manual_seed(2), False, True, corruption=(1.0, 0.0)
    )
    held = masked_batch(blocks, rows, make_vocab(), 0.3, torch.Generator().manual_seed(2), False, True)
    flat = train.input_ids.flatten()
    assert bool((flat[train.positions] == MASK).all())
    assert float((held.input_ids.flatten()[held.positions] == MASK).float().mean()) == pytest.approx(0.8, abs=0.03)


def test_the_trainer_passes_the_params_to_its_training_masks(tmp_path):
    from tasks.pretrain.hardware import setup_distributed
    from tasks.pretrain.init import build_model
    from tasks.pretrain.trainer import Trainer
    from tasks.tracking import NullLog

    ids, maskable = make_blocks(32, 32)
    blocks = {
        "input_ids": ids,
        "maskable": maskable,
        "attention_mask": torch.ones_like(ids),
        "source_id": torch.zeros(32, dtype=torch.long),
        "source_names": ["a"],
    }
    cfg = make_cfg(
        mask_token_fraction=1.0,
        random_token_fraction=0.0,
        mlm_probability=0.3,
        hardware={"device": "cpu", "deterministic": False},
    )
    model = build_model(cfg, 1000, 32, 0)
    trainer = Trainer(cfg, model, make_vocab(), blocks, blocks, setup_distributed(cfg.hardware), NullLog(), tmp_path)
    for batch in trainer._micro_batches(0):
        assert len(batch.positions) > 0 and bool((batch.input_ids.flatten()[batch.positions] == MASK).all())
