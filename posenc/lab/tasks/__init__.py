"""The synthetic-task study (``posenc tasks``): exact match against length, with verdicts."""
