"""`strix doctor`: what each configured host needs, and whether it is there.

Run first on a new machine or a new Box. Each check says ok or missing, and how to fix it; a check is
*required* when the runs configured for that host cannot work without it (an unreachable registry
only stops image discovery on a host that runs no containers, so there it is a note, not a failure).

Modules by what they check: ``shared`` (the warehouse, the registries), ``local`` (a local host's
engines and models), ``docker_access`` (a Docker host reached, its probe images and devices), ``box``
(the Box's memory and what the checks before production stops find); ``check`` is one check's record,
``run`` runs them all.
"""

from strix_pipeline.doctor.check import Check, failed
from strix_pipeline.doctor.run import run_checks

__all__ = ["Check", "failed", "run_checks"]
