"""A comparison's report.md and index.html, and their redrawing from results.json."""
