"""The documents of the ``posenc_essays`` task: the first essays of posenc's essay set
(:func:`posenc.data.essays.essay_documents`), each cut to a number of characters."""

from __future__ import annotations

from typing import Any


def documents(documents: int = 4, characters: int = 6000, **_: Any):
    """A ``datasets.DatasetDict`` with one ``test`` split of ``documents`` rows ``{"name",
    "text"}``; lm-eval also passes the run's metadata (model arguments), ignored here."""
    import datasets

    from posenc.data.essays import essay_documents

    rows = [{"name": name, "text": text[:characters]}
            for name, text in essay_documents()[:documents]]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
