"""Views of a span table for people: a terminal Gantt chart and a self-contained HTML report.

from hotspan.report import gantt, step_gantts, html_report
"""

from __future__ import annotations

from ._gantt import gantt, step_gantts
from .html import html_report

__all__ = ["gantt", "html_report", "step_gantts"]
