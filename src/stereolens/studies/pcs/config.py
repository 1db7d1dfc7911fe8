"""The pcs study's config: the typed schema of ``study.pcs``, checked at compose time and when a stage loads
its params."""

from stereolens.config.schema import GENERATOR, boolean, fraction, integer, list_of, number, one_of, section, text

CONDITIONS = ("A", "B", "C")

# conf/study/pcs/judges/: the panel members of judging.JudgeSpec, each with its model config
JUDGE = section(
    id=text(null=True), model=GENERATOR, mode=one_of(("json", "logprob")),  # model null: the top-level model
    logprob_method=one_of(("top_logprobs", "loglikelihood")), top_logprobs=integer(1), temperature=number(0),
    max_tokens=integer(1), retries=integer(0), max_response_chars=integer(1), include_scenario=boolean(),
)

SCHEMA = section(
    name=text(), bank=text(), languages=list_of(text(), min_items=1, unique=True),
    per_dimension_domain=integer(1, null=True), domains=list_of(text(), min_items=1, unique=True, null=True),
    conditions=list_of(one_of(CONDITIONS), min_items=1, unique=True),
    collection=section(temperature=number(0), max_tokens=integer(1), samples=integer(1)),
    validity=section(min_script_share=fraction(), language_id=section(min_hits=integer(1), margin=number(0))),
    calibration=section(pairs_per_feature=integer(1), max_tokens=integer(1)),
    gates=section(enforce=boolean(), construct_validity_min=fraction(), alpha_min=number(-1, 1),
                  calibration_min=fraction(), allow_not_applicable=boolean(), alpha_bootstrap=integer(1)),
    analysis=section(min_gain_steps=number(0)),
    human_validation=section(items_per_comparison=integer(1, null=True), tie_margin=number(0)),
    judges=section(judge_model=GENERATOR, panel=list_of(JUDGE, min_items=1)),
)
