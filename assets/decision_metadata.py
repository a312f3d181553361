"""The switch decision's criteria as a Dagster table: one row per criterion, its figures rounded with
their units, and no machine path (a reason that names a file keeps only its name)."""

import re

import dagster as dg

from strix_pipeline.analysis.decision import Decision, Wording, criterion_title, format_value, held_text

# an absolute path in a reason (a model file, a log, a cache folder): the machine's, not the reader's
_PATH = re.compile(r"(?<![\w.:/])(?:~|/)(?:[\w.+@-]+/)+([\w.+@-]*)")

COLUMNS = (
    ("criterion", "C1-C5, what it asks (glossary: docs/glossary.md)"),
    ("required", "required on this host"),
    ("status", "pass / fail / unknown"),
    ("figure", "the candidate's figure, rounded, with its unit"),
    ("threshold", "what the figure is judged against"),
    ("interval", "95 % interval, where the figure has one"),
    ("held_since", "the date it first held, in the unbroken run that still holds it"),
    ("reason", "why, with the runs it rests on"),
)


def without_paths(text: str) -> str:
    """``/home/u/.cache/x/model.gguf`` -> ``…/model.gguf``: the file named, the machine's folders not."""
    return _PATH.sub(lambda m: f"…/{m.group(1)}" if m.group(1) else "…/", text)


def _figure(v: float | None, unit: str | None) -> str:
    return held_text(v) if unit == "bytes" else format_value(v, unit)


def criteria_table(d: Decision, w: Wording) -> dg.TableMetadataValue:
    rows = []
    for c in d.criteria:
        interval = (
            f"{_figure(c.ci_low, c.unit)} – {_figure(c.ci_high, c.unit)}"
            if c.ci_low is not None and c.ci_high is not None
            else "–"
        )
        rows.append(
            dg.TableRecord(
                {
                    "criterion": f"{c.criterion} {criterion_title(c.criterion, w)}",
                    "required": c.required,
                    "status": c.status,
                    "figure": _figure(c.value, c.unit),
                    "threshold": _figure(c.threshold, c.unit),
                    "interval": interval,
                    "held_since": f"{c.first_held_at:%Y-%m-%d}" if c.first_held_at else "–",
                    "reason": without_paths(c.reason),
                }
            )
        )
    schema = dg.TableSchema(
        [
            dg.TableColumn(name, "bool" if name == "required" else "string", description=text)
            for name, text in COLUMNS
        ]
    )
    return dg.MetadataValue.table(rows, schema=schema)
