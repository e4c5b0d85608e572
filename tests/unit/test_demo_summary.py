"""The demo's closing check: expect: ranges on the base / last iteration, and the CHAIR_i CIs not overlapping."""
from training.demo.summary import check, format_rows


def _rows(base_ci=(0.06, 0.08), last_ci=(0.0, 0.005), pope=0.8):
    return [
        {"iteration": 0, "name": "base", "CHAIR_i": (0.07, *base_ci), "POPE acc": (pope, None, None)},
        {"iteration": 1, "name": "iter_1", "CHAIR_i": (0.002, *last_ci), "POPE acc": (0.79, None, None)},
    ]


def test_ranges_and_the_chair_condition_hold():
    out = check(_rows(), {"base.POPE acc": [0.7, 0.9], "last.CHAIR_i": [0.0, 0.01]})
    assert [ok for _, _, ok in out] == [True, True, True]


def test_a_base_at_chance_is_outside_its_range():
    out = dict((what, ok) for what, _, ok in check(_rows(pope=0.505), {"base.POPE acc": [0.7, 0.9]}))
    assert out["base.POPE acc in [0.7, 0.9]"] is False


def test_overlapping_chair_cis_fail_the_condition():
    out = check(_rows(base_ci=(0.01, 0.08), last_ci=(0.0, 0.02)), {})
    assert out == [("CHAIR_i CI of the last iteration below the base's", "0.0200 < 0.0100", False)]


def test_a_missing_column_and_an_empty_store_fail():
    assert check(_rows(), {"last.MME perc": [300, 400]})[0] == ("last.MME perc", "missing", False)
    assert check([], {}) == [("rows", "the store holds no demo checkpoints", False)]


def test_table_shows_cis_for_chair_and_a_dash_for_what_is_missing():
    text = format_rows(_rows())
    assert "0.070 [0.060, 0.080]" in text and "0.800" in text
    assert text.splitlines()[2].split()[-1] == "-"  # no reward gap on the base row


def test_pope_column_is_the_whole_sets_row_not_a_settings(monkeypatch):
    """POPE stores its whole-set accuracy (no variant) and one row per setting (random/popular/adversarial);
    the table shows the whole set's, whatever order the rows were written in."""
    import pandas as pd

    from evalsuite.store.store import Snapshot
    from training.demo.summary import summary_rows

    rows = [("pope", "pope_accuracy", None, 0.984), ("pope", "pope_accuracy", "random", 0.985),
            ("pope", "pope_accuracy", "adversarial", 0.983), ("chair", "CHAIRi", "original", 0.05)]
    df = pd.DataFrame([{"iteration": 0, "written_at": f"t{i}", "label": "base", "task": t, "metric": m,
                        "variant": v, "value": x, "ci_low": None, "ci_high": None}
                       for i, (t, m, v, x) in enumerate(rows)])
    monkeypatch.setattr(Snapshot, "metrics", lambda self, *a, **k: df)
    (row,) = summary_rows("unused")
    assert row["POPE acc"][0] == 0.984 and row["CHAIR_i"][0] == 0.05
