"""``python -m bench soak`` end to end on a few thousand runs: every phase reports, every
run is gapped, abandoned and forgotten, the buffered bytes stay under their bound. Nothing
is timed here (the benchmark's verdict is; machines are noisy)."""

from __future__ import annotations

import re

import pytest

from bench.soak import soak


def test_the_soak_takes_every_run_through_gap_abandon_and_forget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    soak(["--runs", "5000"])
    text = capsys.readouterr().out
    phases = dict(re.findall(r"^  (gap timeout|idle timeout|grace) .*?, ([\d,]+) records out",
                             text, re.M))
    # Each run: its gap and its one event; then its abandoned end; then nothing (tombstones).
    assert {k: int(v.replace(",", "")) for k, v in phases.items()} == {
        "gap timeout": 10_000, "idle timeout": 5_000, "grace": 0,
    }
    buffered = float(re.search(r"buffered peak\s+([\d.]+) MiB", text).group(1))  # type: ignore[union-attr]
    assert 0 < buffered <= 64
    assert re.search(r"changelog\s+\d+ bytes per event fed", text)
