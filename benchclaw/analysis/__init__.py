"""Analysis: policy tables with honest cost bounds, and pre-registered decisions.

Pure over plain records (standard library + benchclaw's pure modules): the offline
verifier builds the same ``ExperimentData`` from a bundle and recomputes ``summarise``
byte for byte. Loading from a runs directory lives outside this package
(``benchclaw.analysis.report.load_experiment``), because it needs a Store.
"""

from .inputs import (ExperimentData, RunView, experiment_data, ledger_reservations, lured_tasks,
                     merge_journal, parse_cell, view_from_json, view_run, view_to_json)
from .compare import COMPARE_VERSION, compare, corrections_of, experiment_facts
from ..formats.interval import INCONCLUSIVE, REFUTED, SUPPORTED, Interval
from .render import render_compare_markdown, render_compare_terminal, render_markdown, render_terminal
from ..formats.rules import FUNCTIONS, Rule, RuleError, parse_rule
from .summary import SUMMARY_VERSION, summarise, summarise_with_trials
from .wilson import wilson

__all__ = ["ExperimentData", "RunView", "experiment_data", "ledger_reservations", "merge_journal",
           "lured_tasks", "parse_cell", "view_run", "view_to_json", "view_from_json", "Interval",
           "SUPPORTED", "REFUTED", "INCONCLUSIVE", "FUNCTIONS", "Rule", "RuleError", "parse_rule", "SUMMARY_VERSION",
           "summarise", "summarise_with_trials", "wilson", "render_markdown", "render_terminal",
           "COMPARE_VERSION", "compare", "corrections_of", "experiment_facts", "render_compare_terminal",
           "render_compare_markdown"]
