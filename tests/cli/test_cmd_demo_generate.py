"""``posenc demo-generate`` runs through every registered encoding, cached = recomputed."""

from __future__ import annotations

from posenc import list_encodings
from posenc.cli import main


def test_demo_generate_runs_every_encoding(capsys):
    assert main(["demo-generate", "--tokens", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == list_encodings()
    assert all("cached vs full recompute: same" in line for line in lines)
