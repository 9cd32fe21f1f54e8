"""Micro-batching by tokens (`runtime.micro_batch_tokens`, trainers/micro_batch.py): the batch's
loss backpropagated a few rows at a time, token-weighted, must give the update one pass over the
whole batch gives, for SAO (critic steps and policy step), the running mean (its window over the
whole batch) and GRPO (advantages over whole groups, two epochs)."""

import pytest

from testbed.runtimes.ray.learner import flat_state
from tests.sharded_ranks import CLASSES, CONFIGS, model
from tests.test_data_parallel import assert_close, batches
from tests.test_trainers import TOK
from trainers.batching import collate
from trainers.micro_batch import row_ranges, split

# Rows of the test batches are 17-25 tokens wide: 44 tokens is one or two rows per micro-batch.
BUDGET = 44


def test_row_ranges_by_hand():
    # rows x the range's longest row must stay within the budget; a row longer than it goes alone
    assert row_ranges([3, 4, 2, 5], 8) == [(0, 2), (2, 3), (3, 4)]
    assert row_ranges([3, 4, 2, 5], 10) == [(0, 2), (2, 4)]
    assert row_ranges([12, 1], 8) == [(0, 1), (1, 2)]
    assert row_ranges([2, 2, 2], 100) == [(0, 3)]
    assert row_ranges([], 8) == []


def test_split_weights_are_token_shares_and_cover_every_row():
    batch = collate(batches("running_mean", n=1)[0], pad_id=TOK.pad_id)
    pieces = split(batch, BUDGET, batch.action_mask)
    assert len(pieces) > 2
    assert sum(p.weight for p in pieces) == pytest.approx(1.0)
    assert [p.start for p in pieces[1:]] == [p.stop for p in pieces[:-1]] and pieces[-1].stop == 8
    for p in pieces:
        assert p.batch.tokens.numel() <= BUDGET or p.stop - p.start == 1
        assert p.weight == pytest.approx(float(p.batch.action_mask.sum() / batch.action_mask.sum()))


def trainer(kind: str, **args):
    # with the router load-balancing loss on (policy's, and SAO's critic's): a product of two batch
    # means, whose whole-batch expert counts a no-grad routing pass gives each micro-batch
    return CLASSES[kind](model("built"), {**CONFIGS[kind], "router_aux_loss_coef": 0.05, **args}, pad_id=TOK.pad_id)


@pytest.mark.parametrize(
    ("kind", "args"),
    [
        ("sao", {}),
        ("running_mean", {}),
        ("grpo", {}),
        # the other aggregations: a micro-batch takes its token share of the batch's denominator
        ("running_mean", {"loss_aggregation": "sequence_mean"}),
        ("grpo", {"loss_aggregation": "constant", "loss_normaliser": 24}),
        # routing replay: each micro-batch replays its rows' experts (r3 the engine's, r2 its own at the start)
        ("sao", {"routing_replay": "r2"}),
        ("grpo", {"routing_replay": "r3"}),
    ],
)
def test_micro_batched_updates_equal_whole_batch_updates(kind, args):
    whole, micro = trainer(kind, **args), trainer(kind, **args)
    micro.micro_batch_tokens = BUDGET
    for batch in batches(kind, n=2):
        want, got = whole.update(batch), micro.update(batch)
    assert_close(flat_state(micro.state_dict()), flat_state(whole.state_dict()))
    for key, value in want.items():  # the metrics are the whole batch's too
        if isinstance(value, float) and "expert_load" not in key:
            assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def test_the_runtime_setting_reaches_the_trainer_or_is_refused():
    from testbed.runtimes.learner_strategy import micro_batching

    assert micro_batching(trainer("running_mean"), 64).micro_batch_tokens == 64

    class Plugin:  # a trainer without micro-batching
        pass

    assert micro_batching(Plugin(), None)
    with pytest.raises(ValueError, match="runtime.micro_batch_tokens is 64 but Plugin does not micro-batch"):
        micro_batching(Plugin(), 64)
