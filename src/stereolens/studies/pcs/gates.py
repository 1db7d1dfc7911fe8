"""The judge panel's gates (Fifteen Percent Fluency appendix B.1): construct validity, inter-judge alpha and calibration
accuracy against their configured thresholds, and the version of the calibration set they rest on."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import DataError
from stereolens.io import read_csv_checked
from stereolens.studies.pcs.analysis import cell_scores, check_scores
from stereolens.studies.pcs.calibration import file_sha256
from stereolens.studies.pcs.judging import calibration_accuracy, construct_validity, inter_judge_alpha


def evaluate_gates(scores: pd.DataFrame, calib_scores: pd.DataFrame, gates_cfg: dict[str, Any]) -> dict[str, Any]:
    """The three appendix B.1 figures and whether each passes its configured threshold."""
    checked = check_scores(scores)
    cv = construct_validity(cell_scores(checked))
    alpha = inter_judge_alpha(checked, n_boot=int(gates_cfg.get("alpha_bootstrap", 200)))
    cal = calibration_accuracy(calib_scores.dropna(subset=["score"]))
    cal_min = min(cal["by_dimension"].values()) if cal["by_dimension"] else math.nan

    def gate(observed: float, threshold: float) -> dict[str, Any]:
        passed = None if observed is None or (isinstance(observed, float) and math.isnan(observed)) else bool(observed >= threshold)
        return {"observed": observed, "threshold": threshold, "passed": passed}

    gates = {
        "construct_validity": {**gate(cv["construct_validity"], float(gates_cfg.get("construct_validity_min", 0.8))), "n": cv["n"]},
        "inter_judge_alpha": {**gate(alpha["alpha"], float(gates_cfg.get("alpha_min", 0.6))), **{k: v for k, v in alpha.items() if k != "alpha"}},
        "calibration_accuracy": {**gate(cal_min, float(gates_cfg.get("calibration_min", 0.9))),
                                 "overall": cal["accuracy"], "by_dimension": cal["by_dimension"],
                                 "by_judge": cal.get("by_judge", {}), "n_pairs": cal["n_pairs"]},
    }
    # a gate that cannot be computed (one judge: no alpha) passes only if the config allows it
    allow_na = bool(gates_cfg.get("allow_not_applicable", True))
    all_passed = all(g["passed"] is True or (g["passed"] is None and allow_na) for g in gates.values())
    return {"enforced": bool(gates_cfg.get("enforce", True)), "all_passed": all_passed,
            "allow_not_applicable": allow_na, "gates": gates}


def calibration_set_version(calib_scores: pd.DataFrame, path: Path, scores_path: Path) -> dict[str, Any]:
    """Path, sha256 and size of the calibration set at ``path`` that the panel scored in ``calib_scores``
    (read from ``scores_path``); a stale score table is refused."""
    if not path.exists():
        raise DataError(f"{path} not found: run the pcs-calibration-set stage first")
    calib = read_csv_checked(path, ["pair_id", "pole"], what="calibration set", keep_default_na=False)
    stale = sorted(set(calib_scores["pair_id"].astype(str)) - set(calib["pair_id"].astype(str)))
    if stale:
        raise DataError(f"{scores_path} scores pair(s) {stale[:3]} that {path} does not hold: "
                        f"rerun pcs-judge on the current calibration set")
    return {"path": str(path), "sha256": file_sha256(path), "n_exemplars": int(len(calib)),
            "n_pairs": int(calib["pair_id"].nunique())}
