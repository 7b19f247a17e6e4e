"""Tests of leap_stream.core.batch: snapshots as arrays, the river refit, the LightGBM
challenger behind the model interface LeapCore reads, and the feature fingerprint."""

from __future__ import annotations

import math
import pickle
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from core_fixtures import JOBS, T0, completed_event, hours, submitted_event

from leap_stream.core import LeapCore
from leap_stream.core.batch import (
    BoostedModel,
    TrainingSet,
    _Vectoriser,
    feature_fingerprint,
    probe_predictions,
    train_boosted,
    train_river,
    training_rows,
)
from leap_stream.core.catalog import Catalog
from leap_stream.core.events import job_config
from leap_stream.core.features import FeatureEncoder
from leap_stream.core.hardware import HardwareArrays
from leap_stream.core.model import ThroughputModel


@pytest.fixture
def encoder(hw_catalog: Catalog) -> FeatureEncoder:
    return FeatureEncoder(HardwareArrays.from_catalog(hw_catalog))


def _examples(encoder: FeatureEncoder, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Learn examples whose target follows a per-(type, hardware) efficiency plus noise."""
    rng = np.random.default_rng(seed)
    hardware = encoder.names[:12]
    effect = rng.normal(0.0, 0.4, (len(JOBS), len(hardware)))
    out = []
    for i in range(n):
        j, h = int(rng.integers(len(JOBS))), int(rng.integers(len(hardware)))
        job = encoder.job(JOBS[j])
        baseline = encoder.baseline(job)[encoder.hw.index[hardware[h]]]
        target = baseline - 1.0 + effect[j, h] + rng.normal(0.0, 0.05)
        out.append(
            {"job": JOBS[j], "hardware_type": hardware[h], "target": float(target),
             "event_time": T0 + timedelta(minutes=i), "out_of_memory": False}
        )  # fmt: skip
    return out


def _with_teams(examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every fifth example's submission says its team."""
    for example in examples[::5]:
        example["job"] = {**example["job"], "team": "red"}
    return examples


def _predictions(model: Any, encoder: FeatureEncoder) -> np.ndarray:
    return np.array([model.predict_many(encoder.job(job)) for job in JOBS])


def test_training_set_keeps_order_and_leaves_out_out_of_memory_examples(
    encoder: FeatureEncoder,
) -> None:
    examples = _examples(encoder, 50)
    examples[7] = {**examples[7], "out_of_memory": True, "target": 0.0}
    training = TrainingSet.from_examples(examples, encoder.hw.index)
    assert len(training) == 49
    assert np.all(np.diff(training.time_ms) > 0)
    kept = [e for e in examples if not e["out_of_memory"]]
    assert training.target.tolist() == [e["target"] for e in kept]
    assert [training.configs[c] for c in training.config] == [job_config(e["job"]) for e in kept]
    # concat of two halves is the whole; before() cuts strictly before the cutoff
    half = TrainingSet.concat(
        [TrainingSet.from_examples(kept[:20], encoder.hw.index),
         TrainingSet.from_examples(kept[20:], encoder.hw.index)]
    )  # fmt: skip
    assert half.target.tolist() == training.target.tolist()
    cut = training.time_ms[10]
    assert len(training.before(cut)) == 10 and training.before(cut).time_ms.max() < cut


def test_one_time_ordered_pass_is_the_online_model(encoder: FeatureEncoder) -> None:
    examples = _examples(encoder, 400)
    online = ThroughputModel(encoder)
    for e in examples:
        online.learn_one(encoder.job(e["job"]), encoder.hw.index[e["hardware_type"]], e["target"])
    training = TrainingSet.from_examples(examples, encoder.hw.index)
    refit = train_river(training, encoder, passes=1)
    np.testing.assert_array_equal(_predictions(refit, encoder), _predictions(online, encoder))
    assert refit.learned == online.learned == 400
    np.testing.assert_array_equal(refit.seen, online.seen)


def test_more_passes_from_the_online_model_equal_more_passes_from_scratch(
    encoder: FeatureEncoder,
) -> None:
    training = TrainingSet.from_examples(_examples(encoder, 300), encoder.hw.index)
    scratch = train_river(training, encoder, passes=3)
    start = train_river(training, encoder, passes=1)
    warm = train_river(training, encoder, passes=3, start=start)
    np.testing.assert_array_equal(_predictions(warm, encoder), _predictions(scratch, encoder))
    one = train_river(training, encoder, passes=1)
    assert not np.array_equal(_predictions(scratch, encoder), _predictions(one, encoder))
    # counts are of one pass: they decide cold starts and the ranking's risk charge
    for model in (scratch, warm):
        assert model.learned == len(training)
        np.testing.assert_array_equal(model.seen, one.seen)
        for family, seen in one.seen_by_family.items():
            np.testing.assert_array_equal(model.family_seen(family), seen)
    with pytest.raises(ValueError, match="not the first pass"):
        train_river(training, encoder, passes=2, start=ThroughputModel(encoder))


def test_later_passes_over_a_window_learn_only_its_examples(encoder: FeatureEncoder) -> None:
    training = TrainingSet.from_examples(_examples(encoder, 300), encoder.hw.index)
    end_ms = float(training.time_ms[-1]) + 1.0
    window = training.window(end_ms, 100 / 1440)  # the last 100 minutes: 100 examples
    assert len(window) == 100 and window.time_ms.min() >= training.time_ms[200]
    assert training.window(end_ms, None) is training
    # each example keeps its configuration; the window carries only those it uses
    assert [window.configs[c] for c in window.config] == [
        training.configs[c] for c in training.config[200:]
    ]
    assert len(window.configs) == len(set(training.config[200:].tolist()))
    by_hand = train_river(training, encoder, passes=1)
    rows = zip(window.config, window.position, window.target, strict=True)
    for config, position, target in rows:
        by_hand.learn_one(encoder.job(window.configs[config]), int(position), float(target))
    windowed = train_river(training, encoder, passes=2, later=window)
    np.testing.assert_array_equal(_predictions(windowed, encoder), _predictions(by_hand, encoder))
    everything = train_river(training, encoder, passes=2)
    assert not np.array_equal(_predictions(windowed, encoder), _predictions(everything, encoder))
    assert windowed.learned == len(training)  # what it has seen once: every example
    warm = train_river(
        training, encoder, passes=3, start=train_river(training, encoder, passes=1), later=window
    )
    assert warm.learned == len(training)
    np.testing.assert_array_equal(warm.seen, train_river(training, encoder, passes=1).seen)


def test_boosted_model_learns_and_reads_like_a_throughput_model(encoder: FeatureEncoder) -> None:
    examples = _examples(encoder, 1500)
    training = TrainingSet.from_examples(examples, encoder.hw.index)
    boosted = train_boosted(training, encoder, rounds=200)
    assert boosted.learned == 1500
    seen, by_family = training.seen(len(encoder.names))
    np.testing.assert_array_equal(boosted.seen, seen)
    np.testing.assert_array_equal(boosted.family_seen("cnn"), by_family["cnn"])
    # it fits what it was shown: training targets within a few percent
    errors = [
        boosted.predict_many(
            encoder.job(e["job"]), np.array([encoder.hw.index[e["hardware_type"]]])
        )[0]
        - e["target"]
        for e in examples[:200]
    ]
    assert np.median(np.abs(errors)) < 0.05
    # a subset of positions, with a repeat, reads the same cached vector
    job = encoder.job(JOBS[1])
    every = boosted.predict_many(job)
    subset = np.array([5, 0, 5, len(encoder.names) - 1])
    np.testing.assert_array_equal(boosted.predict_many(job, subset), every[subset])
    # prime() (one call for many jobs) and the one-job path agree
    fresh = pickle.loads(pickle.dumps(boosted))
    fresh.prime(encoder.job(j) for j in JOBS)
    np.testing.assert_array_equal(_predictions(fresh, encoder), _predictions(boosted, encoder))
    with pytest.raises(TypeError, match="not online"):
        boosted.learn_one(job, 0, 1.0)


def test_every_type_rows_are_the_vectorised_pair_dicts(encoder: FeatureEncoder) -> None:
    training = TrainingSet.from_examples(_with_teams(_examples(encoder, 300)), encoder.hw.index)
    boosted = train_boosted(training, encoder, rounds=10)
    # a job the model never saw (its one-hots are not in the vocabulary) and a single device
    # (a zero value, left implicit); a team it learned and one it did not
    unseen = {**JOBS[0], "model_type": "never-seen", "num_devices": 1}
    teams = [{**JOBS[1], "team": "red"}, {**JOBS[2], "team": "new"}]
    jobs = [encoder.job(job) for job in [*JOBS, unseen, *teams]]
    n = len(encoder.names)
    expected = boosted.vectoriser.rows(encoder.pair(job, p) for job in jobs for p in range(n))
    got = boosted.every_type_rows(jobs)
    assert got.shape == expected.shape == (len(jobs) * n, len(boosted.vectoriser.vocabulary))
    assert got.nnz < len(jobs) * n * len(encoder.pair_names(jobs[0], 0))  # some entries left out
    for attribute in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(got, attribute), getattr(expected, attribute))


def test_a_team_is_predicted_again_only_where_a_tree_reads_it(encoder: FeatureEncoder) -> None:
    examples = _with_teams(_examples(encoder, 1500))
    vendor = dict(zip(encoder.names, encoder.vendors, strict=True))
    for example in examples[::5]:  # the red team's stack is slow on one vendor's parts
        if vendor[example["hardware_type"]] == vendor[examples[0]["hardware_type"]]:
            example["target"] -= 0.5
    boosted = train_boosted(TrainingSet.from_examples(examples, encoder.hw.index), encoder)
    split_on = boosted.booster.feature_importance("split")[boosted._team_columns("red")]
    assert split_on.max() > 0 and split_on.min() == 0  # read on some types, not on others
    teams = [{**job, "team": team} for job in JOBS for team in ("red", "new", None)]
    jobs = [encoder.job(job) for job in teams]
    n = len(encoder.names)
    every_row = boosted.booster.predict(boosted.every_type_rows(jobs)).reshape(len(jobs), n)
    np.testing.assert_array_equal(boosted._every_type(jobs), every_row)
    boosted.prime(jobs)
    red, new, bare = (boosted.predict_many(job) for job in jobs[:3])
    assert not np.array_equal(red, bare)
    np.testing.assert_array_equal(new, bare)  # a team no tree knows


def test_training_rows_are_the_vectorised_pair_dicts(encoder: FeatureEncoder) -> None:
    examples = _with_teams(_examples(encoder, 300))
    for example in examples[::7]:  # single devices: a zero value, left implicit
        example["job"] = {**example["job"], "num_devices": 1}
    training = TrainingSet.from_examples(examples, encoder.hw.index)
    dicts = [
        encoder.pair(encoder.job(training.configs[c]), p)
        for c, p in zip(training.config.tolist(), training.position.tolist(), strict=True)
    ]
    expected = _Vectoriser.fit(dicts)
    vocabulary, rows = training_rows(training, encoder)
    assert list(vocabulary.items()) == list(expected.vocabulary.items())  # numbered alike
    reference = expected.rows(dicts)
    assert rows.shape == reference.shape == (300, len(vocabulary))
    assert rows.nnz < sum(map(len, dicts))  # some entries left out
    for attribute in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(rows, attribute), getattr(reference, attribute))


def test_boosted_model_pickles_to_the_same_predictions(encoder: FeatureEncoder) -> None:
    training = TrainingSet.from_examples(_examples(encoder, 600), encoder.hw.index)
    boosted = train_boosted(training, encoder, rounds=100)
    expected = _predictions(boosted, encoder)
    loaded = pickle.loads(pickle.dumps(boosted))
    assert isinstance(loaded, BoostedModel) and not loaded.predictions
    np.testing.assert_array_equal(_predictions(loaded, encoder), expected)
    assert probe_predictions(loaded) == probe_predictions(boosted)


def test_feature_fingerprint_follows_the_features(hw_catalog: Catalog) -> None:
    encoder = FeatureEncoder(HardwareArrays.from_catalog(hw_catalog))
    same = FeatureEncoder(HardwareArrays.from_catalog(hw_catalog))
    assert feature_fingerprint(encoder) == feature_fingerprint(same)
    first = next(iter(hw_catalog))
    faster = first.model_copy(update={"memory_bw_tbps": first.memory_bw_tbps * 2})
    changed = Catalog([faster, *list(hw_catalog)[1:]])
    other = FeatureEncoder(HardwareArrays.from_catalog(changed))
    assert feature_fingerprint(other) != feature_fingerprint(encoder)


def test_a_core_ranks_with_a_batch_model_on_its_own_priors(hw_catalog: Catalog) -> None:
    """Only the model is swapped: a rerun of a measured configuration is still predicted from
    the lineage's own measurement, other hardware from the batch model plus the residual."""
    core = LeapCore(hw_catalog)
    candidates = ["H100-SXM", "MI300X", "TPU-v5e"]
    core.on_submitted(submitted_event("j1", "l1", T0, candidates=candidates))
    core.on_completed(completed_event("j1", "l1", hours(2), "H100-SXM", throughput=20_000.0))
    encoder = core.model.encoder
    training = TrainingSet.from_examples(_examples(encoder, 600), encoder.hw.index)
    boosted = train_boosted(training, encoder, rounds=50)
    rerun = submitted_event("j2", "l1", hours(3), candidates=candidates)
    shadow = LeapCore.__new__(LeapCore)
    shadow.__dict__.update(core.__dict__)
    shadow.model, shadow.pending = boosted, {}
    ranking = shadow.on_submitted(rerun)
    online = core.on_submitted({**rerun, "job_id": "j3"})
    h100 = ranking.hardware.index("H100-SXM")
    assert str(ranking.source[h100]) == "lineage_prior"
    assert ranking.predicted[h100] == pytest.approx(20_000.0)
    assert online.predicted[h100] == pytest.approx(20_000.0)
    mi300 = ranking.hardware.index("MI300X")
    assert not math.isclose(ranking.predicted[mi300], online.predicted[mi300], rel_tol=1e-3)
    assert ranking.model_version == "online-600"  # the batch model's count of examples
    assert "j2" not in core.pending  # the shadow kept its own pending submissions
