"""Published claims about length extrapolation and the evidence they are decided on: runs
looked up by label, estimates with their noise, the papers' own numbers."""
