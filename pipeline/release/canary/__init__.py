"""``release canary``: a candidate served beside the live version, judged on outputs, paired p99 and errors, then
promoted or unloaded (``run``); its traffic, verdict, record table and guard process."""
