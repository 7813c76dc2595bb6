"""``release canary``: a candidate served beside the live version, judged on outputs, paired p99 and errors, then
promoted or unloaded (``run``); the checks before anything loads (``prepare``), its traffic, verdict and record
table, and the guard process that cleans up after a killed canary."""
