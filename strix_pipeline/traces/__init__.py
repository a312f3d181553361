"""Recorded traffic as a workload: trace files read into one typed model (``model``, ``formats``),
summarised (``summary``) and stored normalised for replay (``store``). The replay itself is the
load generator's (``loadgen.trace_replay``)."""
