"""The study core: what every study (``compare``, ``tasks``, ``extend``) shares.

- :mod:`.codec`: one JSON codec for results files (non-finite floats as strings and back).
- :mod:`.rundir`: one run directory: its lock, the comparable-settings check with a one-line
  refusal, atomic results stamped with their kind and schema version, resume and growth, and
  an overwrite that removes only what the study wrote.
- :mod:`.outputs`: the list of what a study wrote into its folder (``.posenc-outputs.json``),
  kept before each file is written; the only thing an overwrite removes.
- :mod:`.study`: the :class:`Study` protocol (a plan of units of work, one unit run at a
  time, a report rendered from the results) and :func:`run_study`, the loop every study runs.
- :mod:`.tables`, :mod:`.verdict`: one markdown table helper and one verdict type.
"""

from .codec import decode, dumps, encode, read_json
from .rundir import API_NAMES, CLI_NAMES, RESULTS, RunDirectory, StudyKind, read_study_results
from .study import Study, StudyOutcome, Unit, run_study
from .tables import markdown_table
from .verdict import INCONCLUSIVE, NOT_SUPPORTED, NOT_TESTED, STATUSES, SUPPORTED, Verdict

__all__ = ["API_NAMES", "CLI_NAMES", "INCONCLUSIVE", "NOT_SUPPORTED", "NOT_TESTED", "RESULTS", "STATUSES", "SUPPORTED",
           "RunDirectory", "Study", "StudyKind", "StudyOutcome", "Unit", "Verdict", "decode",
           "dumps", "encode", "markdown_table", "read_json", "read_study_results", "run_study"]
