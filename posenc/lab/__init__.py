"""The lab's main job: train each encoding short, test it long, report (``posenc compare``)."""
