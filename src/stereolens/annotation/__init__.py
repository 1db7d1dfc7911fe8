"""Annotation layer shared by the studies: tasks out, judgements in, quality control,
agreement, aggregation, and simulated / LLM-panel annotators.

Modules: :mod:`.scales` (answer scales), :mod:`.tasks` (export, import, validation),
:mod:`.simulate` (seeded simulated annotators), :mod:`.llm_panel` (models as annotators),
:mod:`.qc` (attention checks, self-agreement, coverage), :mod:`.agreement` (kappa, alpha,
bootstrap CIs, vote ratios), :mod:`.aggregate` (majority vote, median Likert, pole-split
survey matrices), :mod:`.config` (the typed ``annotation`` config section) and
:mod:`.round` (one round end to end: collect, QC, agreement, aggregate, gate).
Every judgement table carries a ``source`` column:
``human``, ``llm_panel`` or ``simulated``.
"""

SOURCES = ("human", "llm_panel", "simulated")
