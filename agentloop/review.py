"""agentloop.review: runs as documents, diagrams and pages, for reviewing what happened.

``save_run``/``load_run`` and ``run_to_json``/``run_from_json`` keep a
``RunResult`` as a versioned JSON document, checked by replaying it when it
is read; a document that is not one raises ``RunFileError``. What a record
keeps in place of a live object is here too: ``RecordedException`` (an
exception's type and message) and ``NotJSON`` (a rejected reply that was not
JSON). ``to_mermaid``, ``to_dot`` and ``to_svg`` draw the state table (or
one run's path through it); ``path_dot`` and ``path_svg`` draw only the part
of it one run was in, compactly (the report's drawing); ``report_html`` is a
run's page. See the docs' "Reviewing runs" page.
"""

from __future__ import annotations

from agentloop._core.values import NotJSON, RecordedException
from agentloop._errors import RunFileError, SVGUnavailableError
from agentloop._names import publish as _publish
from agentloop._review.diagram import path_dot, path_svg, to_dot, to_mermaid, to_svg
from agentloop._review.report import report_html
from agentloop._review.runfile import load_run, run_from_json, run_to_json, save_run

__all__ = [
    "NotJSON",
    "RecordedException",
    "RunFileError",
    "SVGUnavailableError",
    "load_run",
    "path_dot",
    "path_svg",
    "report_html",
    "run_from_json",
    "run_to_json",
    "save_run",
    "to_dot",
    "to_mermaid",
    "to_svg",
]

_publish(__name__, globals(), __all__)
