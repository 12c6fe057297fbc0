"""The comparison (``posenc compare``): train each encoding short, test it long, on one corpus
or several; its presets, runs, results.json and growth."""
