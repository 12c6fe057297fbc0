"""The study core: what every study (``compare``, ``tasks``, ``extend``, ``arena``) shares.

- :mod:`.names`: how messages spell each option, from Python and from the command line.
- :mod:`.codec`: one JSON codec for results files (non-finite floats as strings and back).
- :mod:`.rundir`: one run directory: its lock, the comparable-settings check with a one-line
  refusal, atomic results stamped with their kind and schema version, resume and growth, and
  an overwrite that removes only what the study wrote.
- :mod:`.kinds`: the registry of study kinds (each study module registers its own).
- :mod:`.outputs`: the list of what a study wrote into its folder (``.posenc-outputs.json``),
  kept before each file is written; the only thing an overwrite removes.
- :mod:`.study`: the :class:`Study` protocol (a plan of units of work, each unit's result
  returned as a value and committed by the driver, a report rendered from the results) and
  :func:`run_study`, the driver every study runs.
- :mod:`.ray_units`: the executor that runs a study's units as Ray tasks on a cluster (Ray
  imported only there), and :mod:`.placement`: where each of those units ran.
- :mod:`.tables`, :mod:`.verdict`: one markdown table helper, one verdict type and the one
  minimum of samples below which every verdict abstains.
"""

from .codec import decode, dumps, encode, read_json
from .kinds import register_kind, registered_kinds
from .names import API_NAMES, CLI_NAMES
from .rundir import RESULTS, RunDirectory, StudyKind, read_study_results
from .study import Study, StudyOutcome, Unit, run_study
from .tables import markdown_table
from .verdict import (
                      INCONCLUSIVE,
                      MIN_SAMPLES,
                      NOT_SUPPORTED,
                      NOT_TESTED,
                      STATUSES,
                      SUPPORTED,
                      TOO_FEW,
                      Verdict,
                      too_few_samples,
)

__all__ = ["API_NAMES", "CLI_NAMES", "INCONCLUSIVE", "MIN_SAMPLES", "NOT_SUPPORTED", "NOT_TESTED",
           "RESULTS", "STATUSES", "SUPPORTED", "TOO_FEW", "RunDirectory", "Study", "StudyKind",
           "StudyOutcome", "Unit", "Verdict", "decode", "dumps", "encode", "markdown_table",
           "read_json", "read_study_results", "register_kind", "registered_kinds", "run_study",
           "too_few_samples"]
