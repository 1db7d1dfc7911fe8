"""The leakage study's config: the typed schema of ``study.leakage``, checked at compose time and when a
stage loads its params."""

from stereolens.config.schema import boolean, fraction, integer, list_of, number, one_of, section, text

METHODS = ("set", "ilps", "choice")          # the same tuple as methods.ALL_METHODS
MISSING_TREATMENTS = ("zero", "drop")        # the same tuple as fit.MISSING_TREATMENTS
THIN_RULES = ("keep", "drop")                # the same tuple as fit.THIN_RULES
_method_list = list_of(one_of(METHODS), unique=True)

SCHEMA = section(
    languages=list_of(text(), min_items=1, unique=True), seed_dir=text(), survey=text(),
    min_annotators_per_group=integer(1),
    judgements=section(qc=section(self_agreement_min=fraction(), midpoint=number(), neutral_band=number(0),
                                  max_attention_failures=integer(0))),
    methods=section(masked=_method_list, causal=_method_list, seq2seq=_method_list, chat=_method_list,
                    completion=_method_list),
    choice=section(both_orders=boolean(), n_samples=integer(1), temperature=number(0)),
    fit=section(missing=one_of(MISSING_TREATMENTS), thin_groups=one_of(THIN_RULES), alpha=number(above=0, below=1)),
    report=section(qualitative_top_k=integer(1)),
    batch_tokens=integer(1),
)
